package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// perftest's rdma_cm mode (-R): no TCP. The exchange runs over an RC QP of its own, connected
// through rdma_cm to the test's port, each message a SEND of exactly its bytes, the client's
// first; the records are struct pingpong_dest in binary. Between the preamble and the first
// record the test's QP is connected through rdma_cm to the same port, with an exchange of zeros
// before and after. At the end the server disconnects the test's connection and the client
// waits for it.

// CMRecordLen is pingpong_dest as perftest 6.24 to 6.28 sends it (-R): lid, out_reads, qpn, psn,
// rkey as 32-bit big-endian integers, 4 bytes of padding, the 64-bit vaddr, the GID, srqn and
// gid_index. Perftest 6.29 puts an 8-byte tail_markers_vaddr before the GID (64 bytes); both
// are read.
const CMRecordLen = 56

// cmRecordMax is the longest record received, and the exchange QP's receive buffer.
const cmRecordMax = 64

// MarshalCM renders the record as perftest's rdma_cm exchange sends it.
func (r Record) MarshalCM() []byte {
	b := make([]byte, CMRecordLen)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(r.LID))
	be.PutUint32(b[4:], uint32(r.OutReads))
	be.PutUint32(b[8:], r.QPN)
	be.PutUint32(b[12:], r.PSN)
	be.PutUint32(b[16:], r.RKey)
	be.PutUint64(b[24:], r.VAddr)
	copy(b[32:48], r.GID[:])
	be.PutUint32(b[48:], r.SRQN)
	return b
}

// ParseRecordCM reads a record of either layout.
func ParseRecordCM(b []byte) (Record, error) {
	var r Record
	gid := 32
	switch len(b) {
	case CMRecordLen:
	case cmRecordMax:
		gid = 40
	default:
		return r, fmt.Errorf("perftest: a QP record of %d bytes (perftest sends %d or %d)", len(b), CMRecordLen, cmRecordMax)
	}
	be := binary.BigEndian
	lid, reads := be.Uint32(b), be.Uint32(b[4:])
	if lid > 0xffff || reads > 0xffff {
		return r, fmt.Errorf("perftest: field out of range in a QP record (lid %d, out_reads %d)", lid, reads)
	}
	r.LID, r.OutReads, r.QPN, r.PSN, r.RKey, r.VAddr = uint16(lid), uint16(reads), be.Uint32(b[8:])&0xffffff, be.Uint32(b[12:])&0xffffff, be.Uint32(b[16:]), be.Uint64(b[24:])
	copy(r.GID[:], b[gid:gid+16])
	r.SRQN = be.Uint32(b[gid+16:])
	return r, nil
}

// cmConn is the exchange over its own QP, and the two rdma_cm connections.
type cmConn struct {
	ctx     context.Context
	ev      *cmpeer.Events
	m       *rdmacm.Manager
	comm    *rdmacm.ID // the exchange's connection
	test    *rdmacm.ID // the test QP's
	qp      *engine.QP
	cq      *engine.CQ
	mr      *engine.MR
	buf     []byte // the receive, then the send
	wake    chan struct{}
	client  bool
	timeout time.Duration
	// in is a message received while a send was waited for.
	in []byte
}

// connectCM runs the start of -R: the exchange's connection, the preamble, register (given the
// peer's page size), the test QP's connection, and H1 with local, whose QPN it fills in.
func connectCM(ctx context.Context, dev *engine.Device, o Options, testQP *engine.QP, outReads, localMTU int, out io.Writer,
	register func(int) error, local *Record) (*cmConn, handshake, error) {
	var h handshake
	var host netip.Addr
	if !o.Server {
		a, err := netip.ParseAddr(o.Host)
		if err != nil {
			return nil, h, fmt.Errorf("perftest: -R needs the server's IP address, not %q", o.Host)
		}
		host = a
	}
	c, err := newCMConn(ctx, dev, o)
	if err != nil {
		return c, h, err
	}
	param, testParam := cmParams(o, outReads)
	if err := c.connectComm(o, host, param, out); err != nil {
		return c, h, err
	}
	if h, err = preamble(c, c.client, localMTU); err != nil {
		return c, h, err
	}
	if err := register(h.cycleBuffer); err != nil {
		return c, h, err
	}
	zeros := make([]byte, CMRecordLen)
	if _, err := c.xchg(zeros, CMRecordLen); err != nil {
		return c, h, err
	}
	if err := c.connectTest(o, host, testQP, testParam); err != nil {
		return c, h, err
	}
	if _, err := c.xchg(zeros, CMRecordLen); err != nil {
		return c, h, err
	}
	h.peer, err = hello(c, *local)
	return c, h, err
}

// newCMConn makes a connection manager for both connections, and the exchange's QP as
// rdma_create_qp leaves it. It is nil when it failed before the QP was made.
func newCMConn(ctx context.Context, dev *engine.Device, o Options) (*cmConn, error) {
	m, ev, err := cmpeer.New(ctx, dev, "perftest")
	if err != nil {
		return nil, err
	}
	c := &cmConn{ctx: ctx, ev: ev, m: m, client: !o.Server, timeout: o.Timeout, wake: make(chan struct{}, 1), buf: make([]byte, 2*cmRecordMax)}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	if c.cq, err = dev.CreateCQ(8); err != nil {
		return nil, err
	}
	cmpeer.Signal(c.cq, c.wake)
	if c.qp, err = pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: engine.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if c.mr, err = pd.RegMR(c.buf, engine.AccessLocalWrite); err != nil {
		return c, err
	}
	return c, c.fresh()
}

// fresh readies the exchange's QP as rdma_create_qp leaves it, with its receive posted before the
// connection; again after a refused attempt.
func (c *cmConn) fresh() error { return cmpeer.Renew(c.qp, c.postRecv, c.cq) }

// cmParams are the two connections' parameters: the exchange's with no READs and retry counts 7
// (perftest's), the test's with the READ/atomic depth for those tests.
func cmParams(o Options, outReads int) (param, testParam rdmacm.ConnParam) {
	param = rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if o.RetryCount != nil {
		param.RetryCount = uint8(*o.RetryCount)
	}
	testParam = param
	if o.Test == Read || o.Test == Atomic {
		testParam.ResponderResources, testParam.InitiatorDepth = uint8(min(outReads, 255)), uint8(min(outReads, 255))
	}
	return param, testParam
}

// connectComm connects the exchange's QP: a server listens on the port and accepts the first
// request, a client connects to the server at host.
func (c *cmConn) connectComm(o Options, host netip.Addr, param rdmacm.ConnParam, out io.Writer) error {
	if !o.Server {
		e, err := c.ev.Dial(host, o.Wait, o.Timeout, func() (*rdmacm.ID, error) { return c.m.Connect(c.qp, host, uint16(o.Port), param) }, c.fresh)
		if err != nil {
			return err
		}
		c.comm = e.ID
		return nil
	}
	fmt.Fprintln(out, waitingForClient)
	if _, err := c.m.Listen(uint16(o.Port)); err != nil {
		return fmt.Errorf("perftest: couldn't listen on port %d through rdma_cm: %w", o.Port, err)
	}
	if o.Listening != nil {
		o.Listening()
	}
	var err error
	c.comm, err = c.ev.Accept(c.qp, param, 0)
	return err
}

// connectTest connects the test's QP through rdma_cm to the same port.
func (c *cmConn) connectTest(o Options, host netip.Addr, qp *engine.QP, param rdmacm.ConnParam) error {
	if o.Server {
		var err error
		c.test, err = c.ev.Accept(qp, param, o.Timeout)
		return err
	}
	// perftest's server listens for the test's connection again only once it sent its answer
	// to the zeros: a refusal for want of a listener is tried again, a while.
	e, err := c.ev.Dial(host, o.Timeout, o.Timeout, func() (*rdmacm.ID, error) { return c.m.Connect(qp, host, uint16(o.Port), param) },
		func() error { return qp.Modify(engine.QPAttr{State: engine.QPSReset}, engine.AttrState) })
	if err != nil {
		return err
	}
	c.test = e.ID
	return nil
}

func (c *cmConn) postRecv() error {
	return c.qp.PostRecv(engine.RecvWR{ID: 5, SGL: []engine.SGE{{Addr: c.mr.Addr(), Length: cmRecordMax, LKey: c.mr.LKey()}}})
}

func (c *cmConn) setTimeout(d time.Duration) { c.timeout = d }

func (c *cmConn) record(local Record) (Record, error) {
	in, err := c.xchg(local.MarshalCM(), CMRecordLen)
	if err != nil {
		return Record{}, err
	}
	return ParseRecordCM(in)
}

// xchg sends out and takes the peer's message, in perftest's order; a message of another
// length than inLen is refused, but for a record in 6.29's layout.
func (c *cmConn) xchg(out []byte, inLen int) ([]byte, error) {
	var in []byte
	var err error
	if c.client {
		if err = c.send(out); err == nil {
			in, err = c.recv()
		}
	} else if in, err = c.recv(); err == nil {
		err = c.send(out)
	}
	if err != nil {
		return nil, err
	}
	if len(in) != inLen && !(inLen == CMRecordLen && len(in) == cmRecordMax) {
		return nil, fmt.Errorf("perftest: the peer sent %d bytes where %d were due: does it run the same test, with -R?", len(in), inLen)
	}
	return in, nil
}

func (c *cmConn) send(out []byte) error {
	n := copy(c.buf[cmRecordMax:], out)
	if err := c.qp.PostSend(engine.SendWR{ID: 6, Opcode: engine.WRSend, Flags: engine.SendSignaled,
		SGL: []engine.SGE{{Addr: c.mr.Addr() + cmRecordMax, Length: uint32(n), LKey: c.mr.LKey()}}}); err != nil {
		return fmt.Errorf("perftest: couldn't post send: %w", err)
	}
	_, err := c.wait(6)
	return err
}

func (c *cmConn) recv() ([]byte, error) {
	if in := c.in; in != nil {
		c.in = nil
		return in, c.postRecv()
	}
	in, err := c.wait(5)
	if err != nil {
		return nil, err
	}
	return in, c.postRecv()
}

// wait waits for the completion of wrid (5 the receive, 6 the send); a receive that completes
// while the send is waited for is kept for recv.
func (c *cmConn) wait(wrid uint64) ([]byte, error) {
	var timeout <-chan time.Time
	if c.timeout > 0 {
		t := time.NewTimer(c.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var wcs [1]engine.WC // one at a time: a completion after the one waited for stays in the CQ
	for {
		n := c.cq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			if wc.Status != engine.WCSuccess {
				return nil, fmt.Errorf("perftest: the exchange's QP: completion with status %s: %v", wc.Status, wc.Err)
			}
			var in []byte
			if wc.WRID == 5 {
				in = append([]byte{}, c.buf[:min(wc.ByteLen, cmRecordMax)]...)
			}
			if wc.WRID == wrid {
				return in, nil
			}
			if in != nil {
				c.in = in
			}
		}
		if n > 0 {
			continue
		}
		select {
		case <-c.wake:
		case <-timeout:
			return nil, fmt.Errorf("perftest: the peer sent nothing on the exchange's QP for %v", c.timeout)
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		}
	}
}

// disconnect ends the test's connection as perftest does: the server disconnects and waits for
// the answer, the client waits for the server to disconnect (rdma_cm answers it). Either waits
// for the time wait's end, by when its last CM message (the client's DREP) has left the device.
func (c *cmConn) disconnect() error {
	if !c.client {
		if err := c.test.Disconnect(); err != nil {
			return fmt.Errorf("perftest: disconnect: %w", err)
		}
	} else if err := c.waitFor(c.test, rdmacm.Disconnected); err != nil {
		return err
	}
	return c.waitFor(c.test, rdmacm.TimewaitExit)
}

// waitFor waits for an event of id's, leaving the other connection's aside.
func (c *cmConn) waitFor(id *rdmacm.ID, t rdmacm.EventType) error {
	deadline := time.Now().Add(cmpTimeout(c.timeout))
	for {
		e, err := c.ev.Next(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("perftest: waiting for %s: %w", t, err)
		}
		if e.ID == id && e.Type == t {
			return nil
		}
	}
}

func cmpTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return 60 * time.Second
	}
	return d
}

// close ends the exchange's connection, which perftest never disconnects itself (its process's
// end does), and waits briefly for the peer's answer, so that neither side is left asking.
func (c *cmConn) close() {
	if c.comm != nil && c.comm.State() == "ESTABLISHED" {
		if c.comm.Disconnect() == nil {
			c.timeout = 2 * time.Second
			_ = c.waitFor(c.comm, rdmacm.TimewaitExit)
		}
	}
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
}
