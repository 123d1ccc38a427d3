package hw

import (
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// srq is a shared receive queue whose ring is in guest memory. The engine fetches one receive
// at a time, when a message needs one, so each fetch is a receive taken: the SRQ limit is
// checked then, against what the driver has posted and the device not yet taken, as rxe checks
// it when it takes a receive.
type srq struct {
	f      *Function
	emu    *engine.SRQ
	pdn    uint32
	maxSGE int

	mu    sync.Mutex
	r     *ring
	cons  uint32
	limit uint32 // armed for fewer posted receives than this; 0: not armed
	gone  bool
	wqe   []byte // what a receive WQE can hold (recvWQEBytes), read under mu
}

func (s *srq) fetch(limit int) []engine.RecvWR {
	s.mu.Lock()
	if s.gone || limit == 0 {
		s.mu.Unlock()
		return nil
	}
	prod, err := s.r.readU32(abi.QHProducer)
	if err != nil {
		s.mu.Unlock()
		return nil
	}
	prod &= s.r.mask()
	if s.cons == prod {
		s.mu.Unlock()
		return nil
	}
	if s.r.access(s.r.elemOff(s.cons), s.wqe, false) != nil {
		s.mu.Unlock()
		return nil
	}
	wr := wqe.Recv(s.wqe, s.maxSGE)
	s.cons = (s.cons + 1) & s.r.mask()
	_ = s.r.writeU32(abi.QHConsumer, s.cons)
	fire := s.limit > 0 && (prod-s.cons)&s.r.mask() < s.limit
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire {
		// The engine is locked here: the event is posted from the clock, outside it.
		s.f.cfg.Clock.Post(0, func() { s.f.asyncEvent(engine.AsyncEvent{Type: engine.AsyncSRQLimitReached, Num: s.emu.Num()}) })
	}
	return []engine.RecvWR{wr}
}

func (f *Function) createSRQLocked(args abi.CreateSRQArgs, result func(int, uint32)) error {
	pdn, maxSGE, limit := args.PD(), args.MaxSGE(), args.Limit()
	p, err := f.pdLocked(pdn)
	if err != nil {
		return err
	}
	if maxSGE < 1 || maxSGE > uint32(engine.DefaultLimits.MaxSGE) {
		return errf(syscall.EINVAL, "%d SGEs, 1 to %d", maxSGE, engine.DefaultLimits.MaxSGE)
	}
	r, err := newRing(&f.mem, args.Queue(),
		abi.RecvWQESize+abi.SGESize*int(maxSGE), ringLog(engine.DefaultLimits.MaxSRQWR))
	if err != nil {
		return err
	}
	if limit >= r.count() {
		return errf(syscall.EINVAL, "limit %d for %d receives", limit, r.count()-1)
	}
	if err := f.reserveWRsLocked(r.count() - 1); err != nil {
		return err
	}
	e, err := p.pd.CreateSRQ(int(r.count()-1), int(maxSGE))
	if err != nil {
		f.wrSlots -= uint64(r.count() - 1)
		return err
	}
	s := &srq{f: f, emu: e, pdn: pdn, maxSGE: int(maxSGE), r: r, limit: limit, wqe: make([]byte, recvWQEBytes(r, int(maxSGE)))}
	e.SetRecvSource(s.fetch)
	f.srqs[e.Num()] = s
	p.uses++
	result(abi.ResultNum, e.Num())
	return nil
}

// modifySRQLocked changes an SRQ's limit (mask 2) and moves it to a new ring (mask 1, max_wr,
// as ibv_modify_srq's IBV_SRQ_MAX_WR): the receives posted and not yet taken are copied to the
// start of the new ring, in order, and its producer and consumer indices set for them, as rxe
// resizes a queue. A ring too small for them is EINVAL, and a refused modify changes nothing.
func (f *Function) modifySRQLocked(n, mask, limit uint32, queue abi.QueueArgs) error {
	s, err := find(f.srqs, n, "SRQ")
	if err != nil {
		return err
	}
	if mask == 0 || mask&^(abi.SRQModifyMaxWR|abi.SRQModifyLimit) != 0 {
		return errf(syscall.EINVAL, "SRQ modify mask 0x%x", mask)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return errf(syscall.EFAULT, "SRQ %d lost its ring", n)
	}
	r := s.r
	var posted uint32
	if mask&abi.SRQModifyMaxWR != 0 {
		nr, err := newRing(&f.mem, queue, abi.RecvWQESize+abi.SGESize*s.maxSGE, ringLog(engine.DefaultLimits.MaxSRQWR))
		if err != nil {
			return err
		}
		prod, err := s.r.readU32(abi.QHProducer)
		if err != nil {
			return err
		}
		posted = (prod&s.r.mask() - s.cons) & s.r.mask()
		if posted >= nr.count() {
			return errf(syscall.EINVAL, "a ring of %d receives for %d posted", nr.count()-1, posted)
		}
		r = nr
	}
	if mask&abi.SRQModifyLimit != 0 && limit >= r.count() {
		return errf(syscall.EINVAL, "limit %d for %d receives", limit, r.count()-1)
	}
	if r != s.r {
		// The new ring's slots replace the old's: only a growth counts against the cap.
		f.wrSlots -= uint64(s.r.count() - 1)
		if err := f.reserveWRsLocked(r.count() - 1); err != nil {
			f.wrSlots += uint64(s.r.count() - 1)
			return err
		}
		if err := s.moveTo(r, posted); err != nil {
			f.wrSlots = f.wrSlots - uint64(r.count()-1) + uint64(s.r.count()-1)
			return err
		}
	}
	if mask&abi.SRQModifyLimit != 0 {
		s.limit = limit
	}
	return nil
}

// moveTo copies the posted receives not yet taken to the start of the ring nr, sets its
// indices for them and makes it the SRQ's ring. s.mu is held.
func (s *srq) moveTo(nr *ring, posted uint32) error {
	elem := make([]byte, 1<<max(s.r.logElem, nr.logElem))
	for i := range posted {
		clear(elem)
		if err := s.r.access(s.r.elemOff((s.cons+i)&s.r.mask()), elem[:1<<s.r.logElem], false); err != nil {
			return err
		}
		if err := nr.access(nr.elemOff(i), elem[:1<<nr.logElem], true); err != nil {
			return err
		}
	}
	if err := nr.writeU32(abi.QHConsumer, 0); err != nil {
		return err
	}
	if err := nr.writeU32(abi.QHProducer, posted); err != nil {
		return err
	}
	s.r, s.cons, s.wqe = nr, 0, make([]byte, recvWQEBytes(nr, s.maxSGE))
	return nil
}

func (f *Function) querySRQLocked(n uint32, result func(int, uint32)) error {
	s, err := find(f.srqs, n, "SRQ")
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	result(abi.ResultSRQMaxWR, s.r.count()-1)
	result(abi.ResultSRQMaxSGE, uint32(s.maxSGE))
	result(abi.ResultSRQLimit, s.limit)
	return nil
}

func (f *Function) destroySRQLocked(n uint32) error {
	return destroyFound(f.srqs, n, "SRQ", func(s *srq) error { return s.emu.Destroy() }, func(s *srq) {
		s.mu.Lock()
		s.gone = true
		f.wrSlots -= uint64(s.r.count() - 1)
		s.mu.Unlock()
		f.pds[s.pdn].uses--
	})
}
