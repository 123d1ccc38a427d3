package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os/signal"
	"syscall"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw"
	"github.com/softirdma/softirdma/hw/vfiouser"
)

func init() {
	register("serve", "the device: softirdma as a PCI RDMA NIC for QEMU over a vfio-user socket", runServe)
}

// serveOptions are serve's flags, checked.
type serveOptions struct {
	socket string
	ip     netip.Addr
	mac    [6]byte
	debug  bool
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	socket := fs.String("socket", "", "the vfio-user socket to listen on (required)")
	ip := fs.String("ip", "192.0.2.1", "the device's address until a guest driver programs its GIDs")
	mac := fs.String("mac", "02:53:52:00:00:01", "the device's MAC address until a guest driver sets one")
	debug := fs.Bool("debug", false, "log every vfio-user request")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softirdma serve -socket PATH [-ip ADDR] [-mac MAC] [-debug]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves the softirdma PCI function (docs/device.md) to QEMU's vfio-user-pci on PATH, one")
		fmt.Fprintln(stderr, "QEMU at a time, until SIGINT or SIGTERM. The device reaches only itself for now: two QPs")
		fmt.Fprintln(stderr, "of the guest talk over its loopback. The QEMU options to attach it are printed at start.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softirdma serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	o := serveOptions{socket: *socket, debug: *debug}
	if o.socket == "" {
		fmt.Fprintln(stderr, "softirdma serve: -socket PATH is required")
		return 2
	}
	var err error
	if o.ip, err = netip.ParseAddr(*ip); err != nil {
		fmt.Fprintf(stderr, "softirdma serve: -ip %q is not an IP address\n", *ip)
		return 2
	}
	hwAddr, err := net.ParseMAC(*mac)
	if err != nil || len(hwAddr) != 6 {
		fmt.Fprintf(stderr, "softirdma serve: -mac %q is not a MAC address\n", *mac)
		return 2
	}
	copy(o.mac[:], hwAddr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, o, stdout, stderr)
}

// serve runs the device until ctx ends.
func serve(ctx context.Context, o serveOptions, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	if o.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	srv, _, err := vfiouser.NewFunction(vfiouser.Config{SocketPath: o.socket, Logger: log},
		hw.Config{Name: "softirdma0", Clock: emu.NewWallClock(), MAC: o.mac, IP: o.ip})
	if err != nil {
		fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
		return 1
	}
	if err := srv.Listen(); err != nil {
		fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
		return 1
	}
	log.Info("listening", "socket", o.socket, "ip", o.ip, "mac", net.HardwareAddr(o.mac[:]).String())
	fmt.Fprintf(stdout, "softirdma serve: listening on %s; attach it to QEMU with:\n", o.socket)
	fmt.Fprintf(stdout, "  -object memory-backend-memfd,id=mem,size=512M,share=on -machine q35,memory-backend=mem \\\n")
	fmt.Fprintf(stdout, "  -device '{\"driver\":\"vfio-user-pci\",\"socket\":{\"path\":%q,\"type\":\"unix\"}}'\n", o.socket)
	err = srv.Serve(ctx)
	_ = srv.Close()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "softirdma serve: %v\n", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
