// Package rping is softirdma's side of librdmacm's rping: a connection set up through rdma_cm
// (emu/rdmacm), then rping's ping-pong of RDMA READs and WRITEs, so either end may be rping on a
// Linux Soft-RoCE or hardware peer. Each ping, the client SENDs the address, rkey and length of a
// buffer holding "rdma-ping-N: " and a run of letters; the server READs it, SENDs a go-ahead, is
// sent the address of the client's sink, WRITEs what it read there and SENDs a go-ahead again;
// the client may check (-V) and print (-v) what came back.
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// Options are rping's, with its defaults in brackets.
type Options struct {
	Server bool
	// Addr is the server's address: what a client connects to, and what a server's peers
	// connect to (it must be the device's).
	Addr     netip.Addr
	Port     uint16 // [7174]
	Size     int    // ping buffer size, MinSize..MaxSize [64]
	Count    int    // pings, 0 for until the peer stops [0]
	Verbose  bool   // print each ping's data (-v)
	Validate bool   // the client compares what came back with what it sent (-V)
	// Timeout bounds each wait for the peer [30s].
	Timeout time.Duration
	// Wait keeps a client trying for this long while nobody listens at the server's port yet
	// (REJ, invalid service ID) or nobody answers; 0 tries once, as rping does.
	Wait time.Duration
	// Listening, if set, is called once a server listens.
	Listening func()
}

// Limits of the options (rping's own: RPING_MIN_BUFSIZE is the ping text's size, and 64 KiB is
// its largest).
const (
	MinSize  = 16
	MaxSize  = 64 << 10
	MaxCount = 100_000_000
)

func (o *Options) defaults() {
	if o.Port == 0 {
		o.Port = 7174
	}
	if o.Size == 0 {
		o.Size = 64
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
}

func (o *Options) check() error {
	switch {
	case o.Size < MinSize || o.Size > MaxSize:
		return fmt.Errorf("rping: size %d is out of range (%d..%d)", o.Size, MinSize, MaxSize)
	case o.Count < 0 || o.Count > MaxCount:
		return fmt.Errorf("rping: count %d is out of range (0..%d)", o.Count, MaxCount)
	case !o.Addr.IsValid():
		return errors.New("rping: an address is needed (-a)")
	case o.Timeout < 0 || o.Wait < 0:
		return errors.New("rping: negative timeout")
	}
	return nil
}

// infoLen is struct rping_rdma_info: a buffer's address (64 bits), rkey and length, big-endian.
const infoLen = 16

func putInfo(b []byte, addr uint64, rkey uint32, n int) {
	binary.BigEndian.PutUint64(b, addr)
	binary.BigEndian.PutUint32(b[8:], rkey)
	binary.BigEndian.PutUint32(b[12:], uint32(n))
}

// Result is what a run did.
type Result struct {
	Pings int
}

// peer is one side's resources: the QP and rping's four buffers.
type peer struct {
	o        Options
	cq       *engine.CQ
	qp       *engine.QP
	wake     chan struct{}
	ev       *cmpeer.Events
	ctx      context.Context
	send     []byte
	recv     []byte
	start    []byte // the client's ping text
	rdma     []byte // the server's copy, the client's sink
	sendMR   *engine.MR
	recvMR   *engine.MR
	startMR  *engine.MR
	rdmaMR   *engine.MR
	lastPeer [infoLen]byte
}

// Run runs one side of rping on dev, printing what rping prints to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) (Result, error) {
	o.defaults()
	var res Result
	if err := o.check(); err != nil {
		return res, err
	}
	p := &peer{o: o, wake: make(chan struct{}, 1), ctx: ctx}
	m, ev, err := cmpeer.New(ctx, dev, "rping")
	p.ev = ev
	if err != nil {
		return res, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return res, err
	}
	if p.cq, err = dev.CreateCQ(32); err != nil {
		return res, err
	}
	p.cq.OnCompletion(func() {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	})
	// rping's QP: RPING_SQ_DEPTH 16 sends, 2 receives, one SGE each.
	if p.qp, err = pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: engine.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: infoLen}}); err != nil {
		return res, err
	}
	defer p.qp.Destroy()
	reg := func(n int, a engine.Access) ([]byte, *engine.MR, error) {
		b := make([]byte, n)
		mr, err := pd.RegMR(b, a)
		return b, mr, err
	}
	all := engine.AccessLocalWrite | engine.AccessRemoteRead | engine.AccessRemoteWrite
	if p.send, p.sendMR, err = reg(infoLen, 0); err != nil {
		return res, err
	}
	if p.recv, p.recvMR, err = reg(infoLen, engine.AccessLocalWrite); err != nil {
		return res, err
	}
	if p.rdma, p.rdmaMR, err = reg(o.Size, all); err != nil {
		return res, err
	}
	if p.start, p.startMR, err = reg(o.Size, all); err != nil {
		return res, err
	}
	// As rdma_create_qp leaves it: in INIT, with its receive posted before the connection.
	fresh := func() error { return cmpeer.Renew(p.qp, p.postRecv, p.cq) }
	if err := fresh(); err != nil {
		return res, err
	}
	param := rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	var id *rdmacm.ID
	if o.Server {
		if _, err := m.Listen(o.Port); err != nil {
			return res, fmt.Errorf("rping: listen on %d: %w", o.Port, err)
		}
		if o.Listening != nil {
			o.Listening()
		}
		e, err := p.ev.Wait(rdmacm.ConnectRequest, 0)
		if err != nil {
			return res, err
		}
		id = e.ID
		if err := id.Accept(p.qp, param); err != nil {
			return res, fmt.Errorf("rping: accept: %w", err)
		}
		if _, err := p.ev.Wait(rdmacm.Established, o.Timeout); err != nil {
			return res, err
		}
	} else {
		e, err := p.ev.Dial(o.Addr, o.Wait, o.Timeout, func() (*rdmacm.ID, error) { return m.Connect(p.qp, o.Addr, o.Port, param) }, fresh)
		if err != nil {
			return res, err
		}
		id = e.ID
	}
	if o.Server {
		res.Pings, err = p.server(out)
	} else {
		res.Pings, err = p.client(out)
		derr := id.Disconnect()
		if derr != nil && err == nil {
			err = derr
		}
		// The DREQ is answered, and the connection's time wait ends, before the device may go.
		for derr == nil {
			_, werr := p.ev.Wait(rdmacm.TimewaitExit, o.Timeout)
			if errors.Is(werr, cmpeer.ErrDisconnected) {
				continue // this side's own DISCONNECTED comes first
			}
			if werr != nil && err == nil {
				err = werr
			}
			break
		}
	}
	return res, err
}

func (p *peer) postRecv() error {
	return p.qp.PostRecv(engine.RecvWR{ID: 1, SGL: []engine.SGE{{Addr: p.recvMR.Addr(), Length: infoLen, LKey: p.recvMR.LKey()}}})
}

// sendInfo SENDs the address, rkey and length of buf (registered as mr).
func (p *peer) sendInfo(mr *engine.MR, n int) error {
	putInfo(p.send, mr.Addr(), mr.RKey(), n)
	return p.qp.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled | engine.SendInline, InlineData: p.send})
}

// wait waits for the completion of wrid (1: a receive, which it posts again; other: a send or
// RDMA operation), taking the others it meets.
func (p *peer) wait(wrid uint64) error {
	var wcs [8]engine.WC
	deadline := time.NewTimer(p.o.Timeout)
	defer deadline.Stop()
	for {
		n := p.cq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			if wc.Status != engine.WCSuccess {
				return fmt.Errorf("rping: completion with status %s for wr %d: %v", wc.Status, wc.WRID, wc.Err)
			}
			if wc.WRID == 1 {
				copy(p.lastPeer[:], p.recv)
				if err := p.postRecv(); err != nil {
					return err
				}
			}
			if wc.WRID == wrid {
				return nil
			}
		}
		if n > 0 {
			continue
		}
		select {
		case <-p.wake:
		case <-p.ev.Wake():
			for e, ok := p.ev.Take(); ok; e, ok = p.ev.Take() {
				if e.Type == rdmacm.Disconnected {
					return cmpeer.ErrDisconnected
				}
			}
		case <-deadline.C:
			return fmt.Errorf("rping: no completion for %v", p.o.Timeout)
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
	}
}

// client runs the client's pings.
func (p *peer) client(out io.Writer) (int, error) {
	start := byte(65)
	for ping := 0; p.o.Count == 0 || ping < p.o.Count; ping++ {
		// rping's text: "rdma-ping-N: " and letters from start on, A to z, the last byte 0.
		cc := copy(p.start, fmt.Sprintf("rdma-ping-%d: ", ping))
		c := start
		for i := cc; i < len(p.start); i++ {
			p.start[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		p.start[len(p.start)-1] = 0
		clear(p.rdma)
		if err := p.sendInfo(p.startMR, len(p.start)); err != nil {
			return ping, err
		}
		if err := p.wait(1); err != nil { // the server read it
			return ping, err
		}
		if err := p.sendInfo(p.rdmaMR, len(p.rdma)); err != nil {
			return ping, err
		}
		if err := p.wait(1); err != nil { // the server wrote it back
			return ping, err
		}
		if p.o.Validate && string(p.start) != string(p.rdma) {
			return ping, errors.New("rping: data mismatch")
		}
		if p.o.Verbose {
			fmt.Fprintf(out, "ping data: %s\n", cstring(p.rdma))
		}
	}
	if p.o.Count == 0 {
		return 0, nil
	}
	return p.o.Count, nil
}

// server answers pings until the client disconnects, or Count of them.
func (p *peer) server(out io.Writer) (int, error) {
	pings := 0
	for p.o.Count == 0 || pings < p.o.Count {
		if err := p.wait(1); err != nil { // the client's buffer
			if errors.Is(err, cmpeer.ErrDisconnected) {
				return pings, nil
			}
			return pings, err
		}
		addr, rkey, n := binary.BigEndian.Uint64(p.lastPeer[:]), binary.BigEndian.Uint32(p.lastPeer[8:]), int(binary.BigEndian.Uint32(p.lastPeer[12:]))
		n = min(n, len(p.rdma))
		if err := p.qp.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, RemoteAddr: addr, RKey: rkey,
			SGL: []engine.SGE{{Addr: p.rdmaMR.Addr(), Length: uint32(n), LKey: p.rdmaMR.LKey()}}}); err != nil {
			return pings, err
		}
		if err := p.wait(3); err != nil {
			return pings, err
		}
		if p.o.Verbose {
			fmt.Fprintf(out, "server ping data: %s\n", cstring(p.rdma))
		}
		if err := p.sendInfo(p.rdmaMR, len(p.rdma)); err != nil { // go ahead
			return pings, err
		}
		if err := p.wait(1); err != nil { // the client's sink
			return pings, err
		}
		addr, rkey = binary.BigEndian.Uint64(p.lastPeer[:]), binary.BigEndian.Uint32(p.lastPeer[8:])
		w := len(cstring(p.rdma)) + 1 // rping writes the text and its 0
		if err := p.qp.PostSend(engine.SendWR{ID: 4, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, RemoteAddr: addr, RKey: rkey,
			SGL: []engine.SGE{{Addr: p.rdmaMR.Addr(), Length: uint32(min(w, len(p.rdma))), LKey: p.rdmaMR.LKey()}}}); err != nil {
			return pings, err
		}
		if err := p.wait(4); err != nil {
			return pings, err
		}
		if err := p.sendInfo(p.rdmaMR, len(p.rdma)); err != nil { // go ahead
			return pings, err
		}
		pings++
	}
	// Count pings done: the client disconnects.
	if _, err := p.ev.Wait(rdmacm.Disconnected, p.o.Timeout); err != nil {
		return pings, err
	}
	return pings, nil
}

// cstring is b up to its first 0.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
