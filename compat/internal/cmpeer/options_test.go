package cmpeer_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softirdma/softirdma/compat/cmatose"
	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/compat/internal/ctrltest"
	"github.com/softirdma/softirdma/compat/rping"
	"github.com/softirdma/softirdma/compat/udaddy"
)

// Each tool fills in its own defaults and words a refusal as it always has, whichever of its
// options is out of range first; udaddy's size is bounded by the port's MTU (1024 here).
func TestToolOptionsWorded(t *testing.T) {
	addr := netip.MustParseAddr("192.0.2.1")
	for _, c := range []struct {
		tool cmpeer.Tool
		o    cmpeer.Options
		want string
	}{
		{cmatose.Tool, cmpeer.Options{Addr: addr, Connections: 1025}, "cmatose: 1025 connections is out of range (1..1024)"},
		{cmatose.Tool, cmpeer.Options{Addr: addr, Count: -1, Size: 10}, "cmatose: count -1 is out of range (0..16384)"},
		{cmatose.Tool, cmpeer.Options{Addr: addr, Size: 1<<20 + 1}, "cmatose: size 1048577 is out of range (0..1048576)"},
		{cmatose.Tool, cmpeer.Options{Size: 10}, "cmatose: an address is needed"},
		{cmatose.Tool, cmpeer.Options{Addr: addr, Wait: -time.Second}, "cmatose: negative timeout"},
		{cmatose.Tool, cmpeer.Options{Addr: addr, Count: 20000}, ""}, // no size: no messages
		{udaddy.Tool, cmpeer.Options{Addr: addr, Connections: -1}, "udaddy: -1 connections is out of range (1..1024)"},
		{udaddy.Tool, cmpeer.Options{Addr: addr, Count: 1 << 15, Size: 1}, "udaddy: count 32768 is out of range (0..16384)"},
		{udaddy.Tool, cmpeer.Options{Addr: addr, Size: -1}, "udaddy: size -1 is negative"},
		{udaddy.Tool, cmpeer.Options{Addr: addr, Size: 1025}, "udaddy: message_size 1025 is larger than active mtu 1024"},
		{udaddy.Tool, cmpeer.Options{Size: 1024}, "udaddy: an address is needed"},
		{udaddy.Tool, cmpeer.Options{Addr: addr, Timeout: -time.Second}, "udaddy: negative timeout"},
		{rping.Tool, cmpeer.Options{Addr: addr, Size: 15}, "rping: size 15 is out of range (16..65536)"},
		{rping.Tool, cmpeer.Options{Addr: addr, Count: -1}, "rping: count -1 is out of range (0..100000000)"},
		{rping.Tool, cmpeer.Options{}, "rping: an address is needed (-a)"},
		{rping.Tool, cmpeer.Options{Addr: addr, Wait: -time.Second}, "rping: negative timeout"},
		{rping.Tool, cmpeer.Options{Addr: addr, Connections: 5000}, ""}, // one connection, not an option
	} {
		o := c.o
		c.tool.Fill(&o)
		if got := ctrltest.Text(c.tool.Check(o, 1024)); got != c.want {
			t.Errorf("%s %+v: %q, want %q", c.tool.Name, c.o, got, c.want)
		}
	}
}

func TestToolDefaults(t *testing.T) {
	for _, c := range []struct {
		tool cmpeer.Tool
		want cmpeer.Options
	}{
		{cmatose.Tool, cmpeer.Options{Port: 7471, Connections: 1, Timeout: 30 * time.Second}},
		{udaddy.Tool, cmpeer.Options{Port: 7174, Connections: 1, Timeout: 30 * time.Second}},
		{rping.Tool, cmpeer.Options{Port: 7174, Size: 64, Timeout: 30 * time.Second}},
	} {
		var o cmpeer.Options
		c.tool.Fill(&o)
		if o.Port != c.want.Port || o.Connections != c.want.Connections || o.Count != c.want.Count || o.Size != c.want.Size || o.Timeout != c.want.Timeout {
			t.Errorf("%s: zero options filled as %+v, want %+v", c.tool.Name, o, c.want)
		}
	}
}
