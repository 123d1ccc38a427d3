package engine

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/wire/roce"
)

// QPCap is the size of a QP's queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData int
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type           QPType // QPTypeRC, QPTypeUC, QPTypeUD, or QPTypeGSI for the device's QP1
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ
	Cap            QPCap
	// SigAll makes every send work request signalled (sq_sig_all).
	SigAll bool
}

// AHAttr is the path to the peer (struct ibv_ah_attr with its GRH): for RoCEv2 the peer's GID,
// which is its IP address, and the IP header fields to send with.
type AHAttr struct {
	DGID         netip.Addr
	TrafficClass uint8
	HopLimit     uint8
	FlowLabel    uint32
}

// QPAttr holds QP attributes (struct ibv_qp_attr); a Modify mask says which ones apply.
type QPAttr struct {
	State, CurState QPState
	AccessFlags     Access // remote rights the QP grants: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, FLUSH_GLOBAL, FLUSH_PERSISTENT
	PKeyIndex       uint16
	Port            uint8
	AH              AHAttr
	PathMTU         MTU
	Timeout         uint8 // local ACK timeout: 4.096 us x 2^Timeout; 0 disables it
	RetryCnt        uint8 // 0..7 retries after a timeout or sequence NAK
	RNRRetry        uint8 // 0..7 retries after an RNR NAK; 7 retries forever
	RQPSN, SQPSN    uint32
	MaxRdAtomic     uint8 // READs and atomics this QP may have outstanding as requester
	MaxDestRdAtomic uint8 // READs and atomics it accepts outstanding as responder
	MinRNRTimer     uint8 // the RNR timer code it sends in RNR NAKs
	DestQPN         uint32
	// QKey is a datagram QP's Q_Key: what arriving datagrams must carry, and what it sends
	// when a work request's Q_Key has its high bit set (the controlled Q_Key).
	QKey uint32
	Cap  QPCap
	// EnSQDAsyncNotify asks a move to SQD for an SQ_DRAINED event (AttrEnSQDAsyncNotify).
	EnSQDAsyncNotify bool
}

// QP is a queue pair.
type QP struct {
	dev      *Device
	lkeyKept [2]keyReach // the last lkey looked up to read and to write (localAccess); guarded by mu
	rkeyKept keyReach    // the last rkey a request passed (remoteAccess, remoteAllowed); guarded by mu
	pins     pinScope    // the copies of a requester's run or a received batch (access.go)
	pd       *PD
	qpn      uint32
	typ      QPType
	tr       *transport
	sendCQ   *CQ
	recvCQ   *CQ
	srq      *SRQ
	cap      QPCap
	sigAll   bool

	// mu guards the rest: the QP's state and attributes, its queues, its requester,
	// responder and completer, and its timers' and scheduled runs' flags.
	mu mutex[qpLock]
	// onRetire hears of each send WQE retired, before its completion.
	onRetire func(n int)
	// staged holds the frames of a requester run while staging (runRequester), to go into
	// the outbox together. Guarded by mu.
	staged    []outFrame
	staging   bool
	state     QPState
	attr      QPAttr
	destroyed bool // by Destroy: the QP takes no packet and is off the device's table

	overflowed bool // a completion was lost; the QP is on its way to ERR
	// flushed is why the QP is in ERR, the reason its flushed completions carry: one error
	// made at the move, shared by all of them.
	flushed error
	local   bool // the peer is the device itself: every frame goes to the loopback
	async   qpAsync

	builder roce.Builder
	ud      struct {
		ah      *AH          // the handle builder was made for
		builder roce.Builder // a datagram QP's frame builder for its latest handle
	}
	rq   recvQueue
	sq   sendQueue
	req  requester
	resp responder
	comp response // the packet the completer is working on
}

// CreateQP creates a queue pair in RESET.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	if err := pd.check("create_qp"); err != nil {
		return nil, err
	}
	d := pd.dev
	c := init.Cap
	tr := transportOf(init.Type)
	switch {
	case tr == nil:
		return nil, fmt.Errorf("create_qp: type %s: %w", init.Type, syscall.EOPNOTSUPP)
	case init.SendCQ == nil || init.RecvCQ == nil:
		return nil, fmt.Errorf("create_qp: a send and a receive CQ are needed: %w", syscall.EINVAL)
	}
	if err := checkCap(c, d.limits, init.SRQ != nil); err != nil {
		return nil, err
	}
	defer hold(d, &d.mu).release()
	if len(d.qps) >= d.limits.MaxQP {
		return nil, fmt.Errorf("create_qp: %w", syscall.ENOMEM)
	}
	if !d.liveQueues(init) {
		return nil, fmt.Errorf("create_qp: a CQ or the SRQ is destroyed or another device's: %w", syscall.EINVAL)
	}
	qpn := uint32(gsiQPN)
	if init.Type == QPTypeGSI {
		if d.qps[gsiQPN] != nil {
			return nil, fmt.Errorf("create_qp: the port's GSI QP exists: %w", syscall.EBUSY)
		}
	} else {
		qpn = d.allocQPN()
	}
	qp := &QP{dev: d, pd: pd, qpn: qpn, typ: init.Type, tr: tr, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, cap: c, sigAll: init.SigAll, state: QPSReset}
	if init.SRQ == nil {
		qp.rq = newRecvQueue(c.MaxRecvWR)
	}
	qp.sq = newSendQueue(c.MaxSendWR)
	d.qps[qp.qpn] = qp
	d.rxQPs.add(qp)
	d.event(Event{QP: qp.qpn, Kind: EvQPState, Msg: "created in RESET"})
	return qp, nil
}

// liveQueues says whether the CQs and the SRQ a QP is to be created on are live and the
// device's. The device lock is held, which keeps them so until the QP is in the device's table.
func (d *Device) liveQueues(init QPInitAttr) bool {
	d.tab.Lock()
	defer d.tab.Unlock()
	return d.cqs.live[init.SendCQ.num] == init.SendCQ && d.cqs.live[init.RecvCQ.num] == init.RecvCQ &&
		(init.SRQ == nil || d.srqs.live[init.SRQ.num] == init.SRQ)
}

// checkCap checks a QP's capabilities as the kernel's rxe does (rxe_qp_chk_cap): each at most
// the device's limit, the receive ones only for a QP without an SRQ (with one they are not
// used), and none negative. Zero is taken for every field, as rxe takes it ("num_elem == 0 is
// allowed, but uninteresting", rxe_queue_init): a QP with max_send_wr 0 only receives and one
// with max_recv_wr 0 only sends, each refusing posts to its empty queue with ENOMEM; zero SGEs
// leave work requests that carry no data (a zero-length SEND or WRITE, a bind).
func checkCap(c QPCap, l Limits, srq bool) error {
	type field struct {
		name       string
		v, max     int
		limitsName string
	}
	fields := []field{{"max_send_wr", c.MaxSendWR, l.MaxQPWR, "max_qp_wr"}, {"max_send_sge", c.MaxSendSGE, l.MaxSGE, "max_sge"}}
	if !srq {
		fields = append(fields, field{"max_recv_wr", c.MaxRecvWR, l.MaxQPWR, "max_qp_wr"}, field{"max_recv_sge", c.MaxRecvSGE, l.MaxSGE, "max_sge"})
	}
	fields = append(fields, field{"max_inline_data", c.MaxInlineData, l.MaxInline, "max_inline_data"})
	for _, f := range fields {
		switch {
		case f.v < 0:
			return fmt.Errorf("create_qp: %s %d is negative: %w", f.name, f.v, syscall.EINVAL)
		case f.v > f.max:
			return fmt.Errorf("create_qp: %s %d is more than the device's %s, %d: %w", f.name, f.v, f.limitsName, f.max, syscall.EINVAL)
		}
	}
	return nil
}

// Num is the QP number.
func (qp *QP) Num() uint32 { return qp.qpn }

// PD is the protection domain the QP was created in: its address handles come from it.
func (qp *QP) PD() *PD { return qp.pd }

// Type is the QP's transport type.
func (qp *QP) Type() QPType { return qp.typ }

// State is the QP's current state.
func (qp *QP) State() QPState {
	defer hold(qp.dev, &qp.mu).release()
	return qp.state
}

// Query returns the QP's attributes.
func (qp *QP) Query() QPAttr {
	defer hold(qp.dev, &qp.mu).release()
	a := qp.attr
	a.State, a.CurState, a.Cap = qp.state, qp.state, qp.cap
	return a
}

// Modify changes the QP's state and attributes (ibv_modify_qp). The mask must hold exactly the
// attributes the transition requires plus any it allows; anything else is EINVAL and changes
// nothing.
func (qp *QP) Modify(attr QPAttr, mask AttrMask) error {
	if err := qp.check("modify_qp", "QP"); err != nil {
		return err
	}
	d := qp.dev
	// The peer's link address is looked up before the QP is locked: on a real link that may
	// mean waiting for an ARP reply, which must not hold up the QP.
	var peerMAC [6]byte
	var resolved bool
	if mask&AttrAV != 0 && attr.AH.DGID.IsValid() && d.cfg.Resolve != nil {
		peerMAC, resolved = d.cfg.Resolve(attr.AH.DGID.Unmap())
	}
	defer hold(d, &qp.mu).release()
	if qp.destroyed {
		return fmt.Errorf("modify_qp: QP %d is destroyed: %w", qp.qpn, syscall.EINVAL)
	}
	cur := qp.state
	if mask&AttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("modify_qp: cur_state %s but the QP is %s: %w", attr.CurState, cur, syscall.EINVAL)
	}
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	if next > QPSErr {
		return fmt.Errorf("modify_qp: state %d: %w", next, syscall.EINVAL)
	}
	other := mask &^ (AttrState | AttrCurState)
	if next != QPSReset && next != QPSErr {
		t, ok := qp.tr.transitions[[2]QPState{cur, next}]
		if !ok {
			return fmt.Errorf("modify_qp: %s to %s is not a transition: %w", cur, next, syscall.EINVAL)
		}
		if missing := t[0] &^ other; missing != 0 {
			return fmt.Errorf("modify_qp: %s to %s needs attributes 0x%x: %w", cur, next, uint32(missing), syscall.EINVAL)
		}
		if extra := other &^ (t[0] | t[1]); extra != 0 {
			return fmt.Errorf("modify_qp: %s to %s does not take attributes 0x%x: %w", cur, next, uint32(extra), syscall.EINVAL)
		}
	} else if other&^(AttrEnSQDAsyncNotify) != 0 && next == QPSReset {
		// Moving to RESET takes no attributes; ERR tolerates them but ignores them.
		return fmt.Errorf("modify_qp: to RESET takes no attributes (0x%x): %w", uint32(other), syscall.EINVAL)
	}
	if err := validateAttr(d, &attr, other); err != nil {
		return err
	}
	qp.apply(&attr, other)
	if next == QPSRTR && cur == QPSInit {
		if qp.tr.connected {
			if !resolved {
				return fmt.Errorf("modify_qp: no link address for %s: %w", attr.AH.DGID, syscall.EHOSTUNREACH)
			}
			qp.setPath(peerMAC)
		}
		qp.resp.reset(qp)
	}
	if next == QPSRTS && cur == QPSRTR {
		qp.req.reset(qp)
	}
	qp.setState(next, "modify_qp")
	if next == QPSReset {
		qp.resetQueues()
	}
	if qp.tr.modified != nil {
		qp.tr.modified(qp, cur, next)
	}
	if next == QPSRTS {
		qp.kick()
	}
	return nil
}

// qpAccessFlags are the access flags a QP takes (qp_access_flags): the remote rights it grants,
// FLUSH's two placement types among them (rxe checks them on every FLUSH), and LOCAL_WRITE,
// MW_BIND and ON_DEMAND, which libibverbs lets through (rdma-core's ODP tests give a QP their
// MR's flags, ON_DEMAND included; rxe and mlx5 take them).
const qpAccessFlags = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind |
	AccessFlushGlobal | AccessFlushPersistent | AccessOnDemand

func validateAttr(d *Device, a *QPAttr, m AttrMask) error {
	bad := func(what string) error { return fmt.Errorf("modify_qp: %s: %w", what, syscall.EINVAL) }
	switch {
	case m&AttrPathMTU != 0 && a.PathMTU.Bytes() == 0:
		return bad(fmt.Sprintf("path MTU %d", a.PathMTU))
	case m&AttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout above 31")
	case m&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry_cnt above 7")
	case m&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("rnr_retry above 7")
	case m&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min_rnr_timer above 31")
	case m&AttrRQPSN != 0 && a.RQPSN > psnMask, m&AttrSQPSN != 0 && a.SQPSN > psnMask:
		return bad("PSN wider than 24 bits")
	case m&AttrDestQPN != 0 && a.DestQPN > psnMask:
		return bad("destination QPN wider than 24 bits")
	case m&AttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > d.limits.MaxQPInitRdAtom,
		m&AttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > d.limits.MaxQPRdAtom:
		return bad("more outstanding READ/atomic than the device allows")
	case m&AttrAccessFlags != 0 && a.AccessFlags&^qpAccessFlags != 0:
		return bad("access flags " + a.AccessFlags.String())
	case m&AttrAV != 0 && !a.AH.DGID.IsValid():
		return bad("no destination GID")
	}
	return nil
}

func (qp *QP) apply(a *QPAttr, m AttrMask) {
	t := &qp.attr
	if m&AttrAccessFlags != 0 {
		t.AccessFlags = a.AccessFlags
	}
	if m&AttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if m&AttrPort != 0 {
		t.Port = a.Port
	}
	if m&AttrAV != 0 {
		t.AH = a.AH
	}
	if m&AttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
	}
	if m&AttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if m&AttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
	}
	if m&AttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
	}
	if m&AttrRQPSN != 0 {
		t.RQPSN = a.RQPSN
	}
	if m&AttrSQPSN != 0 {
		t.SQPSN = a.SQPSN
	}
	if m&AttrMaxQPRdAtomic != 0 {
		t.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&AttrMaxDestRdAtomic != 0 {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if m&AttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if m&AttrDestQPN != 0 {
		t.DestQPN = a.DestQPN
	}
	if m&AttrQKey != 0 {
		t.QKey = a.QKey
	}
	t.EnSQDAsyncNotify = m&AttrEnSQDAsyncNotify != 0 && a.EnSQDAsyncNotify // asked for each move to SQD
}

// setPath fills the frame builder's addresses from the AV. The source address is the device's
// address of the destination's family: its IPv4 address, or for an IPv6 peer its IPv6 address
// (link-local for a link-local peer).
func (qp *QP) setPath(mac [6]byte) {
	d := qp.dev
	dst := qp.attr.AH.DGID.Unmap()
	ah := qp.attr.AH
	qp.builder = roce.Builder{Path: roce.Path{SrcMAC: d.MAC(), DstMAC: mac, SrcIP: d.sourceFor(dst), DstIP: dst,
		SrcPort: srcPort(qp.qpn), TrafficClass: ah.TrafficClass, TTL: ah.HopLimit, FlowLabel: ah.FlowLabel}}
	qp.local = d.owns(dst)
}

func (qp *QP) setState(s QPState, why string) {
	if qp.state == s {
		return
	}
	old := qp.state
	qp.state = s
	qp.dev.event(Event{QP: qp.qpn, Kind: EvQPState, Msg: fmt.Sprintf("%s -> %s (%s)", old, s, why)})
	if s == QPSErr {
		qp.flushed = flushReason(qp.qpn, why)
		qp.flush()
	}
	qp.stateChanged(s)
}

// flushReason is what the flushed completions of QP qpn say: why it moved to ERR.
func flushReason(qpn uint32, why string) error {
	if why == "modify_qp" {
		return fmt.Errorf("flushed: QP 0x%06x was moved to ERR by modify_qp", qpn)
	}
	return fmt.Errorf("flushed: QP 0x%06x went to ERR: %s", qpn, why)
}

// toError moves the QP to ERR after a failure, flushing what is left, and raises QP_FATAL.
func (qp *QP) toError(why string) { qp.fail(AsyncQPFatal, why) }

// Fail moves the QP to ERR as a failure of its own, not the user's (QP_FATAL is raised, its
// work is flushed): a device model's queue in guest memory went away under it.
func (qp *QP) Fail(why string) {
	defer hold(qp.dev, &qp.mu).release()
	if qp.destroyed { // its number may be another QP's by now: nothing to flush, nobody to tell
		return
	}
	qp.toError(why)
}

// PostRecv posts receive requests. On a QP with an SRQ it is EINVAL.
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	if err := qp.check("post_recv", "QP"); err != nil {
		return err
	}
	defer hold(qp.dev, &qp.mu).release()
	for i := range wrs {
		fail := func(errno syscall.Errno, reason string) error {
			return postError("post_recv", i, len(wrs), wrs[i].ID, errno, reason)
		}
		switch {
		case qp.destroyed:
			return fail(syscall.EINVAL, "the QP is destroyed")
		case qp.srq != nil:
			return fail(syscall.EINVAL, "the QP uses a shared receive queue")
		case qp.state == QPSReset:
			return fail(syscall.EINVAL, "the QP is in RESET")
		case len(wrs[i].SGL) > qp.cap.MaxRecvSGE:
			return fail(syscall.EINVAL, fmt.Sprintf("%d SGEs, the QP takes %d", len(wrs[i].SGL), qp.cap.MaxRecvSGE))
		}
		if !qp.rq.push(&wrs[i]) {
			if len(qp.rq.ring) == 0 {
				return fail(syscall.ENOMEM, "the QP has no receive queue (max_recv_wr 0)")
			}
			return fail(syscall.ENOMEM, "receive queue full")
		}
		if qp.state == QPSErr {
			qp.flushRecv()
		}
	}
	if qp.resp.waitingRecv {
		qp.resp.waitingRecv = false
	}
	return nil
}

// SetRecvSource makes the QP's receive queue ask fetch for receives when a message needs one
// and none is posted, as a NIC reads the producer index of a receive queue in host memory only
// then (rxe's user ABI has no receive doorbell). fetch returns at most max receives, each with
// at most the QP's max_recv_sge SGEs; it runs with the QP locked (the SRQ, for an SRQ's) and
// must not call into the device. PostRecv still works beside it.
func (qp *QP) SetRecvSource(fetch func(max int) []RecvWR) {
	defer hold(qp.dev, &qp.mu).release()
	qp.rq.source = fetch
}

// SetRecvSource is QP.SetRecvSource for the SRQ. The SRQ's limit is then the source's to check
// (the engine sees only the receives fetched).
func (srq *SRQ) SetRecvSource(fetch func(max int) []RecvWR) {
	defer hold(srq.pd.dev, &srq.mu).release()
	srq.queue.source = fetch
}

// complete queues a completion on cq; a full CQ moves the QP to ERR.
func (qp *QP) complete(cq *CQ, wc WC) { qp.completeSolicited(cq, wc, false) }

// completeSolicited is complete for a receive; solicited is the Solicited Event bit of the
// message's last packet, which fires a CQ armed for solicited completions.
func (qp *QP) completeSolicited(cq *CQ, wc WC, solicited bool) {
	wc.QPNum = qp.qpn
	if !cq.push(wc, solicited) {
		qp.dev.event(Event{QP: qp.qpn, Kind: EvWarning, WRID: wc.WRID, Msg: "completion queue overflow"})
		// The QP goes to ERR as soon as the work in hand is done: doing it here would flush
		// and retire the very WQE being retired.
		if !qp.overflowed {
			qp.overflowed = true
			d := qp.dev
			d.clock.Post(0, func() {
				defer hold(d, &qp.mu).releaseOnClock()
				// The user may have reset the QP meanwhile (which forgets the overflow) or
				// moved it to ERR already.
				if qp.overflowed && qp.state != QPSReset && qp.state != QPSErr {
					qp.toError("CQ overflow")
				}
			})
		}
		return
	}
	if qp.dev.tracing() {
		qp.dev.event(Event{QP: qp.qpn, Kind: EvComplete, WRID: wc.WRID, Status: wc.Status,
			Msg: fmt.Sprintf("wr 0x%x %s %s len %d", wc.WRID, wc.Opcode, wc.Status, wc.ByteLen), Err: wc.Err})
	}
}

// flush completes every outstanding work request with WR_FLUSH_ERR, as a QP in ERR does.
func (qp *QP) flush() {
	qp.req.stopTimers()
	qp.sq.flush(qp)
	qp.flushRecv()
}

func (qp *QP) flushRecv() {
	if r := &qp.resp; r.recv != nil {
		// The receive a message in progress had taken belongs to this QP even from an SRQ.
		qp.complete(qp.recvCQ, WC{WRID: r.recv.id, Status: WCWRFlushErr, Opcode: WCRecv, Err: qp.flushed})
		r.recv = nil
	}
	if qp.srq != nil {
		return // an SRQ's receives belong to no QP
	}
	fetched := false
	for {
		w := qp.rq.peek()
		if w == nil && qp.rq.source != nil && !fetched {
			// The receives waiting in the source are posted too, and flushed like the rest:
			// one round of them, those there now.
			fetched = true
			w = qp.rq.next()
		}
		if w == nil {
			return
		}
		qp.complete(qp.recvCQ, WC{WRID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, Err: qp.flushed})
		qp.rq.pop()
	}
}

func (qp *QP) resetQueues() {
	qp.req.stopTimers()
	qp.sq.reset()
	if qp.srq == nil {
		qp.rq.head, qp.rq.n = 0, 0
	}
	qp.attr = QPAttr{}
	qp.req = requester{}
	qp.resp = responder{}
	qp.overflowed = false
	qp.flushed = nil
}

// Destroy destroys the QP. Its outstanding work requests are dropped without completions.
func (qp *QP) Destroy() error {
	if err := qp.check("destroy_qp", "QP"); err != nil {
		return err
	}
	d := qp.dev
	defer d.flush()
	qp.mu.Lock()
	qp.req.stopTimers()
	qp.sq.settleBinds()
	qp.state = QPSReset
	qp.destroyed = true
	d.event(Event{QP: qp.qpn, Kind: EvQPState, Msg: "destroyed"})
	qp.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.qps[qp.qpn] == qp {
		delete(d.qps, qp.qpn)
		d.rxQPs.remove(qp)
	}
	d.detachAll(qp)
	return nil
}

// allocQPN hands out the next free 24-bit QP number from 0x11 up, wrapping, skipping those in
// use (QPs 0 and 1 are the special ones; 2-0x10 are left alone as rxe does).
func (d *Device) allocQPN() uint32 {
	for {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN > psnMask {
			d.nextQPN = 0x11
		}
		if _, used := d.qps[n]; !used {
			return n
		}
	}
}
