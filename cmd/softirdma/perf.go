package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"

	"github.com/softirdma/softirdma/compat/perftest"
)

func init() {
	registerPeer("perf", "perftest's peer: write|read|atomic|send|send_lat like ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_bw, ib_send_lat", runPerf)
}

func runPerf(args []string, stdout, stderr io.Writer, run peerRun) int {
	fs := newFlagSet("perf", stderr)
	var f perfFlags
	f.register(fs, stderr)
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	words, code, done := parseWithArgs(fs, args)
	if done {
		return code
	}
	test, host, err := perfWords(words)
	if err != nil {
		fmt.Fprintf(stderr, "softirdma perf: %v (softirdma perf write|read|atomic|send|send_lat [-server | HOST] [flags])\n", err)
		return 2
	}
	f.o.Test = test
	if code := f.check(fs, stderr); code != 0 {
		return code
	}
	o, pf := f.o, &f.pf
	if !pf.server {
		o.Host = host
	}
	o.Server, o.Wait, o.Idle, o.QPTimeout, o.RetryCount = pf.server, pf.wait, run.idle, &pf.qpTimeout, &pf.retry
	return runPeer("perf", host, &f.lc, pf, run, stderr, func(ctx context.Context, h *realtime.Host, gid netip.Addr, log io.Writer) (engine.QPAttr, error) {
		o.GID, o.Log = gid, log
		if o.RDMACM {
			o.Listening = func() { fmt.Fprintf(stderr, "softirdma perf: listening through rdma_cm on port %d\n", o.Port) }
		}
		res, err := perftest.Run(ctx, h.Device(), o, stdout)
		return res.QP, err
	})
}

// perfFlags are perf's flags, onto perftest's options.
type perfFlags struct {
	o    perftest.Options
	lc   linkFlags
	pf   peerFlags
	conn string
}

func (f *perfFlags) register(fs flagSet, stderr io.Writer) {
	o := &f.o
	f.lc.register(fs)
	fs.StringVar(&f.conn, "c", "RC", "connection type: RC, or UD (send only; as ib_send_bw -c UD)")
	fs.IntVar(&o.Port, "p", 18515, "TCP port of the exchange (with -R: the rdma_cm port)")
	fs.BoolVar(&o.RDMACM, "R", false, "connect through rdma_cm, as perftest's -R: no TCP; HOST is the server's RoCE address (RC only)")
	fs.IntVar(&o.Size, "s", 65536, fmt.Sprintf("message size, 1..%d (atomic is always 8; UD: the MTU unless given, and at most that)", perftest.MaxSize))
	fs.IntVar(&o.Iters, "n", 0, fmt.Sprintf("iterations, %d..%d (default 5000 for write, 1000 otherwise)", perftest.MinIters, perftest.MaxIters))
	fs.IntVar(&o.TxDepth, "t", 128, fmt.Sprintf("WRs outstanding (client), 1..%d", perftest.MaxTxDepth))
	fs.IntVar(&o.MTU, "m", 1024, "path MTU in bytes: 256, 512, 1024, 2048 or 4096 (the peer's if lower)")
	fs.IntVar(&o.RateLimit, "rate_limit", 0, fmt.Sprintf("client: at most this many messages per second, 0..%d, 0 for no limit (perftest's --rate_limit N --rate_units p --rate_limit_type SW)", perftest.MaxRateLimit))
	fs.IntVar(&o.OutReads, "o", 16, fmt.Sprintf("READs and atomics outstanding this side accepts, 1..%d", perftest.MaxOutReads))
	f.pf.register(fs, "x", "GID index: 0 the IPv6 link-local GID, 1 the IPv4-mapped one (as rxe numbers them)", "(0 for none)")
	setUsage(fs, stderr,
		"usage: softirdma perf write|read|atomic|send|send_lat [-server | HOST] -link KIND:ADDRS -ip ADDR [flags]",
		"Speaks perftest's exchange and runs its traffic (the flags may come before or after the test",
		"and HOST), e.g. against ib_write_bw in a QEMU guest:",
		"  softirdma perf write -server -link dgram:127.0.0.1:9002,127.0.0.1:9001 -ip 192.168.77.1",
	)
}

// check checks the numbers given, and the connection type against the test and -R; 0 when all is
// well. A size not given is left to the test's default.
func (f *perfFlags) check(fs flagSet, stderr io.Writer) int {
	o := &f.o
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	checks := append(f.pf.checks(),
		intRange("p", o.Port, 1, 65535),
		intRange("s", o.Size, 1, perftest.MaxSize),
		intRange("t", o.TxDepth, 1, perftest.MaxTxDepth),
		oneOf("m", o.MTU, 256, 512, 1024, 2048, 4096),
		intRange("o", o.OutReads, 1, perftest.MaxOutReads),
		intRange("rate_limit", o.RateLimit, 0, perftest.MaxRateLimit),
		floatRange("loss", f.lc.loss, 0, 0.5), f.lc.windowCheck())
	if set["n"] { // unset, it is the test's default
		checks = append(checks, intRange("n", o.Iters, perftest.MinIters, perftest.MaxIters))
	}
	if o.Test == perftest.Atomic && set["s"] { // perftest: "Message size cannot be changed for Atomic tests"
		checks = append(checks, flagCheck{"s", strconv.Itoa(o.Size), "atomic messages are always 8 bytes", o.Size == 8})
	}
	if code := checkFlags(stderr, "perf", checks...); code != 0 {
		return code
	}
	switch strings.ToUpper(f.conn) {
	case "RC":
		o.Conn = engine.QPTypeRC
	case "UD":
		o.Conn = engine.QPTypeUD
	default:
		fmt.Fprintf(stderr, "softirdma perf: -c %q: RC or UD\n", f.conn)
		return 2
	}
	if o.Conn == engine.QPTypeUD && o.Test == perftest.SendLat {
		fmt.Fprintln(stderr, "softirdma perf: -c UD: send_lat runs on RC here (UD latency is not supported)")
		return 2
	}
	if o.Conn == engine.QPTypeUD && o.Test != perftest.Send {
		fmt.Fprintln(stderr, "softirdma perf: -c UD: UD connection only possible in SEND verb")
		return 2
	}
	if o.Test == perftest.SendLat && o.RDMACM {
		fmt.Fprintln(stderr, "softirdma perf: -R runs the bandwidth tests (send_lat exchanges over TCP)")
		return 2
	}
	if o.Conn == engine.QPTypeUD && o.RDMACM {
		fmt.Fprintln(stderr, "softirdma perf: -R connects RC QPs (UD through rdma_cm is not supported)")
		return 2
	}
	if !set["s"] {
		o.Size = 0 // the test's default
	}
	return 0
}

// perfWords finds the test and the host among perf's arguments: the test word may stand before
// or after the host, and the flags anywhere around them.
func perfWords(words []string) (test perftest.Test, host string, err error) {
	var tests, hosts []string
	for _, w := range words {
		if _, err := perftest.ParseTest(w); err == nil {
			tests = append(tests, w)
		} else {
			hosts = append(hosts, w)
		}
	}
	switch {
	case len(tests) > 1:
		return 0, "", fmt.Errorf("one test at a time, got %q and %q", tests[0], tests[1])
	case len(tests) == 0 && len(hosts) == 0:
		return 0, "", errors.New("no test given: write, read, atomic, send or send_lat")
	case len(tests) == 0 && len(hosts) == 1:
		return 0, "", fmt.Errorf("no test %q: write, read, atomic, send or send_lat", hosts[0])
	case len(tests) == 0:
		return 0, "", fmt.Errorf("no test among %q and %q: write, read, atomic, send or send_lat", hosts[0], hosts[1])
	case len(hosts) > 1:
		return 0, "", fmt.Errorf("more than one host: %q and %q", hosts[0], hosts[1])
	}
	test, _ = perftest.ParseTest(tests[0])
	if len(hosts) == 1 {
		host = hosts[0]
	}
	return test, host, nil
}
