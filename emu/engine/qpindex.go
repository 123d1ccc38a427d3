package engine

import "sync/atomic"

// qpIndex finds a QP by number without a lock, for the receive path: every frame names its
// destination QP, and taking the device lock per frame only to read a table that changes when
// a QP is created or destroyed cost more than the lookup itself. Device.qps stays the table of
// record; the index follows it, written under Device.mu. A page of numbers is allocated while a
// QP in it lives and let go when its last one goes, so numbers wrapping round the 24-bit space
// do not leave the whole index allocated.
type qpIndex struct {
	pages [qpPages]atomic.Pointer[qpPage]
	used  [qpPages]uint16 // QPs in each page; under Device.mu
}

const (
	qpPageBits = 12
	qpPages    = (psnMask + 1) >> qpPageBits
)

type qpPage [1 << qpPageBits]atomic.Pointer[QP]

// load is the QP numbered qpn, or nil.
func (x *qpIndex) load(qpn uint32) *QP {
	if qpn > psnMask {
		return nil
	}
	p := x.pages[qpn>>qpPageBits].Load()
	if p == nil {
		return nil
	}
	return p[qpn&(1<<qpPageBits-1)].Load()
}

// add indexes qp under its number, which no live QP has. Device.mu is held.
func (x *qpIndex) add(qp *QP) {
	i := qp.qpn >> qpPageBits
	p := x.pages[i].Load()
	if p == nil {
		p = new(qpPage)
		x.pages[i].Store(p)
	}
	p[qp.qpn&(1<<qpPageBits-1)].Store(qp)
	x.used[i]++
}

// remove takes qp out of the index. Device.mu is held.
func (x *qpIndex) remove(qp *QP) {
	i := qp.qpn >> qpPageBits
	p := x.pages[i].Load()
	if p == nil || p[qp.qpn&(1<<qpPageBits-1)].Load() != qp {
		return
	}
	p[qp.qpn&(1<<qpPageBits-1)].Store(nil)
	if x.used[i]--; x.used[i] == 0 {
		x.pages[i].Store(nil)
	}
}
