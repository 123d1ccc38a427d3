package ucontext

import (
	"fmt"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/wqe"
)

// post turns one rxe_send_wqe into the engine's work request.
func (q *qp) post(e abi.SendWQE) error {
	wr, then, err := wqe.Decode(e)
	if err != nil {
		return err
	}
	switch then {
	case wqe.Bind:
		return q.bind(e, &wr)
	case wqe.RegMR:
		return fmt.Errorf("REG_MR is the kernel's, not a program's: %w", syscall.EOPNOTSUPP)
	case wqe.Address:
		if q.ud {
			if err := q.address(e, &wr); err != nil {
				return err
			}
		}
	}
	if then != wqe.Post {
		if err := wqe.ReadPayload(e, &wr, q.maxInline, q.maxSendSGE); err != nil {
			return err
		}
	}
	return q.emu.PostSend(wr)
}

// address fills a UD SEND's destination: the AH its number names (the provider puts the
// handle CREATE_AH answered), or with number 0 the rxe_av in the WQE.
func (q *qp) address(e abi.SendWQE, wr *engine.SendWR) error {
	var attr engine.AHAttr
	if n := e.AHNum(); n != 0 {
		q.c.lookups.RLock()
		a, ok := q.c.ahs[n]
		q.c.lookups.RUnlock()
		if !ok || a.pd != q.pd {
			return fmt.Errorf("UD send through AH %d, none of the QP's PD: %w", n, syscall.EINVAL)
		}
		wr.AH = a.ah
	} else {
		av := e.AV()
		attr = engine.AHAttr{DGID: addrOf(av.DGID()), FlowLabel: av.FlowLabel() & flowLabelMask, HopLimit: av.HopLimit(), TrafficClass: av.TrafficClass()}
		ah, err := q.pd.pd.CreateAH(attr)
		if err != nil {
			return err
		}
		wr.AH = ah
	}
	wr.RemoteQPN, wr.RemoteQKey = e.RemoteQPN()&0xffffff, e.RemoteQKey()
	return nil
}

// bind posts a BIND_MW WQE: a type 1 window through the bind verb, a type 2 as a work request.
func (q *qp) bind(e abi.SendWQE, wr *engine.SendWR) error {
	q.c.lookups.RLock()
	w := q.c.mwByRKey(e.MWRKey())
	m := q.c.mrByLKey(e.MWMRLKey())
	q.c.lookups.RUnlock()
	if w == nil {
		return fmt.Errorf("BIND_MW of unknown window 0x%x: %w", e.MWRKey(), syscall.EINVAL)
	}
	var mr *engine.MR
	if m != nil {
		mr = m.mr
	}
	addr, length, access := e.MWAddr(), e.MWLength(), engine.Access(e.MWAccess())
	if w.mw.Type() == engine.MWType1 {
		return q.emu.BindMW(w.mw, engine.MWBind{ID: wr.ID, Flags: wr.Flags, MR: mr, Addr: addr, Length: length, Access: access})
	}
	wr.Bind = engine.BindInfo{MW: w.mw, RKey: e.MWNewRKey(), MR: mr, Addr: addr, Length: length, Access: access}
	return q.emu.PostSend(*wr)
}
