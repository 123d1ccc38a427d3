package ucontext

import (
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// srq is a shared receive queue whose ring the program writes. The engine takes one receive at
// a time, when a message needs one; the limit is checked then, as rxe checks it.
type srq struct {
	c      *Context
	emu    *engine.SRQ
	handle uint64
	pd     *pd
	maxSGE int
	uses   int // QPs on it

	mu    sync.Mutex
	r     *ring
	cons  uint32
	limit uint32 // armed for fewer posted receives than this; 0: not armed
	gone  bool
	wqe   []byte
}

func (s *srq) fetch(limit int) []engine.RecvWR {
	s.mu.Lock()
	if s.gone || limit == 0 {
		s.mu.Unlock()
		return nil
	}
	prod := s.r.producer()
	if s.cons == prod {
		s.mu.Unlock()
		return nil
	}
	copy(s.wqe, s.r.slot(s.cons))
	wr := wqe.Recv(abi.RecvWQE(s.wqe), s.maxSGE)
	s.cons = (s.cons + 1) & s.r.mask
	s.r.setConsumer(s.cons)
	fire := s.limit > 0 && (prod-s.cons)&s.r.mask < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		// The engine is locked here: the event goes out from the device's clock, after.
		s.c.dev.Engine.Clock().Post(0, func() { s.c.asyncEvent(s.handle, uint32(engine.AsyncSRQLimitReached)) })
	}
	return []engine.RecvWR{wr}
}

// CREATE_SRQ: user_handle (8), pd_handle (16), max_wr (20), max_sge (24), srq_limit (28).
func (c *Context) createSRQ(r *request) error {
	p, err := find(c.pds, r.u32(16), "PD")
	if err != nil {
		return err
	}
	l := c.dev.Engine.Limits()
	maxWR, maxSGE, limit := r.u32(20), r.u32(24), r.u32(28)
	if maxWR == 0 || int(maxWR) > l.MaxSRQWR || maxSGE == 0 || int(maxSGE) > l.MaxSGE {
		return errf(syscall.EINVAL, "SRQ of %d WRs and %d SGEs", maxWR, maxSGE)
	}
	ring, err := c.area.newRing(slotsFor(maxWR), logElemFor(abi.RecvWQESize+int(maxSGE)*abi.SGESize))
	if err != nil {
		return err
	}
	if limit > ring.mask {
		ring.unmap()
		return errf(syscall.EINVAL, "limit %d for %d receives", limit, ring.mask)
	}
	e, err := p.pd.CreateSRQ(int(ring.mask), int(maxSGE))
	if err != nil {
		ring.unmap()
		return err
	}
	s := &srq{c: c, emu: e, handle: r.u64(8), pd: p, maxSGE: int(maxSGE), r: ring, limit: limit,
		wqe: make([]byte, min(1<<ring.logElem, abi.RecvSGEs+abi.SGESize*int(maxSGE)))}
	e.SetRecvSource(s.fetch)
	c.dev.own(c, ownSRQ, e.Num(), s.handle)
	h := c.handle()
	c.srqs[h] = s
	p.uses++
	putU32(r.resp, h)
	putU32(r.resp[4:], ring.mask)
	putU32(r.resp[8:], maxSGE)
	r.driver = make([]byte, 24)
	copy(r.driver, ring.mmapInfo())
	putU32(r.driver[16:], e.Num())
	return nil
}

// MODIFY_SRQ: srq_handle (0), attr_mask (4), max_wr (8), srq_limit (12); rxe's driver data the
// address of a struct mminfo (offset u64, size u32) that a resize writes the new queue's
// mapping into, as rxe_queue_resize does: the provider then maps the new queue in place of the
// old, whose receives not yet taken move over, first at slot 0.
func (c *Context) modifySRQ(r *request) error {
	s, err := find(c.srqs, r.u32(0), "SRQ")
	if err != nil {
		return err
	}
	mask := r.u32(4)
	if mask == 0 || mask&^3 != 0 {
		return errf(syscall.EINVAL, "SRQ attribute mask 0x%x", mask)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.limit
	if mask&2 != 0 {
		limit = r.u32(12)
	}
	if mask&1 == 0 {
		if limit > s.r.mask {
			return errf(syscall.EINVAL, "limit %d for %d receives", limit, s.r.mask)
		}
		s.limit = limit
		return nil
	}
	maxWR := r.u32(8)
	switch {
	case len(r.DriverIn) < 8:
		return errf(syscall.EINVAL, "resize of an SRQ with no mmap_info address")
	case maxWR == 0 || int(maxWR) > c.dev.Engine.Limits().MaxSRQWR:
		return errf(syscall.EINVAL, "SRQ of %d WRs", maxWR)
	case maxWR < limit:
		return errf(syscall.EINVAL, "SRQ of %d WRs under its limit %d", maxWR, limit)
	}
	old := s.r
	live := (old.producer() - s.cons) & old.mask
	nr, err := c.area.newRing(slotsFor(maxWR), old.logElem)
	if err != nil {
		return err
	}
	if live > nr.mask {
		nr.unmap()
		return errf(syscall.EINVAL, "%d WRs hold %d receives posted", maxWR, live)
	}
	for i := range live {
		copy(nr.slot(i), old.slot(s.cons+i))
	}
	nr.setProducer(live)
	s.r, s.cons, s.limit = nr, 0, limit
	old.unmap()
	r.writes = append(r.writes, Write{Addr: getU64(r.DriverIn), Data: nr.mmapInfo(), File: -1})
	return nil
}

// QUERY_SRQ: srq_handle (8).
func (c *Context) querySRQ(r *request) error {
	s, err := find(c.srqs, r.u32(8), "SRQ")
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	putU32(r.resp, s.r.mask)
	putU32(r.resp[4:], uint32(s.maxSGE))
	putU32(r.resp[8:], s.limit)
	return nil
}

// DESTROY_SRQ: srq_handle (8).
func (c *Context) destroySRQ(r *request) error {
	s, err := find(c.srqs, r.u32(8), "SRQ")
	if err != nil {
		return err
	}
	if s.uses > 0 {
		return errf(syscall.EBUSY, "SRQ %d has %d QPs", r.u32(8), s.uses)
	}
	s.destroy()
	s.pd.uses--
	delete(c.srqs, r.u32(8))
	c.dev.disown(ownSRQ, s.emu.Num())
	putU32(r.resp, c.asyncReported(s.handle))
	return nil
}

func (s *srq) destroy() {
	_ = s.emu.Destroy()
	s.mu.Lock()
	s.gone = true
	s.r.unmap()
	s.mu.Unlock()
}
