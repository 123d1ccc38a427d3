package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
)

// qpStep is one move of a QP: the attributes and which of them count.
type qpStep struct {
	a    engine.QPAttr
	mask engine.AttrMask
}

// modify makes the moves in order, stopping at the first the QP refuses.
func modify(qp *engine.QP, steps []qpStep) error {
	for _, s := range steps {
		if err := qp.Modify(s.a, s.mask); err != nil {
			return err
		}
	}
	return nil
}

// datagramSteps take a UD or GSI QP from RESET to RTS with Q_Key qkey: INIT on port (0 leaves
// the port unset, as a GSI QP's is its device's), RTR, RTS.
func datagramSteps(qkey uint32, port uint8) []qpStep {
	init := qpStep{engine.QPAttr{State: engine.QPSInit, Port: port, QKey: qkey}, engine.AttrState | engine.AttrPKeyIndex | engine.AttrQKey}
	if port != 0 {
		init.mask |= engine.AttrPort
	}
	return []qpStep{init,
		{engine.QPAttr{State: engine.QPSRTR}, engine.AttrState},
		{engine.QPAttr{State: engine.QPSRTS}, engine.AttrState | engine.AttrSQPSN}}
}

// ReadyUD takes a UD QP in RESET or INIT to RTS with rdma_cm's Q_Key, as librdmacm's
// rdma_create_qp does for a UD ID, so that receives may be posted before ConnectUD or Accept;
// one in RTS is left as it is.
func ReadyUD(qp *engine.QP) error {
	if qp.Type() != engine.QPTypeUD {
		return fmt.Errorf("QP %#x is not UD: %w", qp.Num(), syscall.EINVAL)
	}
	steps := datagramSteps(UDPQKey, 1)
	switch qp.State() {
	case engine.QPSRTS:
		return nil
	case engine.QPSInit:
		steps = steps[1:]
	case engine.QPSReset:
	default:
		return fmt.Errorf("UD QP %#x in %s: %w", qp.Num(), qp.State(), syscall.EINVAL)
	}
	return modify(qp, steps)
}

// toInit takes a QP in RESET, or in INIT (where rdma_create_qp leaves one, so that receives can
// be posted before the connection), to INIT with the access rdma_cm grants.
func toInit(qp *engine.QP, p ConnParam) error {
	mask := engine.AttrState | engine.AttrPKeyIndex | engine.AttrPort | engine.AttrAccessFlags
	if qp.State() == engine.QPSInit {
		mask = engine.AttrState | engine.AttrAccessFlags
	}
	return qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: accessFor(p)}, mask)
}

func withDefaults(p ConnParam) ConnParam {
	if p.RetryCount == 0 {
		p.RetryCount = 7
	}
	if p.RNRRetryCount == 0 {
		p.RNRRetryCount = 7
	}
	if p.MTU == 0 {
		p.MTU = engine.MTU1024
	}
	return p
}

// accessFor is the remote access rdma_cm grants a QP it connects: READs when it takes them, and
// WRITEs always (rdma_cm's IB_ACCESS_REMOTE_WRITE | IB_ACCESS_LOCAL_WRITE, and REMOTE_READ with
// responder resources).
func accessFor(p ConnParam) engine.Access {
	a := engine.AccessRemoteWrite | engine.AccessLocalWrite
	if p.ResponderResources > 0 {
		a |= engine.AccessRemoteRead | engine.AccessRemoteAtomic
	}
	return a
}

// rcPath is what a REQ and its REP settle for an RC QP's RTR and RTS, as ib_cm's
// cm_init_qp_rtr_attr and cm_init_qp_rts_attr give them to rdma_cm: the peer's QP and the PSNs
// of both directions, the path's MTU and timeouts, and the READs and atomics each side takes.
type rcPath struct {
	peer                         netip.Addr
	mtu                          engine.MTU
	destQPN, rqPSN, sqPSN        uint32
	maxDestRdAtomic, maxRdAtomic uint8
	timeout, retry, rnrRetry     uint8
}

// connect takes qp, in INIT, to RTR and RTS on the path.
func (c rcPath) connect(qp *engine.QP) error {
	return modify(qp, []qpStep{c.step(engine.QPSRTR), c.step(engine.QPSRTS)})
}

// step is the move to RTR or RTS on the path.
func (c rcPath) step(state engine.QPState) qpStep {
	if state == engine.QPSRTR {
		return qpStep{engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: c.peer, HopLimit: 64}, PathMTU: c.mtu, DestQPN: c.destQPN, RQPSN: c.rqPSN,
			MaxDestRdAtomic: c.maxDestRdAtomic, MinRNRTimer: engine.DefaultMinRNRTimer},
			engine.AttrState | engine.AttrAV | engine.AttrPathMTU | engine.AttrDestQPN | engine.AttrRQPSN | engine.AttrMaxDestRdAtomic | engine.AttrMinRNRTimer}
	}
	return qpStep{engine.QPAttr{State: engine.QPSRTS, SQPSN: c.sqPSN, Timeout: c.timeout, RetryCnt: c.retry, RNRRetry: c.rnrRetry, MaxRdAtomic: c.maxRdAtomic},
		engine.AttrState | engine.AttrSQPSN | engine.AttrTimeout | engine.AttrRetryCnt | engine.AttrRNRRetry | engine.AttrMaxQPRdAtomic}
}

// attr is step as QPAttr answers it.
func (c rcPath) attr(state engine.QPState) (engine.QPAttr, engine.AttrMask, error) {
	s := c.step(state)
	return s.a, s.mask, nil
}
