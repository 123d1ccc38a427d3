package ucontext

import (
	"cmp"
	"fmt"
	"math/bits"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
)

// post turns one rxe_send_wqe into the engine's work request.
func (q *qp) post(e abi.SendWQE) error {
	raw := e.Opcode()
	if raw > 0xff {
		return fmt.Errorf("send WQE opcode %d is not supported: %w", raw, syscall.EOPNOTSUPP)
	}
	wr := engine.SendWR{ID: e.WRID(), Opcode: engine.WROpcode(raw), Flags: engine.SendFlags(e.Flags())}
	switch wr.Opcode {
	case engine.WRRDMAWriteWithImm, engine.WRSendWithImm:
		wr.Imm = bits.ReverseBytes32(e.Imm()) // imm_data is in network order
	case engine.WRSendWithInv, engine.WRLocalInv:
		wr.Imm = e.Imm()
	}
	switch wr.Opcode {
	case engine.WRRDMAWrite, engine.WRRDMAWriteWithImm, engine.WRRDMARead:
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.RKey()
	case engine.WRAtomicCmpAndSwp, engine.WRAtomicFetchAndAdd:
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.AtomicRKey()
		wr.CompareAdd, wr.Swap = e.CompareAdd(), e.Swap()
	case engine.WRSend, engine.WRSendWithImm, engine.WRSendWithInv, engine.WRLocalInv:
		if q.ud && wr.Opcode != engine.WRLocalInv {
			if err := q.address(e, &wr); err != nil {
				return err
			}
		}
	case engine.WRFlush:
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.FlushRKey()
		wr.Flush = engine.FlushInfo{Type: engine.FlushType(e.FlushType()), Level: engine.FlushLevel(e.FlushLevel()),
			Length: cmp.Or(e.DMALength(), e.FlushLength())}
		return q.emu.PostSend(wr)
	case engine.WRAtomicWrite:
		if len(e) < abi.SendAtomicWr+8 {
			return fmt.Errorf("an ATOMIC_WRITE in a %d-byte WQE slot: %w", len(e), syscall.EINVAL)
		}
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.RKey()
		wr.Flags |= engine.SendInline
		wr.InlineData = append([]byte{}, e.AtomicWrite()...)
		return q.emu.PostSend(wr)
	case engine.WRBindMW:
		return q.bind(e, &wr)
	default:
		return fmt.Errorf("send WQE opcode %d is not supported: %w", wr.Opcode, syscall.EOPNOTSUPP)
	}
	if err := q.payload(e, &wr); err != nil {
		return err
	}
	return q.emu.PostSend(wr)
}

// payload reads a send WQE's inline data or SGEs into wr.
func (q *qp) payload(e abi.SendWQE, wr *engine.SendWR) error {
	if wr.Flags&engine.SendInline != 0 {
		n := int(e.DMALength())
		if n > q.maxInline || abi.SendSGEs+n > len(e) {
			return fmt.Errorf("%d bytes inline, the QP takes %d: %w", n, q.maxInline, syscall.EINVAL)
		}
		wr.InlineData = append([]byte{}, e.Payload()[:n]...)
		return nil
	}
	if wr.Opcode == engine.WRLocalInv {
		return nil
	}
	n := int(e.NumSGE())
	if n > q.maxSendSGE || abi.SendSGEs+n*abi.SGESize > len(e) {
		return fmt.Errorf("%d SGEs, the QP takes %d: %w", n, q.maxSendSGE, syscall.EINVAL)
	}
	for i := range n {
		s := e.SGE(i)
		wr.SGL = append(wr.SGL, engine.SGE{Addr: s.Addr(), Length: s.Length(), LKey: s.LKey()})
	}
	return nil
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
