package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/softirdma/softirdma/compat/perftest"
	"github.com/softirdma/softirdma/emu"
)

func init() {
	register("perf", "perftest's peer: write|read|atomic|send like ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_bw", runPerf)
}

func runPerf(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("perf", stderr)
	var o perftest.Options
	var lc linkFlags
	lc.register(fs)
	server := fs.Bool("server", false, "wait for a client (the tool without a host name)")
	fs.IntVar(&o.Port, "p", 18515, "TCP port of the exchange")
	fs.IntVar(&o.Size, "s", 0, "message size (65536; atomic is always 8)")
	fs.IntVar(&o.Iters, "n", 0, "iterations (5000 for write, 1000 otherwise)")
	fs.IntVar(&o.TxDepth, "t", 128, "WRs outstanding (client)")
	fs.IntVar(&o.MTU, "m", 0, "path MTU in bytes (1024, or the peer's if lower)")
	fs.IntVar(&o.OutReads, "o", 16, "READs and atomics outstanding this side accepts")
	gidIndex := fs.Int("x", 1, "GID index: 0 the IPv6 link-local GID, 1 the IPv4-mapped one (as rxe numbers them)")
	timeout := fs.Duration("timeout", 0, "give up after this long (0 for none)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma perf write|read|atomic|send [-server | HOST] -link KIND:ADDRS -ip ADDR [flags]")
		fmt.Fprintln(stderr, "Speaks perftest's exchange and runs its traffic, e.g. against ib_write_bw in a QEMU guest:")
		fmt.Fprintln(stderr, "  softirdma perf write -server -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1")
		fs.PrintDefaults()
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fs.Usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	test, err := perftest.ParseTest(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "softirdma perf: %v\n", err)
		return 2
	}
	o.Test = test
	host, code, done := parseWithOneArg(fs, args[1:])
	if done {
		return code
	}
	o.Server = *server
	if !o.Server {
		if host == "" {
			fmt.Fprintln(stderr, "softirdma perf: give a server's host name, or -server")
			return 2
		}
		o.Host = host
	}
	return runPeer("perf", &lc, *gidIndex, "-x", *timeout, stderr, func(ctx context.Context, dev *emu.Device, gid netip.Addr) error {
		o.GID = gid
		_, err := perftest.Run(ctx, dev, o, stdout)
		return err
	})
}
