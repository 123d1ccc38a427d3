// Package cmatose is softirdma's side of librdmacm's ucmatose: several RC connections set up
// through rdma_cm (emu/rdmacm) to one port, then SENDs both ways on each, so either end may be
// ucmatose on a Linux Soft-RoCE or hardware peer. The server sends first, once every connection
// is established, then takes the client's replies and disconnects; the client posts its
// receives before it connects, takes the server's messages, replies, and waits for the server's
// disconnection. It prints what ucmatose prints.
package cmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// Options are ucmatose's, with its defaults (Defaults) in brackets.
type Options struct {
	Server bool
	// Addr is the server's address: what a client connects to.
	Addr        netip.Addr
	Port        uint16 // [7471]
	Connections int    // [1]
	Count       int    // messages each way on each connection [10]
	Size        int    // message size [100]; 0 sends none, as ucmatose
	// Timeout bounds each wait for the peer [30s].
	Timeout time.Duration
	// Wait keeps a client trying for this long while nobody listens at the server's port yet;
	// 0 tries once, as ucmatose does.
	Wait time.Duration
	// Listening, if set, is called once a server listens.
	Listening func()
}

// Limits of the options: a connection's QP and CQs hold Count messages.
const (
	MaxConnections = 1024
	MaxCount       = 1 << 14
	MaxSize        = 1 << 20
)

// Defaults are ucmatose's options: one connection to port 7471, ten messages of 100 bytes.
func Defaults() Options {
	return Options{Port: 7471, Connections: 1, Count: 10, Size: 100, Timeout: 30 * time.Second}
}

func (o *Options) defaults() {
	if o.Port == 0 {
		o.Port = 7471
	}
	if o.Connections == 0 {
		o.Connections = 1
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Size == 0 {
		o.Count = 0
	}
}

func (o *Options) check() error {
	switch {
	case o.Connections < 1 || o.Connections > MaxConnections:
		return fmt.Errorf("cmatose: %d connections is out of range (1..%d)", o.Connections, MaxConnections)
	case o.Count < 0 || o.Count > MaxCount:
		return fmt.Errorf("cmatose: count %d is out of range (0..%d)", o.Count, MaxCount)
	case o.Size < 0 || o.Size > MaxSize:
		return fmt.Errorf("cmatose: size %d is out of range (0..%d)", o.Size, MaxSize)
	case !o.Addr.IsValid():
		return errors.New("cmatose: an address is needed")
	case o.Timeout < 0 || o.Wait < 0:
		return errors.New("cmatose: negative timeout")
	}
	return nil
}

// node is one connection: ucmatose's struct cmatest_node.
type node struct {
	id     *rdmacm.ID
	qp     *engine.QP
	sendCQ *engine.CQ
	recvCQ *engine.CQ
	mr     *engine.MR
}

type test struct {
	o      Options
	ctx    context.Context
	dev    *engine.Device
	pd     *engine.PD
	ev     *cmpeer.Events
	wake   chan struct{}
	nodes  []*node
	poller cmpeer.Poller
}

// Run runs one side of ucmatose on dev, printing what ucmatose prints to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) error {
	o.defaults()
	if err := o.check(); err != nil {
		return err
	}
	m, ev, err := cmpeer.New(ctx, dev, "cmatose")
	if err != nil {
		return err
	}
	t := &test{o: o, ctx: ctx, dev: dev, ev: ev, wake: make(chan struct{}, 1)}
	t.poller = cmpeer.Poller{Tool: "cmatose", Ctx: ctx, Wake: t.wake, Timeout: o.Timeout}
	if t.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	defer func() {
		for _, n := range t.nodes {
			_ = n.qp.Destroy()
		}
	}()
	return cmpeer.Tool(out, "cmatose", o.Server, func() error {
		if o.Server {
			return t.server(m, out)
		}
		return t.client(m, out)
	})
}

// newNode makes a connection's QP (RC, Count sends and receives, CQs of Count) and buffer, and
// posts its receives, as ucmatose's init_node and post_recvs.
func (t *test) newNode() (*node, error) {
	depth := max(t.o.Count, 1)
	n := &node{}
	var err error
	if n.sendCQ, err = t.dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if n.recvCQ, err = t.dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	for _, cq := range []*engine.CQ{n.sendCQ, n.recvCQ} {
		cq.OnCompletion(func() {
			select {
			case t.wake <- struct{}{}:
			default:
			}
		})
	}
	if n.qp, err = t.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: n.sendCQ, RecvCQ: n.recvCQ,
		Cap: engine.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	t.nodes = append(t.nodes, n)
	buf := make([]byte, max(t.o.Size, 1))
	for i := range buf {
		buf[i] = byte(i)
	}
	if n.mr, err = t.pd.RegMR(buf, engine.AccessLocalWrite); err != nil {
		return nil, err
	}
	return n, t.fresh(n)
}

// fresh takes a node's QP to INIT with its receives posted, as rdma_create_qp and post_recvs
// leave it; again after a refused attempt.
func (t *test) fresh(n *node) error {
	return cmpeer.Renew(n.qp, func() error {
		for i := range t.o.Count {
			if err := n.qp.PostRecv(engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: n.mr.Addr(), Length: uint32(t.o.Size), LKey: n.mr.LKey()}}}); err != nil {
				return err
			}
		}
		return nil
	}, n.recvCQ, n.sendCQ)
}

// param is ucmatose's rdma_conn_param: one READ each way, retry count 5.
var param = rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, RNRRetryCount: 7}

func (t *test) server(m *rdmacm.Manager, out io.Writer) error {
	if _, err := m.Listen(t.o.Port); err != nil {
		return fmt.Errorf("cmatose: listen on %d: %w", t.o.Port, err)
	}
	if t.o.Listening != nil {
		t.o.Listening()
	}
	for established := 0; established < t.o.Connections; {
		wait := t.o.Timeout
		if len(t.nodes) == 0 {
			wait = 0 // the first client may come whenever it likes
		}
		e, err := t.ev.Next(wait)
		if err != nil {
			return err
		}
		switch e.Type {
		case rdmacm.ConnectRequest:
			if len(t.nodes) == t.o.Connections {
				fmt.Fprintln(out, "cmatose: failing connection request")
				_ = e.ID.Reject(nil)
				continue
			}
			n, err := t.newNode()
			if err != nil {
				return err
			}
			n.id = e.ID
			if err := e.ID.Accept(n.qp, rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
				return fmt.Errorf("cmatose: accept: %w", err)
			}
		case rdmacm.Established:
			established++
		case rdmacm.Disconnected, rdmacm.Rejected, rdmacm.Unreachable:
			return fmt.Errorf("cmatose: event: %s while connecting", e.Type)
		}
	}
	if t.o.Count > 0 {
		fmt.Fprintln(out, "initiating data transfers")
		for _, n := range t.nodes {
			if err := t.sends(n); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "completing sends")
		for _, n := range t.nodes {
			if err := t.poller.Poll(n.sendCQ, t.o.Count, nil); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "receiving data transfers")
		for _, n := range t.nodes {
			if err := t.poller.Poll(n.recvCQ, t.o.Count, t.whole); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "data transfers complete")
	}
	fmt.Fprintln(out, "cmatose: disconnecting")
	for _, n := range t.nodes {
		if err := n.id.Disconnect(); err != nil {
			return fmt.Errorf("cmatose: disconnect: %w", err)
		}
	}
	if err := t.closed(); err != nil {
		return err
	}
	fmt.Fprintln(out, "disconnected")
	return nil
}

func (t *test) client(m *rdmacm.Manager, out io.Writer) error {
	fmt.Fprintln(out, "cmatose: connecting")
	for range t.o.Connections {
		n, err := t.newNode()
		if err != nil {
			return err
		}
		e, err := t.ev.Dial(t.o.Addr, t.o.Wait, t.o.Timeout, func() (*rdmacm.ID, error) { return m.Connect(n.qp, t.o.Addr, t.o.Port, param) },
			func() error { return t.fresh(n) })
		if err != nil {
			return err
		}
		n.id = e.ID
	}
	if t.o.Count > 0 {
		fmt.Fprintln(out, "receiving data transfers")
		for _, n := range t.nodes {
			if err := t.poller.Poll(n.recvCQ, t.o.Count, t.whole); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "sending replies")
		for _, n := range t.nodes {
			if err := t.sends(n); err != nil {
				return err
			}
		}
		// ucmatose does not wait for its sends; they are acknowledged before the server
		// disconnects, which is what is waited for next.
		fmt.Fprintln(out, "data transfers complete")
	}
	// The server disconnects each connection; each side's time wait ends before the device goes.
	return t.closed()
}

// sends posts Count SENDs of Size on a connection.
func (t *test) sends(n *node) error {
	for i := range t.o.Count {
		if err := n.qp.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRSend, Flags: engine.SendSignaled,
			SGL: []engine.SGE{{Addr: n.mr.Addr(), Length: uint32(t.o.Size), LKey: n.mr.LKey()}}}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// whole checks that a receive holds a whole message.
func (t *test) whole(wc engine.WC) error {
	if wc.ByteLen != uint32(t.o.Size) {
		return fmt.Errorf("cmatose: received %d bytes, sent %d", wc.ByteLen, t.o.Size)
	}
	return nil
}

// closed waits until every connection is disconnected and out of its time wait.
func (t *test) closed() error {
	for left := len(t.nodes); left > 0; {
		e, err := t.ev.Next(t.o.Timeout)
		if err != nil {
			return err
		}
		if e.Type == rdmacm.TimewaitExit {
			left--
		}
	}
	return nil
}
