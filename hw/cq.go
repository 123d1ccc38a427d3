package hw

import (
	"sync"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// eq is an event queue in guest memory: completion events of armed CQs, or async events.
type eq struct {
	mu      sync.Mutex
	r       *ring
	num     uint32
	kind    uint8
	vector  int
	prod    uint32
	seq     uint64
	dropped uint64
	written uint64 // entries written, for a CQ to tell whether its last one is still unread
	gone    bool
}

// post adds an entry and reports whether the EQ's vector should be signalled. A full EQ drops
// the entry; the running count in the next one shows the gap.
func (e *eq) post(typ uint8, num uint32) bool {
	return e.postFor(typ, num, nil)
}

// postCompletion adds a completion event for c unless c's last one is still unread in the
// ring: one unread entry wakes the CQ as well as several would, and a process arming its CQ
// again and again (each arm over unpolled CQEs is announced at once) cannot fill the EQ that
// other CQs' events share. It reports whether to signal the vector.
func (e *eq) postCompletion(c *cq) bool {
	return e.postFor(abi.EQCompletion, c.emu.Num(), &c.eqWritten)
}

// postFor is post; with last, the entry is skipped while the one last recorded there is unread,
// and a new one is recorded there.
func (e *eq) postFor(typ uint8, num uint32, last *uint64) bool {
	var b [abi.EQEntrySize]byte
	entry := abi.EQEntry(b[:])
	entry.SetType(typ)
	entry.SetNum(num)
	return e.put(b[:], last)
}

// put adds entry, the EQ's element size, with the next sequence number written at EQSeq (FaultSeq
// too); with last as postFor says.
func (e *eq) put(entry []byte, last *uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return false
	}
	cons, err := e.r.readU32(abi.QHConsumer)
	if err != nil {
		e.gone = true
		return false
	}
	unread := uint64((e.prod - cons) & e.r.mask())
	if last != nil && *last != 0 && e.written-*last < unread {
		return true // its entry is among the unread ones: the vector again, no entry
	}
	e.seq++
	if (e.prod+1)&e.r.mask() == cons&e.r.mask() {
		e.dropped++
		return true
	}
	abi.EQEntry(entry).SetSeq(e.seq)
	if e.r.access(e.r.elemOff(e.prod), entry, true) != nil {
		e.gone = true
		return false
	}
	e.prod = (e.prod + 1) & e.r.mask()
	if e.r.writeU32(abi.QHProducer, e.prod) != nil {
		e.gone = true
	}
	e.written++
	if last != nil {
		*last = e.written
	}
	return true
}

// cq is a CQ in guest memory: the engine's completions are written into its ring as they
// happen (engine.CreateCQSolicitedSink), in the ib_uverbs_wc layout.
type cq struct {
	f    *Function
	emu  *engine.CQ
	slot uint32
	eq   *eq

	mu   sync.Mutex
	r    *ring
	prod uint32
	gone bool // its ring is unusable (revoked, unmapped): every completion overflows

	eqWritten uint64 // its EQ's written count at its last completion event (0: none); eq.mu guards it

	// written counts the CQEs written; solicitedWritten is written just after the last one that
	// was solicited or failed (0: none), so an arm for solicited completions can tell whether
	// that one is still unconsumed. mu guards both.
	written, solicitedWritten uint64

	// Event moderation (OpModifyCQ): once the CQ fires, its event is held until modCount
	// completions have come since (0: no count) or modPeriod has passed. held says one is;
	// heldFor counts its completions. mu guards them; timer (made with the CQ, stopped until an
	// event is held) runs expire on the function's clock.
	modCount  uint16
	modPeriod time.Duration
	held      bool
	heldFor   uint32
	timer     engine.Timer
}

// sink writes one completion; false means the ring is full (an overflow for the engine).
// It runs with the engine locked.
func (c *cq) sink(wc engine.WC, solicited bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return false
	}
	cons, err := c.r.readU32(abi.QHConsumer)
	if err != nil || (c.prod+1)&c.r.mask() == cons&c.r.mask() {
		return false
	}
	var b [abi.CQESize]byte
	wqe.EncodeCQE(b[:], &wc, true)
	if c.r.access(c.r.elemOff(c.prod), b[:], true) != nil {
		c.gone = true
		return false
	}
	c.prod = (c.prod + 1) & c.r.mask()
	c.written++
	if solicited || wc.Status != engine.WCSuccess {
		c.solicitedWritten = c.written
	}
	return c.r.writeU32(abi.QHProducer, c.prod) == nil
}

// completed runs after the engine queued a completion (outside its lock): an armed CQ that fired
// gets its entry in its EQ, at once or, moderated, once its count or period is reached.
func (c *cq) completed() {
	fired := false
	select {
	case <-c.emu.Events():
		fired = true
	default:
	}
	c.mu.Lock()
	if fired && (c.modCount > 1 || c.modPeriod > 0) && !c.held {
		c.held, c.heldFor = true, 0
		if c.modPeriod > 0 {
			c.timer.Reset(c.modPeriod)
		}
	}
	announce := fired && !c.held
	if c.held {
		c.heldFor++
		if c.modCount > 0 && c.heldFor >= uint32(c.modCount) {
			announce = c.releaseLocked()
		}
	}
	c.mu.Unlock()
	if announce {
		c.announce()
	}
}

// expire announces a held event whose period has passed.
func (c *cq) expire() {
	c.mu.Lock()
	announce := c.held && c.releaseLocked()
	c.mu.Unlock()
	if announce {
		c.announce()
	}
}

// releaseLocked ends a held event and says whether to announce it (not once the CQ is gone).
func (c *cq) releaseLocked() bool {
	c.held = false
	c.timer.Stop()
	return !c.gone
}

// announce puts the CQ's completion event in its EQ and signals the EQ's vector.
func (c *cq) announce() {
	if c.eq != nil && c.eq.postCompletion(c) {
		c.f.signal(c.eq.vector)
	}
}

// moderate sets the CQ's event moderation (OpModifyCQ). An event held under the old setting
// goes out at once rather than wait by rules the driver has replaced: from the clock, as a
// period's would, not from within the command.
func (c *cq) moderate(count uint16, period time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.modCount, c.modPeriod = count, period
	if c.held {
		c.timer.Reset(0)
	}
}

// arm arms the CQ from a write to its arm register. The arm register is a posted write: a
// completion may land after the driver's last poll and before the device sees the arm, and
// would then never be announced. So an arm finds the CQEs the driver has not consumed (the
// ring's consumer index) and announces them at once if one of them would have fired it: any, for
// the next completion; a solicited or failed one, for solicited completions only (RDS arms its
// receive CQ so, polls, arms, polls again, and waits). The event may come twice, never not at
// all, as a NIC reporting missed events.
func (c *cq) arm(v uint32) {
	if v&(abi.ArmNext|abi.ArmSolicited) == 0 {
		return
	}
	next := v&abi.ArmNext != 0
	_ = c.emu.ReqNotify(!next)
	if c.unpolled(!next) {
		c.announce()
	}
}

// unpolled says whether the ring holds completions the driver has not consumed; with
// solicitedOnly, whether a solicited or failed one is among them.
func (c *cq) unpolled(solicitedOnly bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return false
	}
	cons, err := c.r.readU32(abi.QHConsumer)
	if err != nil {
		return false
	}
	n := uint64((c.prod - cons) & c.r.mask())
	if !solicitedOnly {
		return n != 0
	}
	return c.solicitedWritten != 0 && c.written-c.solicitedWritten < n
}

// eqElemLog is log2 of abi.EQEntrySize, pfElemLog of abi.FaultEntrySize: an EQ's elements are
// its entries.
const (
	eqElemLog = 4
	pfElemLog = 5
)

func (f *Function) createEQLocked(args abi.CreateEQArgs, result func(int, uint32)) error {
	kind, vector := args.Kind(), args.Vector()
	if kind > abi.EQPageFault || vector >= abi.NumVectors {
		return errf(syscall.EINVAL, "EQ kind %d, vector %d", kind, vector)
	}
	elemLog, size := uint8(eqElemLog), abi.EQEntrySize
	if kind == abi.EQPageFault {
		elemLog, size = pfElemLog, abi.FaultEntrySize
	}
	if len(f.eqs) >= abi.NumVectors { // what RegMaxEQ says
		return errf(syscall.ENOMEM, "all %d EQs in use", abi.NumVectors)
	}
	var qb [abi.QueueArgsSize]byte
	q := abi.QueueArgs(qb[:])
	q.SetLogCount(args.LogCount())
	q.SetLogElem(elemLog)
	copy(q.Pages(), args.Pages())
	r, err := newRing(&f.mem, q, size, abi.EQMaxLog)
	if err != nil {
		return err
	}
	switch {
	case kind == abi.EQAsync && f.asyncEQ != nil:
		return errf(syscall.EBUSY, "an async EQ exists")
	case kind == abi.EQPageFault && f.pfEQ != nil:
		return errf(syscall.EBUSY, "a page-fault EQ exists")
	}
	f.nextEQ++
	e := &eq{r: r, num: f.nextEQ, kind: kind, vector: int(vector)}
	f.eqs[e.num] = e
	switch kind {
	case abi.EQAsync:
		f.asyncEQ = e
	case abi.EQPageFault:
		f.pfEQ = e
	}
	result(abi.ResultNum, e.num)
	return nil
}

func (f *Function) destroyEQLocked(n uint32) error {
	e, err := find(f.eqs, n, "EQ")
	if err != nil {
		return err
	}
	for _, c := range f.cqSlots {
		if c != nil && c.eq == e {
			return errf(syscall.EBUSY, "EQ %d serves CQ %d", n, c.emu.Num())
		}
	}
	if e == f.pfEQ && f.odpMRs > 0 {
		return errf(syscall.EBUSY, "EQ %d serves %d on-demand MRs", n, f.odpMRs)
	}
	e.mu.Lock()
	e.gone = true
	e.mu.Unlock()
	delete(f.eqs, n)
	if f.asyncEQ == e {
		f.asyncEQ = nil
	}
	if f.pfEQ == e {
		f.pfEQ = nil
	}
	return nil
}

func (f *Function) createCQLocked(args abi.CreateCQArgs, result func(int, uint32)) error {
	r, err := newRing(&f.mem, args.Queue(), abi.CQESize, abi.CQMaxLog)
	if err != nil {
		return err
	}
	var e *eq
	if n := args.EQ(); n != abi.CQNoEQ {
		var ok bool
		if e, ok = f.eqs[n]; !ok || e.kind != abi.EQCompletion {
			return errf(syscall.ENOENT, "completion EQ %d", n)
		}
	}
	slot := freeSlot(f.cqSlots[:])
	if slot < 0 {
		return errf(syscall.ENOMEM, "all %d CQ slots in use", len(f.cqSlots))
	}
	c := &cq{f: f, r: r, eq: e, slot: uint32(slot)}
	c.timer = f.cfg.Clock.NewTimer(c.expire)
	ecq, err := f.dev.CreateCQSolicitedSink(c.sink)
	if err != nil {
		return err
	}
	c.emu = ecq
	ecq.OnCompletion(c.completed)
	f.cqSlots[slot] = c
	f.cqs[ecq.Num()] = c
	result(abi.ResultNum, ecq.Num())
	result(abi.ResultSlot, uint32(slot))
	return nil
}

func (f *Function) destroyCQLocked(n uint32) error {
	return destroyFound(f.cqs, n, "CQ", func(c *cq) error { return c.emu.Destroy() }, func(c *cq) {
		c.mu.Lock()
		c.gone = true
		c.releaseLocked()
		c.mu.Unlock()
		f.cqSlots[c.slot] = nil
	})
}

// modifyCQLocked sets a CQ's event moderation; a period over its bound is EINVAL (a count is any
// u16).
func (f *Function) modifyCQLocked(n uint32, count, period uint16) error {
	c, err := find(f.cqs, n, "CQ")
	if err != nil {
		return err
	}
	if period > abi.CQModMaxPeriod {
		return errf(syscall.EINVAL, "CQ moderation period %d us over %d", period, abi.CQModMaxPeriod)
	}
	c.moderate(count, time.Duration(period)*time.Microsecond)
	return nil
}

// resizeCQLocked moves the CQ to a new ring, carrying over the completions not yet polled:
// they start the new ring, whose producer index is their count.
func (f *Function) resizeCQLocked(n uint32, args abi.QueueArgs) error {
	c, err := find(f.cqs, n, "CQ")
	if err != nil {
		return err
	}
	r, err := newRing(&f.mem, args, abi.CQESize, abi.CQMaxLog)
	if err != nil {
		return err
	}
	// The count below is of the completions a NIC would have written by now: the sends posted
	// to UD and UC QPs, which complete without their peer, complete first (taking c.mu, so not
	// under it).
	for _, q := range f.qpSlots {
		if q != nil && q.scq == c {
			q.emu.SendPostedDatagrams()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cons, err := c.r.readU32(abi.QHConsumer)
	if err != nil {
		return err
	}
	pending := (c.prod - cons) & c.r.mask()
	if pending >= r.count() {
		return errf(syscall.EINVAL, "%d completions do not fit in %d", pending, r.count()-1)
	}
	b := make([]byte, abi.CQESize)
	for i := uint32(0); i < pending; i++ {
		if err := c.r.access(c.r.elemOff(cons+i), b, false); err != nil {
			return err
		}
		if err := r.access(r.elemOff(i), b, true); err != nil {
			return err
		}
	}
	if err := r.writeU32(abi.QHProducer, pending); err != nil {
		return err
	}
	c.r, c.prod, c.gone = r, pending, false
	return nil
}

// doorbell handles a write to BAR 2: a QP's send-queue doorbell or a CQ's arm register.
func (f *Function) doorbell(off uint64, v uint32) {
	if off%8 != 0 {
		return
	}
	if off < abi.CQArmBase {
		f.mu.Lock()
		q := f.qpSlots[(off-abi.SQDoorbellBase)/8]
		enabled := f.regs.status&abi.DevStatusReady != 0
		f.mu.Unlock()
		if q != nil && enabled {
			q.ring()
		}
		return
	}
	f.mu.Lock()
	c := f.cqSlots[(off-abi.CQArmBase)/8]
	f.mu.Unlock()
	if c != nil {
		c.arm(v)
	}
}
