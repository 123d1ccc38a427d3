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
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/compat/internal/cmpeer"
	"github.com/softirdma/softirdma/emu/rdmacm"
)

// Options are rping's: the options of the rdma_cm tools (cmpeer.Options, with rping's defaults in
// brackets: Port [7174], Size, the ping buffer's, MinSize..MaxSize [64], Count, pings, 0 for until
// the peer stops [0], Timeout [30s], and Wait, 0 trying once as rping does), and what it prints
// and checks.
type Options struct {
	cmpeer.Options
	Verbose  bool // print each ping's data (-v)
	Validate bool // the client compares what came back with what it sent (-V)
}

// Limits of the options (rping's own: RPING_MIN_BUFSIZE is the ping text's size, and 64 KiB is
// its largest).
const (
	MinSize  = 16
	MaxSize  = 64 << 10
	MaxCount = 100_000_000
)

// tool is rping among the rdma_cm tools: its defaults and limits.
var tool = cmpeer.Tool{
	Name:     "rping",
	Defaults: cmpeer.Options{Port: 7174, Size: 64, Timeout: 30 * time.Second},
	MaxCount: MaxCount,
	MinSize:  MinSize,
	MaxSize:  MaxSize,
	AddrHint: " (-a)",
}

// Defaults are rping's options: port 7174, a ping buffer of 64 bytes, pings until the peer stops.
func Defaults() Options { return Options{Options: tool.Defaults} }

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
	*cmpeer.Peer
	verbose, validate bool
	cq                *engine.CQ
	qp                *engine.QP
	send              []byte
	recv              []byte
	start             []byte // the client's ping text
	rdma              []byte // the server's copy, the client's sink
	sendMR            *engine.MR
	recvMR            *engine.MR
	startMR           *engine.MR
	rdmaMR            *engine.MR
	lastPeer          [infoLen]byte
}

// Run runs one side of rping on dev, printing what rping prints to out.
func Run(ctx context.Context, dev *engine.Device, o Options, out io.Writer) (Result, error) {
	var res Result
	tool.Fill(&o.Options)
	if err := tool.CheckSize(o.Options, 0); err != nil { // rping names a bad size first
		return res, err
	}
	cp, err := tool.Start(ctx, dev, o.Options, out)
	if err != nil {
		return res, err
	}
	defer cp.Close()
	p := &peer{Peer: cp, verbose: o.Verbose, validate: o.Validate}
	if err := p.createQP(); err != nil {
		return res, err
	}
	if err := p.register(); err != nil {
		return res, err
	}
	// As rdma_create_qp leaves it: in INIT, with its receive posted before the connection.
	if err := p.fresh(); err != nil {
		return res, err
	}
	id, err := p.connect()
	if err != nil {
		return res, err
	}
	if p.O.Server {
		res.Pings, err = p.server()
		if err == nil {
			err = p.leave()
		}
		return res, err
	}
	res.Pings, err = p.client()
	return res, p.hangUp(id, err)
}

// createQP makes rping's CQ and QP: RPING_SQ_DEPTH 16 sends, 2 receives, one SGE each.
func (p *peer) createQP() error {
	var err error
	if p.cq, err = p.Dev.CreateCQ(32); err != nil {
		return err
	}
	p.Notify(p.cq)
	p.qp, err = p.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: engine.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: infoLen}})
	return err
}

// register registers rping's buffers: the info sent and received, and two of Size the peer
// reaches.
func (p *peer) register() error {
	reg := func(n int, a engine.Access) ([]byte, *engine.MR, error) {
		b := make([]byte, n)
		mr, err := p.PD.RegMR(b, a)
		return b, mr, err
	}
	all := engine.AccessLocalWrite | engine.AccessRemoteRead | engine.AccessRemoteWrite
	var err error
	if p.send, p.sendMR, err = reg(infoLen, 0); err != nil {
		return err
	}
	if p.recv, p.recvMR, err = reg(infoLen, engine.AccessLocalWrite); err != nil {
		return err
	}
	if p.rdma, p.rdmaMR, err = reg(p.O.Size, all); err != nil {
		return err
	}
	p.start, p.startMR, err = reg(p.O.Size, all)
	return err
}

// fresh readies the QP as rdma_create_qp leaves it, again after a refused attempt.
func (p *peer) fresh() error { return cmpeer.Renew(p.qp, p.postRecv, p.cq) }

// param is rping's rdma_conn_param: one READ each way, retry counts 7.
var param = rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// connect connects the QP through rdma_cm: a server listens and accepts the first request, a
// client connects to the server.
func (p *peer) connect() (*rdmacm.ID, error) {
	if !p.O.Server {
		e, err := p.Events.Dial(p.O.Addr, p.O.Wait, p.O.Timeout, func() (*rdmacm.ID, error) { return p.CM.Connect(p.qp, p.O.Addr, p.O.Port, param) }, p.fresh)
		return e.ID, err
	}
	if err := p.Listen(p.CM.Listen); err != nil {
		return nil, err
	}
	id, err := p.Events.Accept(p.qp, param, 0)
	if err != nil {
		return nil, err
	}
	if _, err := p.Events.Wait(rdmacm.Established, p.O.Timeout); err != nil {
		return nil, err
	}
	return id, nil
}

// hangUp ends a client's run as rping does: it disconnects, and the DREQ is answered and the
// connection's time wait ends before the device may go. err, the pings' own, comes first.
func (p *peer) hangUp(id *rdmacm.ID, err error) error {
	derr := id.Disconnect()
	if derr != nil && err == nil {
		err = derr
	}
	for derr == nil {
		_, werr := p.Events.Wait(rdmacm.TimewaitExit, p.O.Timeout)
		if errors.Is(werr, cmpeer.ErrDisconnected) {
			continue // this side's own DISCONNECTED comes first
		}
		if werr != nil && err == nil {
			err = werr
		}
		break
	}
	return err
}

// leave ends a server's run once the client disconnected: the device stays until the
// connection's time wait ends, by when the DREP that answered the client's DREQ has left it
// (the connection manager sends it after telling of the disconnection). A device that went at
// once could take the DREP with it, and the client would wait out its DREQ's retries.
func (p *peer) leave() error {
	_, err := p.Events.Wait(rdmacm.TimewaitExit, p.O.Timeout)
	return err
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
	deadline := time.NewTimer(p.O.Timeout)
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
		case <-p.Wake:
		case <-p.Events.Wake():
			for e, ok := p.Events.Take(); ok; e, ok = p.Events.Take() {
				if e.Type == rdmacm.Disconnected {
					return cmpeer.ErrDisconnected
				}
			}
		case <-deadline.C:
			return fmt.Errorf("rping: no completion for %v", p.O.Timeout)
		case <-p.Ctx.Done():
			return p.Ctx.Err()
		}
	}
}

// client runs the client's pings.
func (p *peer) client() (int, error) {
	start := byte(65)
	for ping := 0; p.O.Count == 0 || ping < p.O.Count; ping++ {
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
		if p.validate && string(p.start) != string(p.rdma) {
			return ping, errors.New("rping: data mismatch")
		}
		if p.verbose {
			fmt.Fprintf(p.Out, "ping data: %s\n", cstring(p.rdma))
		}
	}
	if p.O.Count == 0 {
		return 0, nil
	}
	return p.O.Count, nil
}

// server answers pings until the client disconnects, or Count of them.
func (p *peer) server() (int, error) {
	pings := 0
	for p.O.Count == 0 || pings < p.O.Count {
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
		if p.verbose {
			fmt.Fprintf(p.Out, "server ping data: %s\n", cstring(p.rdma))
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
	if _, err := p.Events.Wait(rdmacm.Disconnected, p.O.Timeout); err != nil {
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
