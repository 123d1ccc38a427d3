package cmpeer_test

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/cmatose"
	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/compat/rping"
	"github.com/softirdma/softirdma/compat/udaddy"
	"github.com/softirdma/softirdma/internal/loophosts"
)

// Each tool refuses options out of its range before it does anything, worded as it always has,
// naming the first that is out of range; udaddy's size is bounded by the port's MTU (4096 on
// these hosts).
func TestToolOptionsWorded(t *testing.T) {
	h, _ := loophosts.Pair(t, 0, 9)
	dev := h.Device()
	addr := netip.MustParseAddr("192.0.2.1")
	ucmatose := func(o cmpeer.Options) error { return cmatose.Run(context.Background(), dev, o, io.Discard) }
	uudaddy := func(o cmpeer.Options) error { return udaddy.Run(context.Background(), dev, o, io.Discard) }
	rpingRun := func(o cmpeer.Options) error {
		_, err := rping.Run(context.Background(), dev, rping.Options{Options: o}, io.Discard)
		return err
	}
	for _, c := range []struct {
		run  func(cmpeer.Options) error
		o    cmpeer.Options
		want string
	}{
		{ucmatose, cmpeer.Options{Addr: addr, Connections: 1025}, "cmatose: 1025 connections is out of range (1..1024)"},
		{ucmatose, cmpeer.Options{Addr: addr, Count: -1, Size: 10}, "cmatose: count -1 is out of range (0..16384)"},
		{ucmatose, cmpeer.Options{Addr: addr, Size: 1<<20 + 1}, "cmatose: size 1048577 is out of range (0..1048576)"},
		{ucmatose, cmpeer.Options{Size: 10}, "cmatose: an address is needed"},
		{ucmatose, cmpeer.Options{Addr: addr, Wait: -time.Second}, "cmatose: negative timeout"},
		{uudaddy, cmpeer.Options{Addr: addr, Connections: -1}, "udaddy: -1 connections is out of range (1..1024)"},
		{uudaddy, cmpeer.Options{Addr: addr, Count: 1 << 15, Size: 1}, "udaddy: count 32768 is out of range (0..16384)"},
		{uudaddy, cmpeer.Options{Addr: addr, Size: -1}, "udaddy: size -1 is negative"},
		{uudaddy, cmpeer.Options{Addr: addr, Size: 4097}, "udaddy: message_size 4097 is larger than active mtu 4096"},
		{uudaddy, cmpeer.Options{Size: 1024}, "udaddy: an address is needed"},
		{uudaddy, cmpeer.Options{Addr: addr, Timeout: -time.Second}, "udaddy: negative timeout"},
		{rpingRun, cmpeer.Options{Addr: addr, Size: 15, Count: -1}, "rping: size 15 is out of range (16..65536)"},
		{rpingRun, cmpeer.Options{Addr: addr, Count: -1}, "rping: count -1 is out of range (0..100000000)"},
		{rpingRun, cmpeer.Options{}, "rping: an address is needed (-a)"},
		{rpingRun, cmpeer.Options{Addr: addr, Wait: -time.Second}, "rping: negative timeout"},
	} {
		if got := ctrltest.Text(c.run(c.o)); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}

// A tool's defaults fill the options left zero; a zero size sends nothing where the tool takes
// one, and is the default size where it does not.
func TestFill(t *testing.T) {
	d := cmpeer.Options{Port: 7, Connections: 2, Count: 3, Size: 4, Timeout: time.Second}
	for _, c := range []struct {
		minSize int
		o, want cmpeer.Options
	}{
		{0, cmpeer.Options{Count: 5}, cmpeer.Options{Port: 7, Connections: 2, Timeout: time.Second}},
		{0, cmpeer.Options{Count: 5, Size: 6}, cmpeer.Options{Port: 7, Connections: 2, Count: 5, Size: 6, Timeout: time.Second}},
		{1, cmpeer.Options{Count: 5}, cmpeer.Options{Port: 7, Connections: 2, Count: 5, Size: 4, Timeout: time.Second}},
		{1, cmpeer.Options{Port: 8, Connections: 9, Timeout: time.Minute}, cmpeer.Options{Port: 8, Connections: 9, Size: 4, Timeout: time.Minute}},
	} {
		o := c.o
		cmpeer.Tool{Defaults: d, MinSize: c.minSize}.Fill(&o)
		if o.Port != c.want.Port || o.Connections != c.want.Connections || o.Count != c.want.Count || o.Size != c.want.Size || o.Timeout != c.want.Timeout {
			t.Errorf("MinSize %d, %+v: filled %+v, want %+v", c.minSize, c.o, o, c.want)
		}
	}
}

// ucmatose and udaddy run both sides against each other over a real-time link, four
// connections, and print what the C tools print.
func TestToolServerAndClient(t *testing.T) {
	for _, c := range []struct {
		name           string
		run            func(context.Context, *engine.Device, cmpeer.Options, io.Writer) error
		defaults       cmpeer.Options
		server, client string
	}{
		{"cmatose", cmatose.Run, cmatose.Defaults(),
			"cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			"cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"},
		{"udaddy", udaddy.Run, udaddy.Defaults(),
			"udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n",
			"udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			so, co := c.defaults, c.defaults
			so.Connections, co.Connections = 4, 4
			sout, cout := ctrltest.ToolPair(t, c.run, so, co)
			if sout != c.server || cout != c.client {
				t.Fatalf("server printed\n%s\nclient printed\n%s", sout, cout)
			}
		})
	}
}

// ucmatose and udaddy refuse options out of range, and a missing address, with an error that
// names the tool.
func TestToolOptionsChecked(t *testing.T) {
	h, _ := loophosts.Pair(t, 0, 9)
	dev := h.Device()
	ip := dev.IP()
	for _, c := range []struct {
		name string
		run  func(context.Context, *engine.Device, cmpeer.Options, io.Writer) error
		o    cmpeer.Options
	}{
		{"cmatose", cmatose.Run, cmpeer.Options{Addr: ip, Connections: cmatose.MaxConnections + 1}},
		{"cmatose", cmatose.Run, cmpeer.Options{Addr: ip, Count: -1, Size: 10}},
		{"cmatose", cmatose.Run, cmpeer.Options{Addr: ip, Size: cmatose.MaxSize + 1}},
		{"cmatose", cmatose.Run, cmpeer.Options{}},
		{"udaddy", udaddy.Run, cmpeer.Options{Addr: ip, Connections: udaddy.MaxConnections + 1}},
		{"udaddy", udaddy.Run, cmpeer.Options{Addr: ip, Count: -1, Size: 10}},
		{"udaddy", udaddy.Run, cmpeer.Options{Addr: ip, Count: 1, Size: 4097}},
		{"udaddy", udaddy.Run, cmpeer.Options{}},
	} {
		if err := c.run(context.Background(), dev, c.o, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.name+":") {
			t.Errorf("%s %+v: %v", c.name, c.o, err)
		}
	}
}

// TestRping runs softirdma's rping against itself over real sockets: ten pings, verbose and
// validated, then the client disconnects and both end.
func TestRping(t *testing.T) {
	hs, hc := loophosts.Pair(t, 0, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The client starts once the server listens: before that the server's device rejects it
	// (INVALID_SERVICE_ID), as the kernel's rdma_cm would, and rping does not retry.
	listening := make(chan struct{})
	s, c := ctrltest.Both(func(out io.Writer) (rping.Result, error) {
		return rping.Run(ctx, hs.Device(), rping.Options{Options: cmpeer.Options{Server: true, Addr: hs.Device().IP(), Count: 10, Listening: func() { close(listening) }}, Verbose: true}, out)
	}, func(out io.Writer) (rping.Result, error) {
		select {
		case <-listening:
		case <-ctx.Done():
			return rping.Result{}, ctx.Err()
		}
		return rping.Run(ctx, hc.Device(), rping.Options{Options: cmpeer.Options{Addr: hs.Device().IP(), Count: 10}, Verbose: true, Validate: true}, out)
	})
	ctrltest.BothSucceeded(t, s, c)
	sres, cres, sout, cout := s.Res, c.Res, &s.Out, &c.Out
	if sres.Pings != 10 || cres.Pings != 10 {
		t.Fatalf("pings: server %d, client %d", sres.Pings, cres.Pings)
	}
	// 64 bytes: the 13 of "rdma-ping-0: ", 50 letters from 'A' on, and the 0.
	want := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	lines := strings.Split(strings.TrimSpace(cout.String()), "\n")
	if len(lines) != 10 || lines[0] != want || lines[9] != "ping data: rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA" {
		t.Fatalf("client output:\n%s", cout.String())
	}
	if !strings.HasPrefix(sout.String(), "server "+want) {
		t.Fatalf("server output:\n%s", sout.String())
	}
}

// An rping client aimed at its own device's address is told so at once, not rejected by its own
// loopback with "INVALID_SERVICE_ID".
func TestRpingClientOwnAddress(t *testing.T) {
	_, hc := loophosts.Pair(t, 0, 9)
	_, err := rping.Run(context.Background(), hc.Device(), rping.Options{Options: cmpeer.Options{Addr: hc.Device().IP(), Timeout: 5 * time.Second}}, &bytes.Buffer{})
	want := "rping: 192.0.2.2 is this device's own address: a client connects to a server elsewhere on the link (the server's -ip), not to itself"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}
