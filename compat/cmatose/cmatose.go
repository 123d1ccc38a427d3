// Package cmatose is softirdma's side of librdmacm's ucmatose: several RC connections set up
// through rdma_cm (emu/rdmacm) to one port, then SENDs both ways on each, so either end may be
// ucmatose on a Linux Soft-RoCE or hardware peer. The server sends first, once every connection
// is established, then takes the client's replies and disconnects; the client posts its
// receives before it connects, takes the server's messages, replies, and waits for the server's
// disconnection. It prints what ucmatose prints.
package cmatose

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// Options are ucmatose's (cmpeer.Options): Port [7471], Connections [1], Count, the messages
// each way on each connection [10], Size [100] (0 sends none, as ucmatose), Timeout [30s], and
// Wait, 0 trying once as ucmatose does.
type Options = cmpeer.Options

// Limits of the options: a connection's QP and CQs hold Count messages.
const (
	MaxConnections = 1024
	MaxCount       = 1 << 14
	MaxSize        = 1 << 20
)

// tool is ucmatose among the rdma_cm tools: its defaults and limits.
var tool = cmpeer.Tool{
	Name:           "cmatose",
	Defaults:       Options{Port: 7471, Connections: 1, Count: 10, Size: 100, Timeout: 30 * time.Second},
	MaxConnections: MaxConnections,
	MaxCount:       MaxCount,
	MaxSize:        MaxSize,
}

// Defaults are ucmatose's options: one connection to port 7471, ten messages of 100 bytes.
func Defaults() Options { return tool.Defaults }

// node is one connection: ucmatose's struct cmatest_node.
type node struct {
	id     *rdmacm.ID
	qp     *engine.QP
	sendCQ *engine.CQ
	recvCQ *engine.CQ
	mr     *engine.MR
}

type test struct {
	*cmpeer.Peer
	nodes []*node
}

// Run runs one side of ucmatose on dev, printing what ucmatose prints to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) error {
	return tool.Run(ctx, dev, o, out, func(p *cmpeer.Peer) cmpeer.Side { return &test{Peer: p} })
}

// newNode makes a connection's QP (RC, Count sends and receives, CQs of Count) and buffer, and
// posts its receives, as ucmatose's init_node and post_recvs.
func (t *test) newNode() (*node, error) {
	depth := max(t.O.Count, 1)
	n := &node{}
	var err error
	if n.sendCQ, err = t.Dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if n.recvCQ, err = t.Dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	t.Notify(n.sendCQ)
	t.Notify(n.recvCQ)
	if n.qp, err = t.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: n.sendCQ, RecvCQ: n.recvCQ,
		Cap: engine.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	t.nodes = append(t.nodes, n)
	buf := make([]byte, max(t.O.Size, 1))
	for i := range buf {
		buf[i] = byte(i)
	}
	if n.mr, err = t.PD.RegMR(buf, engine.AccessLocalWrite); err != nil {
		return nil, err
	}
	return n, t.fresh(n)
}

// fresh takes a node's QP to INIT with its receives posted, as rdma_create_qp and post_recvs
// leave it; again after a refused attempt.
func (t *test) fresh(n *node) error {
	return cmpeer.Renew(n.qp, func() error {
		for i := range t.O.Count {
			if err := n.qp.PostRecv(engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: n.mr.Addr(), Length: uint32(t.O.Size), LKey: n.mr.LKey()}}}); err != nil {
				return err
			}
		}
		return nil
	}, n.recvCQ, n.sendCQ)
}

// param is ucmatose's rdma_conn_param: one READ each way, retry count 5.
var param = rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, RNRRetryCount: 7}

// Server accepts Connections clients, sends first, takes the replies and disconnects.
func (t *test) Server() error {
	if err := t.Listen(t.CM.Listen); err != nil {
		return err
	}
	if err := t.accept(); err != nil {
		return err
	}
	if t.O.Count > 0 {
		if err := cmpeer.Transfers(t.Out, t.nodes,
			cmpeer.Step[*node]{Line: "initiating data transfers", Do: t.sends},
			cmpeer.Step[*node]{Line: "completing sends", Do: func(n *node) error { return t.Poller.Poll(n.sendCQ, t.O.Count, nil) }},
			cmpeer.Step[*node]{Line: "receiving data transfers", Do: t.receive}); err != nil {
			return err
		}
	}
	fmt.Fprintln(t.Out, "cmatose: disconnecting")
	for _, n := range t.nodes {
		if err := n.id.Disconnect(); err != nil {
			return fmt.Errorf("cmatose: disconnect: %w", err)
		}
	}
	if err := t.closed(); err != nil {
		return err
	}
	fmt.Fprintln(t.Out, "disconnected")
	return nil
}

// accept accepts connection requests until Connections are established, refusing any beyond
// them.
func (t *test) accept() error {
	for established := 0; established < t.O.Connections; {
		wait := t.O.Timeout
		if len(t.nodes) == 0 {
			wait = 0 // the first client may come whenever it likes
		}
		e, err := t.Events.Next(wait)
		if err != nil {
			return err
		}
		switch e.Type {
		case rdmacm.ConnectRequest:
			if len(t.nodes) == t.O.Connections {
				fmt.Fprintln(t.Out, "cmatose: failing connection request")
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
	return nil
}

// Client connects Connections times, takes the server's messages, replies, and waits for the
// server to disconnect.
func (t *test) Client() error {
	fmt.Fprintln(t.Out, "cmatose: connecting")
	for range t.O.Connections {
		n, err := t.newNode()
		if err != nil {
			return err
		}
		e, err := t.Events.Dial(t.O.Addr, t.O.Wait, t.O.Timeout, func() (*rdmacm.ID, error) { return t.CM.Connect(n.qp, t.O.Addr, t.O.Port, param) },
			func() error { return t.fresh(n) })
		if err != nil {
			return err
		}
		n.id = e.ID
	}
	// ucmatose does not wait for its sends; they are acknowledged before the server
	// disconnects, which is what is waited for next.
	if t.O.Count > 0 {
		if err := cmpeer.Transfers(t.Out, t.nodes,
			cmpeer.Step[*node]{Line: "receiving data transfers", Do: t.receive},
			cmpeer.Step[*node]{Line: "sending replies", Do: t.sends}); err != nil {
			return err
		}
	}
	// The server disconnects each connection; each side's time wait ends before the device goes.
	return t.closed()
}

// sends posts Count SENDs of Size on a connection.
func (t *test) sends(n *node) error {
	for i := range t.O.Count {
		if err := n.qp.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRSend, Flags: engine.SendSignaled,
			SGL: []engine.SGE{{Addr: n.mr.Addr(), Length: uint32(t.O.Size), LKey: n.mr.LKey()}}}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// receive waits for Count messages on a connection, each whole.
func (t *test) receive(n *node) error {
	return t.Poller.Poll(n.recvCQ, t.O.Count, func(wc engine.WC) error {
		if wc.ByteLen != uint32(t.O.Size) {
			return fmt.Errorf("cmatose: received %d bytes, sent %d", wc.ByteLen, t.O.Size)
		}
		return nil
	})
}

// closed waits until every connection is disconnected and out of its time wait.
func (t *test) closed() error {
	for left := len(t.nodes); left > 0; {
		e, err := t.Events.Next(t.O.Timeout)
		if err != nil {
			return err
		}
		if e.Type == rdmacm.TimewaitExit {
			left--
		}
	}
	return nil
}
