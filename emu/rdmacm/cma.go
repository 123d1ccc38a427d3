package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/internal/names"
	"github.com/softirdma/softirdma/wire/cm"
)

// EventType is what happened to a connection (enum rdma_cm_event_type's names).
type EventType uint8

const (
	ConnectRequest EventType = iota + 1 // a listener got a REQ: Accept or Reject the Event's ID
	Established                         // both ends are connected
	Rejected                            // the peer refused (Reason, Private)
	Unreachable                         // the peer never answered: retries exhausted
	Disconnected                        // a DREQ was sent or received; the QP is in ERR
	TimewaitExit                        // the connection's time wait ended; its QP may be reused
	// ConnectResponse is the REP of a connection whose consumer moves its QP (ConnectUser):
	// move it to RTR and RTS (QPAttr), then Establish sends the RTU.
	ConnectResponse
)

var eventNames = [...]string{"", "CONNECT_REQUEST", "ESTABLISHED", "REJECTED", "UNREACHABLE", "DISCONNECTED", "TIMEWAIT_EXIT", "CONNECT_RESPONSE"}

func (t EventType) String() string { return names.In(eventNames[:], t, "event %d") }

// Event is one event of a connection.
type Event struct {
	Type EventType
	ID   *ID
	// Private is the peer's private data: the REQ's (after rdma_cm's header) with a
	// ConnectRequest, the REP's with Established on the active side, the REJ's with Rejected.
	Private []byte
	// Reason is a Rejected event's REJ reason.
	Reason cm.RejectReason
	// UD is where a UD service's QP is, with Established on the side that asked (SIDR).
	UD UDParam
	// Listener is the listener a ConnectRequest came to.
	Listener *ID
	// Status is the SIDR_REP's status of an Unreachable UD request it refused.
	Status cm.SIDRStatus
}

// UDParam is a UD service's QP as a SIDR_REP gives it (rdma_cm's struct rdma_ud_param).
type UDParam struct {
	QPN  uint32
	QKey uint32
	AH   *engine.AH // to the service's address
}

// UDPQKey is the Q_Key rdma_cm gives every UD QP of the UDP port space (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// ConnParam is a connection's parameters (struct rdma_conn_param).
type ConnParam struct {
	Private            []byte // at most 56 bytes in a REQ (92 less rdma_cm's header), 196 in a REP, 148 in a REJ
	ResponderResources uint8  // READs and atomics this side accepts outstanding
	InitiatorDepth     uint8  // READs and atomics this side has outstanding
	RetryCount         uint8  // 0..7 [7]
	RNRRetryCount      uint8  // 0..7 [7]
	MTU                engine.MTU
}

// ID is one end of a connection, or a listener (struct rdma_cm_id).
type ID struct {
	m      *Manager
	state  state
	port   uint16 // a listener's port
	ps     cm.PortSpace
	qp     *engine.QP
	local  uint32 // local communication ID
	remote uint32
	tid    uint64
	peer   netip.Addr
	ah     *engine.AH
	// The message sent last and not yet answered, sent again on its timer.
	last       []byte
	lastAttrID uint16
	retries    uint8
	timer      engine.Timer
	req        cm.REQ // what a ConnectRequest's REQ said (passive) or what was sent (active)
	// psn is the PSN this side's QP receives from first, the starting PSN of this side's REQ or
	// REP: ib_cm's starting PSN is the one its sender expects to receive (Linux's active side
	// takes its rq_psn from its REQ, the passive side from its REP), so each side sends from the
	// starting PSN of the other's message.
	psn   uint32
	param ConnParam
	// A SIDR request's: what was asked (passive), and the QP that answers it.
	sidr cm.SIDRREQ
	// destroyed is an ID its consumer destroyed: no event of its is delivered any more.
	destroyed bool
	// userMoves is a connection whose consumer moves its QP itself, as a program's QP under the
	// kernel's rdma_cm: the manager says where to (QPAttr) and never modifies it.
	userMoves bool
	hdr       cm.Header // rdma_cm's header of a request that came in: the peer's port and addresses
	rep       cm.REP    // the REP of an active connection
	path      rcPath    // the path the REQ and REP settled, once they have
	hasPath   bool
	rtuSent   bool
}

// State is the connection's state, for tests and tracing.
func (id *ID) State() string {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	return id.state.String()
}

// QP is the connection's QP.
func (id *ID) QP() *engine.QP { return id.qp }

// Peer is the other end's address.
func (id *ID) Peer() netip.Addr { return id.peer }

// Listen makes a listener for port in the TCP port space (rdma_listen): a REQ for its service ID
// is a ConnectRequest event on it.
func (m *Manager) Listen(port uint16) (*ID, error) { return m.listen(cm.PSTCP, port) }

// ListenUD makes a listener for port in the UDP port space: a SIDR_REQ for its service ID is a
// ConnectRequest event on it, answered by Accept with a UD QP.
func (m *Manager) ListenUD(port uint16) (*ID, error) { return m.listen(cm.PSUDP, port) }

func (m *Manager) listen(ps cm.PortSpace, port uint16) (*ID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	sid := cm.ServiceID(ps, port)
	if m.listeners[sid] != nil {
		return nil, fmt.Errorf("rdmacm: %s port %d: %w", ps, port, syscall.EADDRINUSE)
	}
	id := &ID{m: m, state: stListen, port: port, ps: ps}
	m.listeners[sid] = id
	return id, nil
}

// Connect asks the listener at dst and port for a connection for qp, an RC QP in RESET or INIT
// (rdma_connect): it goes to INIT now, and to RTR and RTS when the REP comes.
func (m *Manager) Connect(qp *engine.QP, dst netip.Addr, port uint16, p ConnParam) (*ID, error) {
	return m.connect(qp, dst, port, p, false)
}

// ConnectUser is Connect for a QP its consumer moves itself, as rdma_cm leaves a program's QP
// to librdmacm: the REQ goes out and the QP is not touched; the REP is a ConnectResponse event,
// after which the consumer moves the QP to RTR and RTS (QPAttr) and Establish sends the RTU.
func (m *Manager) ConnectUser(qp *engine.QP, dst netip.Addr, port uint16, p ConnParam) (*ID, error) {
	if qp.Type() != engine.QPTypeRC {
		return nil, fmt.Errorf("rdmacm: connect of a %s QP: %w", qp.Type(), syscall.EINVAL)
	}
	return m.connect(qp, dst, port, p, true)
}

func (m *Manager) connect(qp *engine.QP, dst netip.Addr, port uint16, p ConnParam, user bool) (*ID, error) {
	if err := fits(p.Private, "REQ", cm.REQPrivateLen-cm.HeaderLen); err != nil {
		return nil, err
	}
	p = withDefaults(p)
	ready := func() error { return toInit(qp, p) }
	if user {
		ready = func() error { return nil }
	}
	return m.dial(qp, dst, p, ready, func(id *ID, hdr cm.Header) (uint16, []byte, error) {
		id.userMoves = user
		q := cm.REQ{LocalCommID: id.local, ServiceID: cm.ServiceID(cm.PSTCP, port), LocalCAGUID: m.guid(), LocalQPN: qp.Num(),
			ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth, RemoteCMResponseTimeout: m.cfg.ResponseTimeout,
			StartingPSN: id.psn, LocalCMResponseTimeout: m.cfg.ResponseTimeout, RetryCount: p.RetryCount, PKey: 0xffff,
			PathMTU: uint8(p.MTU), RNRRetryCount: p.RNRRetryCount, MaxCMRetries: m.cfg.MaxRetries,
			// The path as Linux's rdma_cm fills it on RoCE (the captured REQs): permissive LIDs,
			// hop limit 64, local ACK timeout 17.
			Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: hdr.Src.As16(), RemoteGID: dst.As16(), HopLimit: 64, LocalACKTimeout: 17}}
		if err := withHeader(q.Private[:], hdr, p.Private); err != nil {
			return 0, nil, err
		}
		id.req = q
		m.setState(id, stREQSent)
		msg, err := encode(q.Put)
		return cm.AttrREQ, msg, err
	})
}

// dial is what Connect and ConnectUD share: QP1's handle to dst, the consumer's QP readied, a
// new ID for it with its transaction and rdma_cm's header, and the request that start makes of
// them sent until it is answered.
func (m *Manager) dial(qp *engine.QP, dst netip.Addr, p ConnParam, ready func() error,
	start func(*ID, cm.Header) (uint16, []byte, error)) (*ID, error) {
	ah, err := m.agent.ah(dst)
	if err != nil {
		return nil, err
	}
	if err := ready(); err != nil {
		m.agent.drop(ah)
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.agent.drop(ah)
		return nil, ErrClosed
	}
	id := m.newConn(qp, dst, ah, p)
	id.tid = m.tidFor(id)
	hdr := cm.Header{SrcPort: uint16(49152 + m.rnd.IntN(16384)), Src: ah.Source(), Dst: dst}
	attr, msg, err := start(id, hdr)
	if err != nil {
		m.forget(id)
		m.mu.Unlock()
		return nil, fmt.Errorf("rdmacm: %w", err)
	}
	m.send(id, attr, msg)
	m.mu.Unlock()
	m.deliver()
	return id, nil
}

// withHeader writes rdma_cm's header, then the consumer's private data, into a request's.
func withHeader(private []byte, hdr cm.Header, data []byte) error {
	if err := hdr.Put(private); err != nil {
		return err
	}
	copy(private[cm.HeaderLen:], data)
	return nil
}

// fits says whether private data fits the message that carries it.
func fits(private []byte, msg string, max int) error {
	if len(private) > max {
		return fmt.Errorf("rdmacm: %d bytes of private data, a %s holds %d: %w", len(private), msg, max, syscall.EINVAL)
	}
	return nil
}

// testHookAccept runs in Accept between readying the QP and answering, for a test to end the
// request there.
var testHookAccept func()

// Accept accepts a ConnectRequest with qp, an RC QP in RESET or INIT (rdma_accept): the QP goes
// to RTR and RTS on the REQ's terms, and the REP goes out.
func (id *ID) Accept(qp *engine.QP, p ConnParam) error { return id.accept(qp, p, false) }

// AcceptUser is Accept for a QP its consumer has moved to RTR and RTS itself (QPAttr says how):
// the REP goes out, and the RTU is an Established event.
func (id *ID) AcceptUser(qp *engine.QP, p ConnParam) error { return id.accept(qp, p, true) }

func (id *ID) accept(qp *engine.QP, p ConnParam, user bool) error {
	m := id.m
	if err := fits(p.Private, "REP", cm.REPPrivateLen); err != nil {
		return err
	}
	p = withDefaults(p)
	m.mu.Lock()
	st, q := id.state, id.req
	closed := m.closed
	m.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case st == stSIDRReqRcvd:
		return id.acceptUD(qp, p)
	case !st.owesAnswer():
		return fmt.Errorf("rdmacm: accept in %s: %w", st, syscall.EINVAL)
	}
	if !user {
		if err := id.readyAccepted(qp, p, q); err != nil {
			return fmt.Errorf("rdmacm: accept: %w", err)
		}
	}
	if testHookAccept != nil {
		testHookAccept()
	}
	m.mu.Lock()
	if !id.state.owesAnswer() {
		// The request ended while its QP was readied: the peer rejected it or gave up.
		st := id.state
		m.mu.Unlock()
		err := fmt.Errorf("rdmacm: accept: the request ended (%s) before the answer: %w", st, syscall.ECONNABORTED)
		if user {
			return err
		}
		if qerr := qp.Modify(engine.QPAttr{State: engine.QPSErr}, engine.AttrState); qerr != nil {
			err = fmt.Errorf("%w; its QP %#x did not go to ERR: %w", err, qp.Num(), qerr)
		}
		return err
	}
	id.qp, id.param, id.userMoves = qp, p, user
	if user {
		id.path, id.hasPath = id.acceptPath(p, q), true
	}
	rep := cm.REP{LocalCommID: id.local, RemoteCommID: id.remote, LocalQPN: qp.Num(), StartingPSN: id.psn,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth, TargetACKDelay: 15,
		RNRRetryCount: p.RNRRetryCount, LocalCAGUID: m.guid()}
	copy(rep.Private[:], p.Private)
	msg, err := encode(rep.Put)
	if err != nil {
		m.mu.Unlock()
		return fmt.Errorf("rdmacm: accept: %w", err)
	}
	m.setState(id, stREPSent)
	m.send(id, cm.AttrREP, msg)
	m.mu.Unlock()
	m.deliver()
	return nil
}

// readyAccepted takes the QP that accepts q through INIT, RTR and RTS on the REQ's terms.
func (id *ID) readyAccepted(qp *engine.QP, p ConnParam, q cm.REQ) error {
	if err := toInit(qp, p); err != nil {
		return err
	}
	return id.acceptPath(p, q).connect(qp)
}

// acceptPath is the path of a connection accepted on q's terms and p's.
func (id *ID) acceptPath(p ConnParam, q cm.REQ) rcPath {
	mtu := engine.MTU(q.PathMTU)
	if mtu.Bytes() == 0 {
		mtu = engine.MTU1024
	}
	return rcPath{peer: id.peer, mtu: min(mtu, p.MTU), destQPN: q.LocalQPN, rqPSN: id.psn, sqPSN: q.StartingPSN,
		maxDestRdAtomic: min(p.ResponderResources, q.InitiatorDepth), maxRdAtomic: min(p.InitiatorDepth, q.ResponderResources),
		timeout: q.Primary.LocalACKTimeout, retry: q.RetryCount, rnrRetry: q.RNRRetryCount}
}

// Reject refuses a ConnectRequest with private data (rdma_reject): REJ, consumer defined.
func (id *ID) Reject(private []byte) error {
	m := id.m
	if err := fits(private, "REJ", cm.REJPrivateLen); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case id.state == stSIDRReqRcvd:
		if err := fits(private, "SIDR_REP", cm.SIDRREPPrivateLen); err != nil {
			return err
		}
		m.sidrReply(id, cm.SIDRReject, 0, 0, private)
		return nil
	case !id.state.owesAnswer():
		return fmt.Errorf("rdmacm: reject in %s: %w", id.state, syscall.EINVAL)
	}
	m.reject(id, cm.RejConsumerDefined, private)
	m.forget(id)
	return nil
}

// Disconnect ends an established connection (rdma_disconnect): the QP goes to ERR, the DREQ out,
// and the connection waits out its time wait once the DREP comes.
func (id *ID) Disconnect() error {
	m := id.m
	m.mu.Lock()
	st, closed := id.state, m.closed
	m.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case st != stEstablished:
		return fmt.Errorf("rdmacm: disconnect in %s: %w", st, syscall.EINVAL)
	}
	if !id.userMoves {
		m.qpToError(id.qp)
	}
	m.mu.Lock()
	if id.state != stEstablished {
		// Ended meanwhile, by the peer's DREQ: nothing is left to say.
		m.mu.Unlock()
		return nil
	}
	if err := m.disconnect(id, true); err != nil {
		m.mu.Unlock()
		return err
	}
	m.events = append(m.events, Event{Type: Disconnected, ID: id})
	m.mu.Unlock()
	m.deliver()
	return nil
}

// Destroy releases the ID (rdma_destroy_id): a listener stops listening; a connection that is
// established is disconnected first, with one DREQ, and one being made is refused or withdrawn
// with a REJ (a UD request's with a SIDR_REP that refuses it), as Linux's ib_cm does for an ID
// destroyed; its RC QP goes to ERR. It leaves the manager's tables at once, its timers stopped,
// with no time wait of its own, and no event of its is delivered after. The QP is the
// consumer's to destroy, and so is the address handle of a UD service's Established event.
// Destroying an ID twice is an error.
func (id *ID) Destroy() error {
	m := id.m
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return ErrClosed
	case id.destroyed:
		m.mu.Unlock()
		return fmt.Errorf("rdmacm: destroy: the ID is destroyed already: %w", syscall.EINVAL)
	}
	m.destroy(id)
	m.mu.Unlock()
	m.deliver()
	return nil
}

// Establish sends the RTU of a connection its consumer moved to RTS after its ConnectResponse
// (rdma_accept with no parameters on the active side, as librdmacm finishes a connection).
func (id *ID) Establish() error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case !id.userMoves || id.state != stEstablished || id.rtuSent || !id.hasPath:
		return fmt.Errorf("rdmacm: establish in %s: %w", id.state, syscall.EINVAL)
	}
	id.rtuSent = true
	m.sendRTU(id)
	return nil
}

// QPAttr is where the consumer of a connection it moves itself takes its QP next (rdma_init_qp_attr,
// as ib_cm's cm_init_qp_*_attr answer it): INIT with the access rdma_cm grants, RTR and RTS on
// the path the REQ and REP settled. A passive side asks before it accepts: the path is then the
// REQ's, with the READs the peer asked for.
func (id *ID) QPAttr(state engine.QPState) (engine.QPAttr, engine.AttrMask, error) {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.ps == cm.PSUDP {
		if state != engine.QPSInit {
			return engine.QPAttr{}, 0, fmt.Errorf("rdmacm: a UD QP's %s is its own: %w", state, syscall.EINVAL)
		}
		return engine.QPAttr{State: engine.QPSInit, Port: 1, QKey: UDPQKey},
			engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrQKey, nil
	}
	path, ok := id.path, id.hasPath
	if !ok && id.state.owesAnswer() {
		q := id.req
		path, ok = id.acceptPath(withDefaults(ConnParam{ResponderResources: q.InitiatorDepth, InitiatorDepth: q.ResponderResources, MTU: engine.MTU4096}), q), true
	}
	switch state {
	case engine.QPSInit:
		access := engine.Access(0)
		if ok || id.state != stIdle {
			access = accessFor(ConnParam{ResponderResources: path.maxDestRdAtomic})
		}
		return engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: access},
			engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags, nil
	case engine.QPSRTR, engine.QPSRTS:
		if !ok {
			return engine.QPAttr{}, 0, fmt.Errorf("rdmacm: %s before the peer answered: %w", state, syscall.EINVAL)
		}
		return path.attr(state)
	}
	return engine.QPAttr{}, 0, fmt.Errorf("rdmacm: no attributes for %s: %w", state, syscall.EINVAL)
}

// Port is a listener's port.
func (id *ID) Port() uint16 { return id.port }

// RequestHeader is rdma_cm's header of the request that made a passive ID: the addresses and
// the port the peer connects from.
func (id *ID) RequestHeader() cm.Header { return id.hdr }

// PeerParam is what the peer asked for, as rdma_cm reports it with ConnectRequest and
// ConnectResponse: its QP and its READs seen from this side (the peer's initiator depth is
// this side's responder resources), its retry counts, the private data aside.
func (id *ID) PeerParam() (qpn uint32, p ConnParam) {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	if id.hasPath && id.state != stREQRcvd && id.rep.LocalQPN != 0 {
		r := id.rep
		return r.LocalQPN, ConnParam{ResponderResources: r.InitiatorDepth, InitiatorDepth: r.ResponderResources, RNRRetryCount: r.RNRRetryCount}
	}
	q := id.req
	return q.LocalQPN, ConnParam{ResponderResources: q.InitiatorDepth, InitiatorDepth: q.ResponderResources,
		RetryCount: q.RetryCount, RNRRetryCount: q.RNRRetryCount, MTU: engine.MTU(q.PathMTU)}
}
