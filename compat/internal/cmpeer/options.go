package cmpeer

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softirdma/softirdma/compat/internal/ctrl"
)

// Options are what rping, ucmatose and udaddy take, one set for the three: each tool gives its
// defaults and limits in its Tool. A zero field takes the tool's default.
type Options struct {
	Server bool
	// Addr is the server's address: what a client connects to (rping's server listens on it too,
	// so it must be the device's).
	Addr netip.Addr
	Port uint16
	// Connections is how many connections (ucmatose) or clients' QPs (udaddy) a run makes; rping
	// makes one and has no such option.
	Connections int
	// Count is how many messages go each way (on each connection), or rping's pings.
	Count int
	// Size is a message's size, or rping's ping buffer's. Where a tool accepts 0 (its MinSize is
	// 0), 0 sends none.
	Size int
	// Timeout bounds each wait for the peer.
	Timeout time.Duration
	// Wait keeps a client trying for this long while nobody listens at the server's port yet (a
	// REJ with invalid service ID, SIDR's UNSUPPORTED) or nobody answers; 0 tries once, as the
	// tools do.
	Wait time.Duration
	// Listening, if set, is called once a server listens.
	Listening func()
}

// Tool is one of the tools: its name, which starts its errors, its defaults and its limits.
type Tool struct {
	Name string
	// Defaults are the tool's options as it runs without flags: Port, Connections, Count, Size
	// and Timeout.
	Defaults Options
	// MaxConnections bounds Connections; 0 is a tool of one connection.
	MaxConnections int
	MaxCount       int
	// MinSize..MaxSize is the range of Size. With SizeWithinMTU the port's active MTU bounds it
	// instead, and MaxSize is only the largest MTU there is.
	MinSize, MaxSize int
	SizeWithinMTU    bool
	// AddrHint follows "an address is needed": the flag that gives one, where the tool names it.
	AddrHint string
}

// Fill gives o's zero fields the tool's defaults. A zero size sends nothing where the tool
// accepts it, and is the default size where it does not.
func (t Tool) Fill(o *Options) {
	ctrl.Default(&o.Port, t.Defaults.Port)
	ctrl.Default(&o.Connections, t.Defaults.Connections)
	ctrl.Default(&o.Timeout, t.Defaults.Timeout)
	if o.Size == 0 {
		if t.MinSize > 0 {
			o.Size = t.Defaults.Size
		} else {
			o.Count = 0
		}
	}
}

// Check refuses options the tool cannot run with, naming the first that is out of its range;
// mtu is the port's active MTU, for a tool whose size it bounds.
func (t Tool) Check(o Options, mtu int) error {
	switch {
	case t.MaxConnections > 0 && (o.Connections < 1 || o.Connections > t.MaxConnections):
		return fmt.Errorf("%s: %d connections is out of range (1..%d)", t.Name, o.Connections, t.MaxConnections)
	case o.Count < 0 || o.Count > t.MaxCount:
		return fmt.Errorf("%s: count %d is out of range (0..%d)", t.Name, o.Count, t.MaxCount)
	}
	if err := t.CheckSize(o, mtu); err != nil {
		return err
	}
	switch {
	case !o.Addr.IsValid():
		return errors.New(t.Name + ": an address is needed" + t.AddrHint)
	case o.Timeout < 0 || o.Wait < 0:
		return errors.New(t.Name + ": negative timeout")
	}
	return nil
}

// CheckSize is Check's word on the size alone.
func (t Tool) CheckSize(o Options, mtu int) error {
	switch {
	case t.SizeWithinMTU && o.Size < 0:
		return fmt.Errorf("%s: size %d is negative", t.Name, o.Size)
	case t.SizeWithinMTU && o.Size > mtu:
		return fmt.Errorf("%s: message_size %d is larger than active mtu %d", t.Name, o.Size, mtu)
	case !t.SizeWithinMTU && (o.Size < t.MinSize || o.Size > t.MaxSize):
		return fmt.Errorf("%s: size %d is out of range (%d..%d)", t.Name, o.Size, t.MinSize, t.MaxSize)
	}
	return nil
}
