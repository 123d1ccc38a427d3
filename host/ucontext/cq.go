package ucontext

import (
	"sync"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// cq is a CQ whose ring the program polls: the engine's completions are written into it as they
// happen, in the ib_uverbs_wc layout.
type cq struct {
	emu    *engine.CQ
	handle uint64 // the program's user_handle: what its completion events name
	ch     *channel

	mu   sync.Mutex
	r    *ring
	prod uint32
	gone bool

	uses int    // QPs on it
	sent uint64 // completion events sent, which DESTROY_CQ reports
}

// sink writes one completion; false when the ring is full (an overrun for the engine).
func (q *cq) sink(wc engine.WC) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone || (q.prod+1)&q.r.mask == q.r.consumer() {
		return false
	}
	c := abi.CQE(q.r.slot(q.prod)[:abi.CQESize])
	clear(c)
	wqe.EncodeCQE(c, &wc, false) // the last byte is reserved in the user ABI
	q.prod = (q.prod + 1) & q.r.mask
	q.r.setProducer(q.prod)
	return true
}

// completed runs after the engine queued completions: an armed CQ that fired sends its event.
func (q *cq) completed() {
	select {
	case <-q.emu.Events():
	default:
		return
	}
	if q.ch != nil {
		var ev [compEventSize]byte
		putU64(ev[:], q.handle)
		if q.ch.send(ev[:]) {
			q.mu.Lock()
			q.sent++
			q.mu.Unlock()
		}
	}
}

// CREATE_CQ: user_handle (8), cqe (16), comp_vector (20), comp_channel (24), after the
// response pointer.
func (c *Context) createCQ(r *request) error {
	return c.newCQ(r, r.u64(8), r.u32(16), r.u32(20), int32(r.u32(24)))
}

// EX_CREATE_CQ: user_handle (0), cqe (8), comp_vector (12), comp_channel (16), comp_mask (20),
// flags (24), reserved (28); the driver's answer follows the 16-byte core response.
func (c *Context) createCQEx(r *request) error {
	if r.u32(20) != 0 || r.u32(28) != 0 {
		return errf(syscall.EINVAL, "EX_CREATE_CQ comp_mask 0x%x reserved 0x%x", r.u32(20), r.u32(28))
	}
	if r.u32(24) != 0 {
		return errf(syscall.EOPNOTSUPP, "CQ flags 0x%x", r.u32(24))
	}
	putU32(r.resp[12:], uint32(min(r.CoreOut, len(r.resp))))
	return c.newCQ(r, r.u64(0), r.u32(8), r.u32(12), int32(r.u32(16)))
}

func (c *Context) newCQ(r *request, handle uint64, cqe, vector uint32, chfd int32) error {
	if cqe == 0 || int(cqe) > c.dev.Engine.Limits().MaxCQE {
		return errf(syscall.EINVAL, "CQ of %d entries", cqe)
	}
	if vector != 0 {
		return errf(syscall.EINVAL, "completion vector %d of 1", vector)
	}
	var ch *channel
	if chfd >= 0 {
		if ch = c.channelOf(r.in); ch == nil {
			return errf(syscall.EINVAL, "fd %d is no completion channel of the context", chfd)
		}
	}
	ring, err := c.area.newRing(slotsFor(cqe), logElemFor(abi.CQESize))
	if err != nil {
		return err
	}
	q := &cq{handle: handle, ch: ch, r: ring}
	ecq, err := c.dev.Engine.CreateCQSink(q.sink)
	if err != nil {
		ring.unmap()
		return err
	}
	q.emu = ecq
	ecq.OnCompletion(q.completed)
	c.dev.own(c, ownCQ, ecq.Num(), handle)
	h := c.handle()
	c.cqs[h] = q
	putU32(r.resp, h)
	putU32(r.resp[4:], ring.mask)
	r.driver = ring.mmapInfo()
	return nil
}

// RESIZE_CQ: cq_handle (8), cqe (12). The live completions move to the new ring.
func (c *Context) resizeCQ(r *request) error {
	q, err := find(c.cqs, r.u32(8), "CQ")
	if err != nil {
		return err
	}
	cqe := r.u32(12)
	if cqe == 0 || int(cqe) > c.dev.Engine.Limits().MaxCQE {
		return errf(syscall.EINVAL, "CQ of %d entries", cqe)
	}
	// The count below is of the completions a NIC would have written by now: the sends posted
	// to UD and UC QPs, which complete without their peer, complete first (taking q.mu, so not
	// under it).
	for _, p := range c.qps {
		if p.scq == q {
			p.emu.SendPostedDatagrams()
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	old := q.r
	live := (q.prod - old.consumer()) & old.mask
	if cqe < live {
		return errf(syscall.EINVAL, "%d entries hold %d live completions", cqe, live)
	}
	nr, err := c.area.newRing(slotsFor(cqe), logElemFor(abi.CQESize))
	if err != nil {
		return err
	}
	cons := old.consumer()
	for i := range live {
		copy(nr.slot(i), old.slot(cons + i)[:abi.CQESize])
	}
	nr.setProducer(live)
	q.r, q.prod = nr, live
	old.unmap()
	putU32(r.resp, nr.mask)
	r.driver = nr.mmapInfo()
	return nil
}

// DESTROY_CQ: cq_handle (8). The answer counts the completion and async events the program
// read, which libibverbs waits for it to acknowledge; those it did not read are withdrawn.
func (c *Context) destroyCQ(r *request) error {
	q, err := find(c.cqs, r.u32(8), "CQ")
	if err != nil {
		return err
	}
	if q.uses > 0 {
		return errf(syscall.EBUSY, "CQ %d has %d QPs", r.u32(8), q.uses)
	}
	if err := q.destroy(); err != nil {
		return err
	}
	delete(c.cqs, r.u32(8))
	c.dev.disown(ownCQ, q.emu.Num())
	comp := q.events()
	if q.ch != nil {
		comp -= uint64(q.ch.withdraw(func(ev []byte) bool { return getU64(ev) == q.handle }))
	}
	putU32(r.resp, uint32(comp))
	putU32(r.resp[4:], c.asyncReported(q.handle))
	return nil
}

func (q *cq) destroy() error {
	if err := q.emu.Destroy(); err != nil {
		return err
	}
	q.mu.Lock()
	q.gone = true
	q.r.unmap()
	q.mu.Unlock()
	return nil
}

// events is how many completion events the CQ sent.
func (q *cq) events() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent
}

// REQ_NOTIFY_CQ: cq_handle (0), solicited_only (4). Completions already in the ring fire
// nothing: the arm is answered before the program polls once more (as libibverbs asks), and
// each completion is in the ring before it could fire, so that poll finds any the arm missed.
func (c *Context) reqNotifyCQ(r *request) error {
	q, err := find(c.cqs, r.u32(0), "CQ")
	if err != nil {
		return err
	}
	return q.emu.ReqNotify(r.u32(4) != 0)
}
