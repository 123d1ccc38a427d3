package rdmacm

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/wire/mad"
)

// maxAHs is how many peers' address handles QP1 keeps; past it a handle is made for the
// message that needs it and not kept, so that sources a peer makes up hold nothing.
const maxAHs = 4096

// The GSI QP's buffers: receive slots of the GRH area and a MAD (512, as Linux's MAD layer
// posts), and send slots of a MAD, each in use until its send completes.
const (
	recvSlots = 512
	recvSlot  = engine.GRHLen + mad.Len
	sendSlots = 1024
)

// agent is the manager's MAD agent on its device's GSI QP (QP1), what Linux's mad.c is to ib_cm:
// the QP, its CQ and the memory both directions use; receives posted, and posted again once their
// MAD is handled; MADs sent from slots that free as their sends complete; and QP1's address
// handles, one a peer. It knows nothing of connections.
type agent struct {
	clock engine.Clock
	log   *slog.Logger
	// recv takes each MAD that arrives, or why one that arrived cannot be read; idle runs once
	// the MADs that were waiting are taken.
	recv func(received, error)
	idle func()

	pd  *engine.PD
	cq  *engine.CQ
	qp  *engine.QP
	mr  *engine.MR
	buf []byte

	polling atomic.Bool

	mu       sync.Mutex
	sendNext int
	inflight int  // send slots whose MAD has not completed
	closed   bool // nothing more is sent or taken; the resources go once no send is in flight
	released bool
	recvLost uint64 // receives that could not be posted again
	ahs      map[netip.Addr]*engine.AH
	making   map[netip.Addr]*ahCall // handles being made, for whoever asks meanwhile
	// testHookMakeAH runs before a handle is made, for a test to hold its maker there.
	testHookMakeAH func()
}

// received is one MAD that came to QP1: who sent it, its common header and the class's data
// after the header, which aliases the receive buffer until the handler returns.
type received struct {
	src  netip.Addr
	hdr  mad.Header
	body []byte
}

// ahCall is a handle being made for a peer, which those who ask for the same peer wait for.
type ahCall struct {
	done    chan struct{}
	ah      *engine.AH
	err     error
	waiters int
}

var (
	// ErrClosed is what a closed Manager answers.
	ErrClosed = errors.New("rdmacm: the connection manager is closed")
	// errNoSlot is a MAD that found every send slot on its way: it is lost, and its timer, if
	// it has one, sends it again.
	errNoSlot = errors.New("every send slot of QP1 is in flight")
	// errNoSource is a received MAD whose GRH area names no sender.
	errNoSource = errors.New("no source address in the GRH area")
)

// newAgent makes dev's GSI QP and its memory, moves the QP to RTS and posts its receives.
func newAgent(dev *engine.Device, log *slog.Logger, recv func(received, error), idle func()) (*agent, error) {
	a := &agent{clock: dev.Clock(), log: log, recv: recv, idle: idle, ahs: map[netip.Addr]*engine.AH{}, making: map[netip.Addr]*ahCall{}}
	if err := a.open(dev); err != nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		return nil, errors.Join(err, a.release())
	}
	// The completion callback runs in whatever goroutine released the device's lock, maybe one
	// holding the manager's: the MADs are taken in a step of the clock of their own.
	a.cq.OnCompletion(func() {
		if a.polling.CompareAndSwap(false, true) {
			a.clock.Post(0, a.poll)
		}
	})
	return a, nil
}

func (a *agent) open(dev *engine.Device) error {
	var err error
	if a.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if a.cq, err = dev.CreateCQ(recvSlots + sendSlots + 1); err != nil {
		return err
	}
	a.qp, err = a.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeGSI, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: engine.QPCap{MaxSendWR: sendSlots, MaxRecvWR: recvSlots, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	if err := modify(a.qp, datagramSteps(mad.GSIQKey, 0)); err != nil {
		return err
	}
	a.buf = make([]byte, recvSlots*recvSlot+sendSlots*mad.Len)
	if a.mr, err = a.pd.RegMR(a.buf, engine.AccessLocalWrite); err != nil {
		return err
	}
	for i := range recvSlots {
		if err := a.postRecv(i); err != nil {
			return err
		}
	}
	return nil
}

func (a *agent) postRecv(i int) error {
	return a.qp.PostRecv(engine.RecvWR{ID: uint64(i), SGL: []engine.SGE{{Addr: a.mr.Addr() + uint64(i*recvSlot), Length: recvSlot, LKey: a.mr.LKey()}}})
}

// send sends one MAD, h and body, to QP1 at ah.
func (a *agent) send(ah *engine.AH, h mad.Header, body []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.inflight == sendSlots:
		return errNoSlot
	}
	off := recvSlots*recvSlot + a.sendNext*mad.Len
	b := a.buf[off : off+mad.Len]
	if err := h.Put(b); err != nil {
		return err
	}
	clear(b[mad.HeaderLen+copy(b[mad.HeaderLen:], body):])
	// Slots are used in order and free in order: a GSI QP's sends complete in posting order.
	if err := a.qp.PostSend(engine.SendWR{Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: a.mr.Addr() + uint64(off), Length: mad.Len, LKey: a.mr.LKey()}},
		AH: ah, RemoteQPN: 1, RemoteQKey: mad.GSIQKey}); err != nil {
		return err
	}
	a.sendNext = (a.sendNext + 1) % sendSlots
	a.inflight++
	return nil
}

// poll takes the GSI QP's completions: each received MAD is handed to recv and its receive
// posted again.
func (a *agent) poll() {
	a.polling.Store(false)
	var wcs [16]engine.WC
	for a.live() {
		n := a.cq.Poll(wcs[:])
		if n == 0 {
			break
		}
		for _, wc := range wcs[:n] {
			if wc.Opcode == engine.WCRecv {
				a.received(wc)
			} else {
				a.sent()
			}
		}
	}
	a.idle()
}

func (a *agent) live() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.released
}

// received takes one receive completion: its MAD to recv, its buffer back to the QP.
func (a *agent) received(wc engine.WC) {
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return
	}
	if wc.Status == engine.WCSuccess && wc.ByteLen >= recvSlot {
		slot := a.buf[int(wc.WRID)*recvSlot : (int(wc.WRID)+1)*recvSlot]
		a.recv(parseReceived(slot, wc))
	}
	if wc.Status == engine.WCWRFlushErr {
		return
	}
	if err := a.postRecv(int(wc.WRID)); err != nil {
		// The QP takes one MAD fewer at once from now on: said, and counted in Stats.RecvLost.
		a.mu.Lock()
		a.recvLost++
		lost := a.recvLost
		a.mu.Unlock()
		a.log.Warn("rdmacm: a receive buffer of QP1 could not be posted again", "slot", wc.WRID, "lost", lost, "err", err)
	}
}

// parseReceived reads a received slot: the sender from its GRH area, then the MAD's header.
func parseReceived(slot []byte, wc engine.WC) (received, error) {
	src, ok := engine.SourceAddr(slot, wc.NetworkHdrType)
	if !ok {
		return received{}, errNoSource
	}
	b := slot[engine.GRHLen:]
	h, err := mad.Parse(b)
	if err != nil {
		return received{}, err
	}
	return received{src: src, hdr: h, body: b[mad.HeaderLen:]}, nil
}

// sent frees the oldest send slot; the last one of a closed agent releases its resources.
func (a *agent) sent() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	if a.closed && a.inflight == 0 && !a.released {
		if err := a.release(); err != nil {
			a.log.Warn("rdmacm: releasing QP1", "err", err)
		}
	}
}

// close stops the agent: nothing more is sent, nothing more taken, and its resources go once
// the sends already posted have left (now, when none is in flight). a.mu is not held.
func (a *agent) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.inflight > 0 || a.released {
		return nil
	}
	return a.release()
}

// release destroys what open made: the address handles kept, QP1, its CQ, its memory's
// registration. The PD stays: the device has no verb to free one. a.mu is held.
func (a *agent) release() error {
	var errs []error
	for dst, ah := range a.ahs {
		errs = append(errs, ah.Destroy())
		delete(a.ahs, dst)
	}
	if a.qp != nil {
		errs = append(errs, a.qp.Destroy())
	}
	if a.cq != nil {
		errs = append(errs, a.cq.Destroy())
	}
	if a.mr != nil {
		errs = append(errs, a.mr.Dereg())
	}
	a.released = true
	return errors.Join(errs...)
}

// ah is QP1's address handle to dst: the one kept for dst, made once however many ask at once;
// past maxAHs peers, one made for the caller alone, which drop gives back.
func (a *agent) ah(dst netip.Addr) (*engine.AH, error) {
	a.mu.Lock()
	if ah := a.ahs[dst]; ah != nil {
		a.mu.Unlock()
		return ah, nil
	}
	if a.closed {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	if c := a.making[dst]; c != nil {
		c.waiters++
		a.mu.Unlock()
		<-c.done
		return c.ah, c.err
	}
	if len(a.ahs)+len(a.making) >= maxAHs {
		a.mu.Unlock()
		return a.makeAH(dst)
	}
	c := &ahCall{done: make(chan struct{})}
	a.making[dst] = c
	hook := a.testHookMakeAH
	a.mu.Unlock()
	if hook != nil {
		hook()
	}
	// Made outside the lock: resolving the peer's link address may wait for the network.
	c.ah, c.err = a.makeAH(dst)
	a.mu.Lock()
	delete(a.making, dst)
	switch {
	case c.err != nil:
	case a.closed:
		c.err = errors.Join(ErrClosed, c.ah.Destroy())
		c.ah = nil
	default:
		a.ahs[dst] = c.ah
	}
	a.mu.Unlock()
	close(c.done)
	return c.ah, c.err
}

func (a *agent) makeAH(dst netip.Addr) (*engine.AH, error) {
	ah, err := a.pd.CreateAH(engine.AHAttr{DGID: dst, HopLimit: 64})
	if err != nil {
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	return ah, nil
}

// drop gives back a handle ah made for one caller; one kept for its peer stays, until release.
func (a *agent) drop(ah *engine.AH) {
	if ah == nil {
		return
	}
	a.mu.Lock()
	kept := a.released || a.ahs[ah.Attr().DGID] == ah
	a.mu.Unlock()
	if kept {
		return
	}
	if err := ah.Destroy(); err != nil {
		a.log.Warn("rdmacm: destroying an address handle of QP1", "peer", ah.Attr().DGID, "err", err)
	}
}

// ahWaiters is how many wait for dst's handle to be made, for a test.
func (a *agent) ahWaiters(dst netip.Addr) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.making[dst]; c != nil {
		return c.waiters
	}
	return 0
}

// lostReceives is how many receives could not be posted again.
func (a *agent) lostReceives() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recvLost
}
