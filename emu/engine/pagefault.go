package engine

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/softirdma/softirdma/keys"
)

// On-demand paging as a NIC does it (mlx5's ODP): an MR registered with RegOnDemandMR starts with
// no translation. Work that reaches a page it lacks stops there and the device asks its driver
// for the pages (OnPageFault), which the driver gives with MapPages; until then:
//
//   - a work request being sent holds its send queue, before the packet that needs the pages
//     (its SEND or WRITE payload) or before its first packet (a READ or atomic whose result
//     lands there), until the driver says ResumePageFault: with success it goes on, with an
//     error status the work request completes with that status and the QP goes to ERR;
//   - a request that arrived on RC, its target or its receive buffer missing pages, gets an RNR
//     NAK and nothing else: the requester sends it again after the RNR timer, by when the pages
//     are there (mlx5 does this for SEND and WRITE; softirdma for READ and atomics too, which
//     Linux rxe's and softirdma's requesters take as for any request);
//   - on UC and UD the packet is dropped, with the rest of its UC message, as a lost one is;
//   - a READ response or atomic result that finds its pages gone (unmapped after the request
//     left) is dropped, and the request is sent again when the retransmit timer fires;
//   - READ responses that find the responder's pages gone stop, and the requester asks again.
//
// UnmapPages takes pages back and returns once no copy over them is under way, so that a driver
// may let them go (an MMU notifier's invalidation).

// PageFault is the device asking for pages of an on-demand MR: an access by QP QPN through key
// Key reached [VA, VA+Len) of the MR's wire addresses (page-aligned), where it has no pages.
// Write says the access stores. Held says the QP's send queue waits for ResumePageFault;
// otherwise the work is sent again on its own (an RNR NAK, a retransmission) and wants only the
// pages.
type PageFault struct {
	QPN     uint32
	Key     uint32
	VA, Len uint64
	Write   bool
	Held    bool
}

func (f PageFault) String() string {
	rw, held := "read", ""
	if f.Write {
		rw = "write"
	}
	if f.Held {
		held = ", send queue held"
	}
	return fmt.Sprintf("page fault QP 0x%06x key 0x%08x [0x%x, +0x%x) %s%s", f.QPN, f.Key, f.VA, f.Len, rw, held)
}

// OnPageFault sets the function that receives the device's page faults; nil drops them (and a
// fault then waits for a MapPages that comes on its own). It is called as OnAsyncEvent's
// function is, in one order with the asynchronous events.
func (d *Device) OnPageFault(f func(PageFault)) {
	a := &d.async
	a.mu.Lock()
	defer a.mu.Unlock()
	a.faults = f
}

// RegOnDemandMR registers length bytes of wire addresses from iova as an on-demand MR whose
// pages lie in the address space as, none of them mapped yet (ibv_reg_mr with ON_DEMAND, which
// it adds to access). Length math.MaxUint64 with iova 0 is the implicit MR over a whole address
// space.
func (pd *PD) RegOnDemandMR(as keys.AddressSpace, iova, length uint64, access Access) (*MR, error) {
	return pd.regOverSpace(as, keys.OnDemandPaged(as, length), iova, length, access, guestMapping{as: as, onDemand: true},
		fmt.Sprintf("on demand iova 0x%x len %d", iova, length))
}

// MapPages gives the on-demand MR the pages at addrs of its address space for its wire pages
// from va on (keys.Space.MapPages: all or, with an error, none), and returns how many more it
// has mapped than before.
func (mr *MR) MapPages(va uint64, addrs []uint64) (int, error) {
	d := mr.pd.dev
	defer hold(d, &d.tab).release()
	added, err := d.keys.MapPages(mr.key, va, addrs)
	if err != nil {
		return 0, err
	}
	if d.tracing() {
		d.event(Event{Kind: EvKey, Key: uint32(mr.key), Msg: fmt.Sprintf("map_pages %s [0x%x, +%d pages)", mr.key, va, len(addrs))})
	}
	return added, nil
}

// UnmapPages takes from the on-demand MR the pages holding wire addresses [va, va+n), and
// returns how many it had, once no copy over the MR's memory is under way: from then on the
// device does not touch them.
func (mr *MR) UnmapPages(va, n uint64) (int, error) {
	d := mr.pd.dev
	d.tab.Lock()
	dropped, err := d.keys.UnmapPages(mr.key, va, n)
	d.tab.Unlock()
	if err != nil {
		return 0, err
	}
	mr.drain()
	return dropped, nil
}

// MappedPages is the number of pages the on-demand MR has mapped.
func (mr *MR) MappedPages() int {
	d := mr.pd.dev
	defer hold(d, &d.tab).release()
	return d.keys.MappedPages(mr.key)
}

// ResumePageFault answers the page fault that holds the QP's send queue: with WCSuccess the
// work goes on (the driver mapped the pages, or some: a page still missing faults again); with
// any other status the work request that faulted completes with it and the QP goes to ERR, as
// a NIC does when its driver cannot resolve a fault. EINVAL if no fault holds the queue.
func (qp *QP) ResumePageFault(status WCStatus) error {
	defer hold(qp.dev, &qp.mu).release()
	r := &qp.req
	if !r.faulted {
		return &keys.VerbError{Verb: "resume_page_fault", Errno: syscall.EINVAL, Reason: fmt.Sprintf("no page fault holds QP 0x%06x", qp.qpn)}
	}
	r.faulted = false
	if !qp.requesterActive() {
		return nil // the QP went to ERR meanwhile: its flush completed the work request
	}
	if status == WCSuccess {
		if psnCmp(r.compPSN, r.sentPSN) < 0 {
			qp.armRetransmit()
		}
		qp.kick()
		return nil
	}
	if r.idx < qp.sq.n {
		w := qp.sq.at(r.idx)
		qp.failWQE(w, status, fmt.Errorf("page fault not resolved: %s", status))
	}
	return nil
}

// FaultHeld says whether a page fault holds the QP's send queue.
func (qp *QP) FaultHeld() bool {
	defer hold(qp.dev, &qp.mu).release()
	return qp.req.faulted
}

// pageFault is the page fault an access error is, or nil.
func pageFault(err error) *keys.PageFault {
	pf, _ := errors.AsType[*keys.PageFault](err)
	return pf
}

// raiseFault tells the driver of a page fault on this QP, which is locked.
func (qp *QP) raiseFault(pf *keys.PageFault, held bool) {
	d := qp.dev
	d.stats.PageFaults.Add(1)
	f := PageFault{QPN: qp.qpn, Key: uint32(pf.Key), VA: pf.VA, Len: pf.Len, Write: pf.Write, Held: held}
	if d.tracing() {
		d.event(Event{QP: qp.qpn, Kind: EvAccess, Key: f.Key, Msg: f.String()})
	}
	d.queueEvent(queuedEvent{fault: f, isFault: true})
}

// holdForFault holds the send queue for a page fault of the work request at r.idx, and reports
// whether err was one.
func (qp *QP) holdForFault(err error) bool {
	pf := pageFault(err)
	if pf == nil {
		return false
	}
	r := &qp.req
	r.faulted = true
	// A queue its own page fault holds waits for its driver, not the network: the retransmit
	// timer stops, so no retry is spent, and starts again when the queue goes on (what was sent
	// before the fault is acknowledged once a packet after it asks for an ACK).
	if r.armed {
		r.timer.Stop()
		r.armed = false
	}
	qp.raiseFault(pf, true)
	return true
}

// faultNAK answers a request whose pages are missing: an RNR NAK on RC, a drop on UC (the
// caller drops the message). It reports whether err was a page fault.
func (qp *QP) faultNAK(q *request, err error) bool {
	pf := pageFault(err)
	if pf == nil {
		return false
	}
	qp.raiseFault(pf, false)
	if qp.tr.acked {
		qp.rnrNAK(q, fmt.Sprintf("%s psn %d faulted on pages", q.f.Opcode, q.psn))
	}
	return true
}

// recvFault is the page fault the next receive would meet placing n bytes, or nil: a datagram
// that would fault is dropped before its receive is taken.
func (qp *QP) recvFault(n uint64) *keys.PageFault {
	if !qp.dev.onDemand.Load() {
		return nil // no receive can fault: the datagram path does not look twice
	}
	var sgl []SGE
	if s := qp.srq; s != nil {
		s.mu.Lock()
		if w := s.queue.next(); w != nil {
			sgl = append(sgl, w.sgl...)
		}
		s.mu.Unlock()
	} else if w := qp.rq.next(); w != nil {
		sgl = w.sgl
	}
	err := qp.walkSGL(sgl, 0, n, AccessLocalWrite, func(keys.Span) error { return nil })
	return pageFault(err)
}

// wholeFault widens a page fault of the packet gathering the WQE's bytes from off to the pages
// missing in the rest of the SGE that faulted, so that the driver maps them at one go, as a NIC's
// driver resolves a faulting WQE's data segments, rather than a packet at a time. Any other
// error is given back as it is.
func (qp *QP) wholeFault(w *sendWQE, off uint64, err error) error {
	if pageFault(err) == nil {
		return err
	}
	for _, s := range w.sgl {
		if l := uint64(s.Length); off >= l {
			off -= l
			continue
		}
		d := qp.dev
		d.tab.Lock()
		_, wider := qp.checkLocal(s, off, uint64(s.Length)-off, 0)
		d.tab.Unlock()
		if pageFault(wider) != nil {
			return wider
		}
		break
	}
	return err
}
