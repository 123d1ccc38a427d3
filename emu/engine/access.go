package engine

import (
	"encoding/binary"
	"errors"
	"runtime"
	"sync/atomic"

	"github.com/softirdma/softirdma/keys"
)

// Memory access: every key is checked for each packet, as hardware does, under the tables lock;
// an access inside the range its key reached at the QP's last lookup of that key (keys.Reach)
// reuses that lookup while the key space has not changed since (the tables lock's generation,
// which every holder but a lookup moves on), since the same lookup would give the same answer.
// The bytes are copied after that lock is released, so a long copy holds up no other QP.
// What keeps the copy safe instead is a pin on the MR whose memory it is, taken with the lookup
// (or the pin scope of the QP's run, below):
// Dereg, a Rereg that changes the memory and RevokeRange change the key space first (no new
// lookup finds the memory) and then drain the MR, waiting for the copies in flight. So once they
// return, nothing of the device's touches the memory, and its owner may free it. So do the changes
// that take a key's access away while the memory stays: dealloc_mw, LOCAL_INV, SEND_WITH_INV, a
// bind that moves a window, REG_MR. Each drains the MR the key reached before it, so that when it
// completes no WRITE through the old key is still landing, as on a NIC.

// Pin scopes. A requester's run and a received batch copy packet after packet under one hold of
// their QP's lock, most often over the same MR; a pin per packet (two atomic adds on the MR's
// reader count) was 9% of an 8-byte WRITE's cost. Inside such a run the QP opens a pin scope
// instead: one atomic add makes its sequence odd, before the first key space generation it
// compares, and one more makes it even when the run ends, before the QP's lock is released.
// A pin in the scope is the generation check alone. drain, after the key space changed (the
// generation moved on), waits for the MR's read pins as before and then for every QP's scope
// that was open when it looked: a copy of such a scope may have compared the old generation. A
// scope that opens after that compares the new one, by the order of the two atomic operations
// on each side. A scope never waits for a drain: the QP closes its own before it drains (a
// LOCAL_INV, a SEND_WITH_INV), and drains are made holding no lock of the engine but one's own
// QP's, so whatever a scope waits for (the tables lock, a CQ's, the outbox) never waits for a
// drain in turn. The same goes for what a device model's callbacks take during a run (a CQ
// sink's lock, a page list's read, an address space's Segments): a model may drain holding a
// lock of its own (hw's command queue holds the function's) only if no callback takes it.

// pinScope is a QP's pin scope; its fields but seq are guarded by the QP's lock.
type pinScope struct {
	depth int           // runs that began and have not ended: a received ACK may run the requester
	open  bool          // seq is odd: the scope's copies may have compared a generation
	seq   atomic.Uint64 // odd while open, read by drain
}

// beginPins starts a pin scope, or nests in the one started; the QP's lock is held.
func (qp *QP) beginPins() { qp.pins.depth++ }

// endPins ends what beginPins started, closing the scope at the outermost end; the QP's lock
// is held until after it.
func (qp *QP) endPins() {
	if qp.pins.depth--; qp.pins.depth == 0 {
		qp.closePins()
	}
}

// closePins says that no copy of the QP's is under way: it ends a run, and comes before the
// QP drains an MR itself. The next pin of the run opens the scope again.
func (qp *QP) closePins() {
	if qp.pins.open {
		qp.pins.open = false
		qp.pins.seq.Add(1)
	}
}

// scopedPin reports whether a pin of the QP's goes in its scope, opening it if it is not.
func (qp *QP) scopedPin() bool {
	if qp.pins.depth == 0 {
		return false
	}
	if !qp.pins.open {
		qp.pins.open = true
		qp.pins.seq.Add(1) // before the generation is compared
	}
	return true
}

// drainMR drains an MR (nil: none) from inside the QP's run, closing its scope first.
func (qp *QP) drainMR(mr *MR) {
	qp.closePins()
	mr.drain()
}

// pinned is a checked range of registered memory, its MR pinned until release.
type pinned struct {
	keys.Span
	mr *MR // nil for an empty range, which pins nothing, and for a pin of a scope
}

// release unpins the MR; a second release does nothing.
func (p *pinned) release() {
	if p.mr != nil {
		p.mr.pins.RUnlock()
		p.mr = nil
	}
}

// drain waits until no copy over the MR's memory is under way: the MR's read pins, then the pin
// scopes open when it looks. The caller holds no lock of the engine but perhaps its own QP's (a
// work request or a SEND_WITH_INV that invalidates), whose scope it has closed (drainMR): a copy
// in flight holds its QP's lock and waits for no other, and no QP holds a read pin between
// packets.
func (mr *MR) drain() {
	if mr == nil {
		return
	}
	lockAtMostQPHeld("draining an MR")
	mr.pins.Lock()
	//lint:ignore SA2001 the critical section is empty on purpose: the lock is the wait
	mr.pins.Unlock()
	mr.pd.dev.waitPinScopes()
}

// waitPinScopes waits for every QP's pin scope open now to close (or to close and open again).
// The QPs are read under the device's lock and waited for after it: a scope ends within its
// QP's run, which takes no device lock to end.
func (d *Device) waitPinScopes() {
	type open struct {
		qp  *QP
		seq uint64
	}
	var buf [8]open
	waits := buf[:0]
	d.mu.Lock()
	for _, qp := range d.qps {
		if s := qp.pins.seq.Load(); s&1 != 0 {
			waits = append(waits, open{qp, s})
		}
	}
	d.mu.Unlock()
	for _, w := range waits {
		for w.qp.pins.seq.Load() == w.seq {
			runtime.Gosched()
		}
	}
}

// keyMRLocked is the MR whose memory the key reaches now: an MR's own, or the MR a window is
// bound to; nil if none. The tables lock is held.
func (d *Device) keyMRLocked(k keys.Key) *MR {
	index := k.Index()
	if k.IsMW() {
		w, err := d.keys.QueryMW(k)
		if err != nil || w.MR == 0 {
			return nil
		}
		index = w.MR.Index()
	}
	return d.mrs[index]
}

// pin pins mr, the MR whose memory a span the key space gave lies in (keyMRLocked), for a copy
// by qp: in its pin scope if it has one open. The tables lock is held, so no change of the key
// space comes between the lookup and the pin.
func (qp *QP) pin(sp keys.Span, mr *MR) pinned {
	p := pinned{Span: sp}
	if sp.Len() == 0 || mr == nil || qp.scopedPin() {
		return p
	}
	mr.pins.RLock()
	p.mr = mr
	return p
}

// remoteAccess checks an rkey access for a request arriving on this QP, and pins what it
// reaches for a copy.
//
// The range the rkey reaches (keys.Reach) is kept from the last lookup that passed, on the
// terms of localAccess's.
func (qp *QP) remoteAccess(rkey uint32, va, n uint64, rights Access) (pinned, error) {
	d := qp.dev
	c := &qp.rkeyKept
	if c.covers(rkey, rights, va, n) {
		if p, ok := c.pin(qp, va-c.lo, n); ok {
			return p, nil
		}
	}
	d.tab.lookupLock()
	defer d.tab.Unlock()
	sp, err := qp.checkRemote(rkey, va, n, rights)
	if err != nil {
		return pinned{}, err
	}
	mr := d.keyMRLocked(keys.Key(rkey))
	c.keep(d, rkey, rights, n, mr)
	return qp.pin(sp, mr), nil
}

// checkRemote checks an rkey access for a request arriving on this QP. The tables lock is held.
func (qp *QP) checkRemote(rkey uint32, va, n uint64, rights Access) (keys.Span, error) {
	return qp.dev.keys.Remote(keys.RemoteAccess{Key: keys.Key(rkey), PD: qp.pd.handle, QP: keys.QPN(qp.qpn), VA: va, Len: n, Rights: rights})
}

// remoteAllowed checks an rkey access without reaching the memory.
func (qp *QP) remoteAllowed(rkey uint32, va, n uint64, rights Access) error {
	d := qp.dev
	c := &qp.rkeyKept
	if c.covers(rkey, rights, va, n) && d.tab.gen.Load() == c.gen {
		return nil
	}
	d.tab.lookupLock()
	defer d.tab.Unlock()
	_, err := qp.checkRemote(rkey, va, n, rights)
	if err == nil {
		c.keep(d, rkey, rights, n, d.keyMRLocked(keys.Key(rkey)))
	}
	return err
}

// keyReach is what a lookup that passed found a key to reach (keys.Reach): the accesses with
// the same rights inside [lo, lo+span.Len()) pass too while the key space stands.
type keyReach struct {
	key    uint32
	rights Access
	lo     uint64
	kept
}

// covers says whether an access of n > 0 bytes at va lies in the kept reach of key with rights.
func (c *keyReach) covers(key uint32, rights Access, va, n uint64) bool {
	return c.mr != nil && c.key == key && c.rights == rights && n > 0 &&
		va >= c.lo && va-c.lo <= c.span.Len() && n <= c.span.Len()-(va-c.lo)
}

// keep keeps the reach of key, which a lookup of n bytes with rights has just passed under the
// tables lock, for the accesses after; mr is the MR its memory is in. A zero-length access is not
// checked (K7), so it keeps nothing; nor does a key whose reach is not a plain range (keys.Reach).
func (c *keyReach) keep(d *Device, key uint32, rights Access, n uint64, mr *MR) {
	if n == 0 || mr == nil {
		return
	}
	lo, sp, ok := d.keys.Reach(keys.Key(key))
	if !ok {
		return
	}
	*c = keyReach{key: key, rights: rights, lo: lo, kept: kept{span: sp, mr: mr, gen: d.tab.gen.Load()}}
}

// kept is a lookup's span kept for later packets, with its MR and the tables lock's generation
// when it was made.
type kept struct {
	span keys.Span
	mr   *MR // nil: nothing kept
	gen  uint64
}

// pin pins the kept span's bytes [off, off+n) for a copy by qp if the key space has not changed
// since the lookup: the pin (or qp's open scope) comes first, so a change after the comparison
// drains the MR and waits for the copy. Otherwise it forgets the lookup and reports false.
func (k *kept) pin(qp *QP, off, n uint64) (pinned, bool) {
	d := qp.dev
	if qp.scopedPin() {
		if d.tab.gen.Load() == k.gen {
			return pinned{Span: k.span.Slice(off, n)}, true
		}
		k.mr = nil
		return pinned{}, false
	}
	k.mr.pins.RLock()
	if d.tab.gen.Load() == k.gen {
		return pinned{Span: k.span.Slice(off, n), mr: k.mr}, true
	}
	k.mr.pins.RUnlock()
	k.mr = nil
	return pinned{}, false
}

// localAccess checks an lkey access by one of this QP's work requests, and pins what it reaches
// for a copy.
//
// The range the lkey reaches is kept from the last lookup that passed, one for reading and one
// for writing: while no holder of the tables lock came between (its generation), an access
// inside it is what a lookup would give, and the pin taken before the generation is compared
// keeps a change that comes after from draining the MR before the copy is done. So the packets
// of a long SGE, and the messages that follow from the same MR, look their key up once.
func (qp *QP) localAccess(sge SGE, off, n uint64, rights Access) (pinned, error) {
	d := qp.dev
	c := &qp.lkeyKept[0]
	if rights != 0 {
		c = &qp.lkeyKept[1]
	}
	va := sge.Addr + off
	if va >= sge.Addr && c.covers(sge.LKey, rights, va, n) {
		if p, ok := c.pin(qp, va-c.lo, n); ok {
			return p, nil
		}
	}
	d.tab.lookupLock()
	defer d.tab.Unlock()
	sp, err := qp.checkLocal(sge, off, n, rights)
	if err != nil {
		return pinned{}, err
	}
	mr := d.keyMRLocked(keys.Key(sge.LKey))
	c.keep(d, sge.LKey, rights, n, mr)
	return qp.pin(sp, mr), nil
}

// checkLocal checks an lkey access by one of this QP's work requests. The tables lock is held.
func (qp *QP) checkLocal(sge SGE, off, n uint64, rights Access) (keys.Span, error) {
	return qp.dev.keys.Local(keys.LocalAccess{Key: keys.Key(sge.LKey), PD: qp.pd.handle, VA: sge.Addr + off, Len: n, Rights: rights})
}

// localAllowed checks an lkey access without reaching the memory.
func (qp *QP) localAllowed(sge SGE, rights Access) error {
	d := qp.dev
	d.tab.lookupLock()
	defer d.tab.Unlock()
	_, err := qp.checkLocal(sge, 0, uint64(sge.Length), rights)
	return err
}

// gatherSGL copies the scatter/gather list's bytes [off, off+len(dst)) into dst.
func (qp *QP) gatherSGL(sgl []SGE, off uint64, dst []byte) error {
	return qp.walkSGL(sgl, off, uint64(len(dst)), 0, func(sp keys.Span) error {
		n := sp.CopyTo(dst)
		dst = dst[n:]
		return copied(sp, n, keys.OpLocal)
	})
}

// scatterSGL copies src into the scatter/gather list's bytes from off on: a receive, a READ's
// responses, an atomic's result.
func (qp *QP) scatterSGL(sgl []SGE, off uint64, src []byte) error {
	return qp.walkSGL(sgl, off, uint64(len(src)), AccessLocalWrite, func(sp keys.Span) error {
		n := sp.CopyFrom(src)
		src = src[n:]
		return copied(sp, n, keys.OpLocal)
	})
}

// copied says whether a copy moved the span's bytes: memory reached by copying (a host
// program's, keys.Copied) moves none once the program has unmapped it, and the access then
// fails as one to an unmapped on-demand page does: LOC_PROT_ERR for the local side, NAK 0x62
// and REM_ACCESS_ERR for a remote one.
func copied(sp keys.Span, n int, op keys.Op) error {
	if uint64(n) == sp.Len() {
		return nil
	}
	e := &keys.AccessError{Op: op, Check: keys.CheckUnmapped, Status: keys.StatusLocProtErr, Syndrome: keys.SyndromeNone,
		Len: sp.Len(), Detail: "the memory could not be copied: unmapped since it was registered"}
	if op != keys.OpLocal {
		e.Status, e.Syndrome = keys.StatusRemAccessErr, keys.SyndromeRemoteAccess
	}
	return e
}

// walkSGL looks up the SGEs covering [off, off+n) of a scatter/gather list and calls f with
// each piece's span, in order, its MR pinned, until f fails.
func (qp *QP) walkSGL(sgl []SGE, off, n uint64, rights Access, f func(keys.Span) error) error {
	for _, s := range sgl {
		if n == 0 {
			break
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		take := min(l-off, n)
		p, err := qp.localAccess(s, off, take, rights)
		if err != nil {
			return err
		}
		err = f(p.Span)
		p.release()
		if err != nil {
			return err
		}
		off, n = 0, n-take
	}
	if n > 0 {
		return errors.New("scatter/gather list shorter than the message")
	}
	return nil
}

// atomic runs a compare-and-swap (or, fetchAdd, a fetch-and-add) on the 8 bytes at p, native
// (little-endian) as rxe keeps them, atomically with every other atomic of the device's QPs,
// and returns the original value. It releases p. Memory a host program unmapped since it
// registered it (copied) fails it before anything is written: NAK 0x62.
func (d *Device) atomic(p *pinned, fetchAdd bool, compare, swapAdd uint64) (uint64, error) {
	var b [8]byte
	d.atomics.Lock()
	defer d.atomics.Unlock()
	defer p.release()
	if err := copied(p.Span, p.CopyTo(b[:]), keys.OpRemote); err != nil {
		return 0, err
	}
	orig := binary.LittleEndian.Uint64(b[:])
	val := orig
	if fetchAdd {
		val = orig + swapAdd
	} else if orig == compare {
		val = swapAdd
	}
	binary.LittleEndian.PutUint64(b[:], val)
	if err := copied(p.Span, p.CopyFrom(b[:]), keys.OpRemote); err != nil {
		return 0, err
	}
	return orig, nil
}
