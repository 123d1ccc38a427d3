package emu

import (
	"fmt"
	"syscall"
)

// CQ is a completion queue.
type CQ struct {
	dev        *Device
	ring       []WC
	head, n    int
	overflowed bool
	notify     func() // called (with the device lock held) when a completion is queued
}

// CreateCQ creates a completion queue with room for cqe completions.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if cqe < 1 || cqe > d.limits.MaxCQE {
		return nil, fmt.Errorf("create_cq: %d entries: %w", cqe, syscall.EINVAL)
	}
	return &CQ{dev: d, ring: make([]WC, cqe)}, nil
}

// Poll moves up to len(wc) completions into wc, oldest first, and returns how many.
func (cq *CQ) Poll(wc []WC) int {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	n := 0
	for n < len(wc) && cq.n > 0 {
		wc[n] = cq.ring[cq.head]
		cq.ring[cq.head] = WC{}
		cq.head = (cq.head + 1) % len(cq.ring)
		cq.n--
		n++
	}
	return n
}

// Len is the number of completions waiting.
func (cq *CQ) Len() int {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	return cq.n
}

// Overflowed reports whether a completion was lost for want of room (the QPs that tried were
// moved to ERR).
func (cq *CQ) Overflowed() bool {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	return cq.overflowed
}

// OnCompletion sets a function called, with the device locked, whenever a completion is queued;
// it must not call into the device.
func (cq *CQ) OnCompletion(f func()) {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	cq.notify = f
}

// push queues a completion and reports whether there was room.
func (cq *CQ) push(wc WC) bool {
	if cq.n == len(cq.ring) {
		cq.overflowed = true
		return false
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = wc
	cq.n++
	if cq.notify != nil {
		cq.notify()
	}
	return true
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd     *PD
	maxSGE int
	queue  recvQueue
}

// CreateSRQ creates a shared receive queue for up to maxWR receive requests of up to maxSGE
// elements each.
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	d := pd.dev
	if maxWR < 1 || maxWR > d.limits.MaxSRQWR || maxSGE < 1 || maxSGE > d.limits.MaxSGE {
		return nil, fmt.Errorf("create_srq: %w", syscall.EINVAL)
	}
	return &SRQ{pd: pd, maxSGE: maxSGE, queue: newRecvQueue(maxWR)}, nil
}

// PostRecv posts receive requests to the shared queue.
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	d := s.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range wrs {
		if len(wrs[i].SGL) > s.maxSGE {
			return &PostError{Index: i, Err: syscall.EINVAL, Reason: "too many SGEs"}
		}
		if !s.queue.push(&wrs[i]) {
			return &PostError{Index: i, Err: syscall.ENOMEM, Reason: "shared receive queue full"}
		}
	}
	return nil
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// recvWQE is a posted receive request, its SGL copied so the caller may reuse its own.
type recvWQE struct {
	id     uint64
	sgl    []SGE
	length uint64
}

// recvQueue is a ring of receive WQEs whose SGL storage is allocated once.
type recvQueue struct {
	ring    []recvWQE
	head, n int
}

func newRecvQueue(n int) recvQueue { return recvQueue{ring: make([]recvWQE, n)} }

func (q *recvQueue) push(wr *RecvWR) bool {
	if q.n == len(q.ring) {
		return false
	}
	w := &q.ring[(q.head+q.n)%len(q.ring)]
	w.id = wr.ID
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.length = 0
	for _, s := range wr.SGL {
		w.length += uint64(s.Length)
	}
	q.n++
	return true
}

func (q *recvQueue) peek() *recvWQE {
	if q.n == 0 {
		return nil
	}
	return &q.ring[q.head]
}

func (q *recvQueue) pop() {
	if q.n == 0 {
		return
	}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
}

// PostError says which work request of a post failed and why; the ones before it were posted.
type PostError struct {
	Index  int
	Err    syscall.Errno
	Reason string
}

func (e *PostError) Error() string {
	return fmt.Sprintf("post: work request %d: %v: %s", e.Index, e.Err, e.Reason)
}

func (e *PostError) Unwrap() error { return e.Err }
