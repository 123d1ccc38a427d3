package cmpeer_test

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

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
