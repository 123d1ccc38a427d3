// Package udaddy is softirdma's side of librdmacm's udaddy: UD QPs found through rdma_cm's UDP
// port space (a SIDR exchange, emu/rdmacm), then datagrams both ways, so either end may be udaddy
// on a Linux Soft-RoCE or hardware peer. The client asks the server's port 7174 for its QP and
// sends Count SEND_WITH_IMMs carrying its own QPN; the server answers each client, once all its
// messages came, with as many to the QPN they carried, at the address they came from. It prints
// what udaddy prints.
package udaddy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// Options are udaddy's (cmpeer.Options): Port [7174, the port udaddy always uses], Connections
// [1], Count, the messages each way [10], Size, at most the port's active MTU [100] (0 sends
// none), Timeout [30s], and Wait, 0 asking once.
type Options = cmpeer.Options

// Limits of the options. The port's active MTU bounds the size: MaxSize is the largest there is.
const (
	MaxConnections = 1024
	MaxCount       = 1 << 14
	MaxSize        = 4096
)

// tool is udaddy among the rdma_cm tools: its defaults and limits.
var tool = cmpeer.Tool{
	Name:           "udaddy",
	Defaults:       Options{Port: 7174, Connections: 1, Count: 10, Size: 100, Timeout: 30 * time.Second},
	MaxConnections: MaxConnections,
	MaxCount:       MaxCount,
	MaxSize:        MaxSize,
	SizeWithinMTU:  true,
}

// Defaults are udaddy's options: one client, ten messages of 100 bytes, port 7174.
func Defaults() Options { return tool.Defaults }

// node is one client's UD QP and where its peer is: udaddy's struct cmatest_node.
type node struct {
	qp   *engine.QP
	cq   *engine.CQ
	mr   *engine.MR
	buf  []byte // the message sent, then a slot of the GRH area and a message per receive
	ah   *engine.AH
	qpn  uint32
	qkey uint32
}

type test struct {
	*cmpeer.Peer
	nodes []*node
}

// Run runs one side of udaddy on dev, printing what udaddy prints to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) error {
	return tool.Run(ctx, dev, o, out, func(p *cmpeer.Peer) cmpeer.Side { return &test{Peer: p} })
}

// slot is a receive's size: the GRH area and a message.
func (t *test) slot() int { return engine.GRHLen + t.O.Size }

// recvOff is where receive i's slot starts in a node's buffer.
func (t *test) recvOff(i int) int { return t.O.Size + i*t.slot() }

// newNode makes a UD QP (Count sends and receives, one CQ of twice that) and a buffer of the GRH
// area and a message, and posts the receives, as udaddy's init_node and post_recvs.
func (t *test) newNode() (*node, error) {
	depth := max(t.O.Count, 1)
	// udaddy posts every receive on one buffer; a slot each keeps one datagram's GRH area from
	// being written while an earlier one's is read.
	n := &node{buf: make([]byte, t.O.Size+depth*t.slot())}
	var err error
	if n.cq, err = t.Dev.CreateCQ(2 * depth); err != nil {
		return nil, err
	}
	t.Notify(n.cq)
	if n.qp, err = t.CreateQP(engine.QPInitAttr{Type: engine.QPTypeUD, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: engine.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	t.nodes = append(t.nodes, n)
	if n.mr, err = t.PD.RegMR(n.buf, engine.AccessLocalWrite); err != nil {
		return nil, err
	}
	if err := rdmacm.ReadyUD(n.qp); err != nil {
		return nil, err
	}
	for i := range t.O.Count {
		if err := n.qp.PostRecv(engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: n.mr.Addr() + uint64(t.recvOff(i)), Length: uint32(t.slot()), LKey: n.mr.LKey()}}}); err != nil {
			return nil, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return n, nil
}

// Server answers Connections clients' requests, takes each one's messages, and replies.
func (t *test) Server() error {
	if err := t.Listen(t.CM.ListenUD); err != nil {
		return err
	}
	// Each request is answered at once; the side that answers sees no ESTABLISHED.
	for len(t.nodes) < t.O.Connections {
		e, err := t.Events.Next(0)
		if err != nil {
			return err
		}
		if e.Type != rdmacm.ConnectRequest {
			continue
		}
		n, err := t.newNode()
		if err != nil {
			return err
		}
		if err := e.ID.Accept(n.qp, rdmacm.ConnParam{}); err != nil {
			return fmt.Errorf("udaddy: accept: %w", err)
		}
	}
	if t.O.Count == 0 {
		return nil
	}
	return cmpeer.Transfers(t.Out, t.nodes,
		cmpeer.Step[*node]{Line: "receiving data transfers", Do: func(n *node) error { return t.receive(n, true) }},
		cmpeer.Step[*node]{Line: "sending replies", Do: func(n *node) error { return t.sends(n, true) }})
}

// Client asks the server for its QP Connections times, sends, and takes the replies.
func (t *test) Client() error {
	fmt.Fprintln(t.Out, "udaddy: connecting")
	for range t.O.Connections {
		n, err := t.newNode()
		if err != nil {
			return err
		}
		e, err := t.Events.Dial(t.O.Addr, t.O.Wait, t.O.Timeout, func() (*rdmacm.ID, error) { return t.CM.ConnectUD(n.qp, t.O.Addr, t.O.Port, nil) },
			func() error { return nil })
		if err != nil {
			return err
		}
		n.ah, n.qpn, n.qkey = e.UD.AH, e.UD.QPN, e.UD.QKey
	}
	if t.O.Count == 0 {
		return nil
	}
	return cmpeer.Transfers(t.Out, t.nodes,
		cmpeer.Step[*node]{Line: "initiating data transfers", Do: func(n *node) error { return t.sends(n, false) }},
		cmpeer.Step[*node]{Line: "receiving data transfers", Do: func(n *node) error { return t.receive(n, false) }})
}

// sends sends Count SEND_WITH_IMMs of Size carrying the QP's own number, as udaddy; the
// server's are signaled and waited for, the client's not (udaddy's sq_sig_all 0).
func (t *test) sends(n *node, signaled bool) error {
	flags := engine.SendFlags(0)
	if signaled {
		flags = engine.SendSignaled
	}
	for i := range t.O.Count {
		if err := n.qp.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRSendWithImm, Flags: flags, Imm: n.qp.Num(),
			SGL: []engine.SGE{{Addr: n.mr.Addr(), Length: uint32(t.O.Size), LKey: n.mr.LKey()}},
			AH:  n.ah, RemoteQPN: n.qpn, RemoteQKey: n.qkey}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	if signaled {
		return t.Poller.Poll(n.cq, t.O.Count, nil)
	}
	return nil
}

// receive waits for Count datagrams; the server takes where to reply from the first: the
// address in its GRH area and the QPN its immediate data carries (udaddy's create_reply_ah).
func (t *test) receive(n *node, reply bool) error {
	return t.Poller.Poll(n.cq, t.O.Count, func(wc engine.WC) error {
		if wc.ByteLen != uint32(engine.GRHLen+t.O.Size) || wc.Flags&engine.WCWithImm == 0 {
			return fmt.Errorf("udaddy: received %d bytes (imm %v), sent %d", wc.ByteLen, wc.Flags&engine.WCWithImm != 0, t.O.Size)
		}
		if !reply || n.ah != nil {
			return nil
		}
		src, ok := engine.SourceAddr(n.buf[t.recvOff(int(wc.WRID)):], wc.NetworkHdrType)
		if !ok {
			return errors.New("udaddy: failed to create reply AH")
		}
		ah, err := t.PD.CreateAH(engine.AHAttr{DGID: src, HopLimit: 64})
		if err != nil {
			return fmt.Errorf("udaddy: failed to create reply AH: %w", err)
		}
		n.ah, n.qpn, n.qkey = ah, wc.Imm, n.qp.Query().QKey
		return nil
	})
}
