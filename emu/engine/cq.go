package engine

import (
	"fmt"
	"syscall"
)

// CQ is a completion queue.
type CQ struct {
	dev *Device
	num uint32
	// sink, when set, takes every completion instead of ring: a device model's CQ in guest
	// memory. It runs with the CQ locked (and the QP completing); false means it had no room,
	// an overflow. solicited is the completion's SE.
	sink   func(wc WC, solicited bool) bool
	events chan struct{}

	// mu guards the CQ's completions and what they set off.
	mu         mutex[cqLock]
	ring       []WC
	head, n    int
	overflowed bool
	notify     func() // called (after the engine's locks are released) when a completion is queued
	// Notification (ibv_req_notify_cq and the completion channel): armed says for which
	// completions the next event fires, events carries it.
	armed notifyArm
}

// notifyArm is how a CQ is armed: not at all, for a solicited or unsuccessful completion, or
// for any completion.
type notifyArm uint8

const (
	armNone notifyArm = iota
	armSolicited
	armNext
)

// CreateCQ creates a completion queue with room for cqe completions.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if err := d.check("create_cq"); err != nil {
		return nil, err
	}
	if cqe < 1 || cqe > d.limits.MaxCQE {
		return nil, fmt.Errorf("create_cq: %d entries: %w", cqe, syscall.EINVAL)
	}
	cq := &CQ{dev: d, ring: make([]WC, cqe), events: make(chan struct{}, 1)}
	return d.addCQ(cq)
}

// CreateCQSink creates a completion queue whose completions go to sink as they happen, rather
// than into a ring of the engine for Poll: a device model writes them straight into the CQ it
// keeps in guest memory. sink runs with the CQ locked and must not call into the device;
// it reports false when the CQ has no room, which is an overflow as for a full CQ (the QP goes
// to ERR, CQ_ERR is raised). Arming and OnCompletion work as for any CQ.
func (d *Device) CreateCQSink(sink func(WC) bool) (*CQ, error) {
	if sink == nil {
		return nil, fmt.Errorf("create_cq: no sink: %w", syscall.EINVAL)
	}
	return d.CreateCQSolicitedSink(func(wc WC, _ bool) bool { return sink(wc) })
}

// CreateCQSolicitedSink is CreateCQSink with sink told whether each completion is solicited (the
// receive of a message whose last packet had the SE bit): a device model whose arm is a posted
// write needs it to announce, when armed for solicited completions, one that landed before it
// saw the arm.
func (d *Device) CreateCQSolicitedSink(sink func(wc WC, solicited bool) bool) (*CQ, error) {
	if err := d.check("create_cq"); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("create_cq: no sink: %w", syscall.EINVAL)
	}
	cq := &CQ{dev: d, sink: sink, events: make(chan struct{}, 1)}
	return d.addCQ(cq)
}

// addCQ numbers a new CQ, by which Device.CQ finds it.
func (d *Device) addCQ(cq *CQ) (*CQ, error) {
	if err := addNumbered(d, &d.cqs, cq, &cq.num, -1, "create_cq"); err != nil {
		return nil, err
	}
	return cq, nil
}

// addNumbered gives obj the next free number in table and stores it in *num, where verb
// creates obj; it fails with ENOMEM when all numbers, or limit of them (if not negative), are
// taken.
func addNumbered[T any](d *Device, table *numbers[T], obj T, num *uint32, limit int, verb string) error {
	defer hold(d, &d.tab).release()
	if limit >= 0 && len(table.live) >= limit {
		return fmt.Errorf("%s: %w", verb, syscall.ENOMEM)
	}
	n, ok := table.alloc(obj)
	if !ok {
		return fmt.Errorf("%s: %w", verb, syscall.ENOMEM)
	}
	*num = n
	return nil
}

// Num is the CQ's number on its device, by which Device.CQ finds it: from 1 up, 24 bits, never
// that of another live CQ of the device (see numbers).
func (cq *CQ) Num() uint32 { return cq.num }

// Destroy destroys the CQ (ibv_destroy_cq): Device.CQ no longer finds it and its number may
// be given again. It fails with EBUSY while a QP uses it, and with EINVAL if it is destroyed
// already.
func (cq *CQ) Destroy() error {
	if err := cq.check("destroy_cq"); err != nil {
		return err
	}
	return destroyNumbered(cq.dev, &cq.dev.cqs, cq, cq.num, "destroy_cq", "CQ",
		func(qp *QP) bool { return qp.sendCQ == cq || qp.recvCQ == cq })
}

// destroyNumbered takes obj, number num in table, out of the device's tables, where verb
// (naming it kind) destroys it. It fails with EINVAL if obj is not live there, and with EBUSY
// while a QP uses it.
func destroyNumbered[T comparable](d *Device, table *numbers[T], obj T, num uint32, verb, kind string, uses func(*QP) bool) error {
	defer d.flush()
	// The device lock keeps QPs from being created on obj meanwhile (CreateQP).
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tab.Lock()
	defer d.tab.Unlock()
	if table.live[num] != obj {
		return fmt.Errorf("%s: %s 0x%x is not live: %w", verb, kind, num, syscall.EINVAL)
	}
	for _, qp := range d.qps {
		if uses(qp) {
			return fmt.Errorf("%s: QP 0x%06x uses %s 0x%x: %w", verb, qp.qpn, kind, num, syscall.EBUSY)
		}
	}
	table.free(num)
	return nil
}

// Poll moves up to len(wc) completions into wc, oldest first, and returns how many.
func (cq *CQ) Poll(wc []WC) int {
	defer hold(cq.dev, &cq.mu).release()
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
	defer hold(cq.dev, &cq.mu).release()
	return cq.n
}

// Overflowed reports whether a completion was lost for want of room (the QPs that tried were
// moved to ERR).
func (cq *CQ) Overflowed() bool {
	defer hold(cq.dev, &cq.mu).release()
	return cq.overflowed
}

// OnCompletion sets a function called once for every completion queued. It runs after the
// engine's locks are released, in the order the completions were queued, and may call into the
// device (poll the CQ, post more work). An event the completion fired is on Events by the time
// it runs, whichever goroutine runs it.
func (cq *CQ) OnCompletion(f func()) {
	defer hold(cq.dev, &cq.mu).release()
	cq.notify = f
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion queued after this call sends
// one event on Events, and the CQ is then disarmed until armed again. With solicitedOnly, only a
// solicited completion fires: a receive completion of a message whose last packet carried the
// Solicited Event bit (a SEND or SEND_WITH_IMM posted with SendSolicited, or an RDMA
// WRITE_WITH_IMM with it), or any completion in error, which IBTA counts as solicited too.
// Completions already in the CQ when it is armed fire nothing, as in libibverbs: arm, then poll
// once more before waiting, so that none is missed. Arming for any completion while armed for
// solicited ones widens the arm; arming for solicited ones while armed for any leaves it as it is.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if err := cq.check("req_notify_cq"); err != nil {
		return err
	}
	defer hold(cq.dev, &cq.mu).release()
	want := armNext
	if solicitedOnly {
		want = armSolicited
	}
	cq.armed = max(cq.armed, want)
	return nil
}

// Events is the CQ's completion channel (ibv_get_cq_event): it receives a value when an armed CQ
// gets a completion that fires its arm. It holds at most one: an event not yet taken absorbs the
// next, so a reader that takes an event, re-arms and polls the CQ empty misses nothing. Nothing
// is ever called back with a lock of the engine held for it; the send into the channel does not
// block.
func (cq *CQ) Events() <-chan struct{} { return cq.events }

// push queues a completion and reports whether there was room. solicited says it is the receive
// of a message whose last packet had the BTH SE bit.
func (cq *CQ) push(wc WC, solicited bool) bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.sink != nil && !cq.sink(wc, solicited) || cq.sink == nil && cq.n == len(cq.ring) {
		if !cq.overflowed {
			cq.dev.raise(AsyncCQErr, cq.num)
		}
		cq.overflowed = true
		return false
	}
	if cq.sink == nil {
		cq.ring[(cq.head+cq.n)%len(cq.ring)] = wc
		cq.n++
	}
	if cq.armed == armNext || cq.armed == armSolicited && (solicited || wc.Status != WCSuccess) {
		cq.armed = armNone
		select {
		case cq.events <- struct{}{}:
		default:
		}
	}
	// The call is queued after the event is sent: another goroutine carrying the outbox out
	// may run it at once, and it must find the event this completion fired.
	if cq.notify != nil {
		cq.dev.later(cq.notify)
	}
	return true
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd     *PD
	num    uint32
	maxSGE int
	// mu guards the queue, which the SRQ's QPs take receives from, and its limit.
	mu    mutex[srqLock]
	queue recvQueue
	limit int // SRQ_LIMIT_REACHED is armed for fewer receives than this; 0: not armed
}

// CreateSRQ creates a shared receive queue for up to maxWR receive requests of up to maxSGE
// elements each.
func (pd *PD) CreateSRQ(maxWR, maxSGE int) (*SRQ, error) {
	if err := pd.check("create_srq"); err != nil {
		return nil, err
	}
	d := pd.dev
	if maxWR < 1 || maxWR > d.limits.MaxSRQWR || maxSGE < 1 || maxSGE > d.limits.MaxSGE {
		return nil, fmt.Errorf("create_srq: %w", syscall.EINVAL)
	}
	srq := &SRQ{pd: pd, maxSGE: maxSGE, queue: newRecvQueue(maxWR)}
	if err := addNumbered(d, &d.srqs, srq, &srq.num, d.limits.MaxSRQ, "create_srq"); err != nil {
		return nil, err
	}
	return srq, nil
}

// Num is the SRQ's number on its device, by which Device.SRQ finds it, numbered as CQs are.
func (s *SRQ) Num() uint32 { return s.num }

// Destroy destroys the SRQ (ibv_destroy_srq): Device.SRQ no longer finds it and its number may
// be given again. It fails with EBUSY while a QP uses it, and with EINVAL if it is destroyed
// already.
func (s *SRQ) Destroy() error {
	if err := s.check("destroy_srq"); err != nil {
		return err
	}
	d := s.pd.dev
	return destroyNumbered(d, &d.srqs, s, s.num, "destroy_srq", "SRQ", func(qp *QP) bool { return qp.srq == s })
}

// PostRecv posts receive requests to the shared queue.
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	if err := s.check("post_srq_recv"); err != nil {
		return err
	}
	defer hold(s.pd.dev, &s.mu).release()
	for i := range wrs {
		if len(wrs[i].SGL) > s.maxSGE {
			return postError("post_srq_recv", i, len(wrs), wrs[i].ID, syscall.EINVAL,
				fmt.Sprintf("%d SGEs, the SRQ takes %d", len(wrs[i].SGL), s.maxSGE))
		}
		if !s.queue.push(&wrs[i]) {
			return postError("post_srq_recv", i, len(wrs), wrs[i].ID, syscall.ENOMEM, "shared receive queue full")
		}
	}
	return nil
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
	// Err, set by a device model's receive source, is a receive WQE it could not decode (more
	// SGEs than the queue takes, say): the message that takes it fails, whatever its length,
	// with LOC_QP_OP_ERR for the receiver and NAK 0x63 (REM_OP_ERR) for the requester.
	Err error
}

// recvWQE is a posted receive request, its SGL copied so the caller may reuse its own.
type recvWQE struct {
	id     uint64
	sgl    []SGE
	length uint64
	err    error
}

// recvQueue is a ring of receive WQEs whose SGL storage is allocated once.
type recvQueue struct {
	ring    []recvWQE
	head, n int
	// source, when set, is asked for receives when a message needs one and none is queued:
	// a device model's receive queue in guest memory (see QP.SetRecvSource).
	source func(max int) []RecvWR
}

func newRecvQueue(n int) recvQueue { return recvQueue{ring: make([]recvWQE, n)} }

func (q *recvQueue) push(wr *RecvWR) bool {
	if q.n == len(q.ring) {
		return false
	}
	w := &q.ring[(q.head+q.n)%len(q.ring)]
	w.id, w.err = wr.ID, wr.Err
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

// next finds the receive the next message takes: the first queued, or, with none queued, one the
// queue's source hands over.
func (q *recvQueue) next() *recvWQE {
	if w := q.peek(); w != nil || q.source == nil {
		return w
	}
	for _, wr := range q.source(len(q.ring) - q.n) {
		if !q.push(&wr) {
			break
		}
	}
	return q.peek()
}

// size is the receive's length, and false for none.
func (w *recvWQE) size() (uint64, bool) {
	if w == nil {
		return 0, false
	}
	return w.length, true
}

func (q *recvQueue) pop() {
	if q.n == 0 {
		return
	}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
}

// PostError says which work request of a post failed and why; the ones before it were posted.
// It names the request by its ID, as its poster knows it, and by its place in the batch.
type PostError struct {
	Index  int // the request's place in the batch, from 0
	Err    syscall.Errno
	Reason string
	ID     uint64 // the request's ID (SendWR.ID, RecvWR.ID)

	verb  string // post_send, post_recv, post_srq_recv
	batch int    // how many requests the call posted
}

func (e *PostError) Error() string {
	verb := e.verb
	if verb == "" {
		verb = "post"
	}
	where := fmt.Sprintf("work request id 0x%x", e.ID)
	if e.batch > 1 {
		where += fmt.Sprintf(" (index %d of %d)", e.Index, e.batch)
	}
	return fmt.Sprintf("%s: %s: %v: %s", verb, where, e.Err, e.Reason)
}

// postError names the i-th of a post's n requests, whose ID is id, as the one that failed.
func postError(verb string, i, n int, id uint64, errno syscall.Errno, reason string) *PostError {
	return &PostError{Index: i, Err: errno, Reason: reason, ID: id, verb: verb, batch: n}
}

func (e *PostError) Unwrap() error { return e.Err }
