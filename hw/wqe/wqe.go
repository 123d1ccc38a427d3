// Package wqe turns the work requests of rxe's queue layout (rdma/rdma_user_rxe.h, hw/abi's
// views) into the engine's, and the engine's completions into struct ib_uverbs_wc: what every
// front end whose queues are rxe rings shares, the PCI function's guest driver (hw) and a host
// program's rdma-core rxe provider (host/ucontext) alike. Every number comes from the queue's
// writer and is checked here before it becomes the engine's.
package wqe

import (
	"cmp"
	"fmt"
	"math/bits"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/hw/abi"
)

// Then is what a send WQE needs after Decode before it can be posted.
type Then uint8

const (
	Post    Then = iota + 1 // nothing: post it as it is (FLUSH, ATOMIC_WRITE)
	Payload                 // its inline data or SGEs (Payload), then post it
	Address                 // a SEND: on a datagram QP its destination, then its payload
	Bind                    // a BIND_MW: the window and MR its keys name
	RegMR                   // the kernel-only REG_MR: the MR its key names and its page list
)

// Decode reads a send WQE's opcode, flags, immediate data and remote addressing into a work
// request, and says what it needs besides. The opcode is the writer's u32, checked whole before
// it becomes the engine's byte.
func Decode(e abi.SendWQE) (engine.SendWR, Then, error) {
	raw := e.Opcode()
	if raw > 0xff {
		return engine.SendWR{}, 0, fmt.Errorf("send WQE opcode %d is not supported: %w", raw, syscall.EOPNOTSUPP)
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
		return wr, Payload, nil
	case engine.WRAtomicCmpAndSwp, engine.WRAtomicFetchAndAdd:
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.AtomicRKey()
		wr.CompareAdd, wr.Swap = e.CompareAdd(), e.Swap()
		return wr, Payload, nil
	case engine.WRLocalInv:
		return wr, Payload, nil
	case engine.WRSend, engine.WRSendWithImm, engine.WRSendWithInv:
		return wr, Address, nil
	case engine.WRFlush:
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.FlushRKey()
		wr.Flush = engine.FlushInfo{Type: engine.FlushType(e.FlushType()), Level: engine.FlushLevel(e.FlushLevel()),
			Length: cmp.Or(e.DMALength(), e.FlushLength())}
		return wr, Post, nil
	case engine.WRAtomicWrite:
		// The 8 bytes travel in the WQE (dma.atomic_wr), as rxe's provider puts them.
		if len(e) < abi.SendAtomicWr+8 {
			return wr, 0, fmt.Errorf("an ATOMIC_WRITE in a %d-byte WQE slot: %w", len(e), syscall.EINVAL)
		}
		wr.RemoteAddr, wr.RKey = e.RemoteAddr(), e.RKey()
		wr.Flags |= engine.SendInline
		wr.InlineData = append([]byte{}, e.AtomicWrite()...)
		return wr, Post, nil
	case engine.WRBindMW:
		return wr, Bind, nil
	case engine.WRRegMR:
		return wr, RegMR, nil
	}
	return wr, 0, fmt.Errorf("send WQE opcode %d is not supported: %w", wr.Opcode, syscall.EOPNOTSUPP)
}

// ReadPayload reads a send WQE's inline data or SGEs into wr (a LOCAL_INV has neither), within
// what the QP takes and what the WQE's slot holds.
func ReadPayload(e abi.SendWQE, wr *engine.SendWR, maxInline, maxSGE int) error {
	if wr.Flags&engine.SendInline != 0 {
		n := int(e.DMALength())
		if n > maxInline || abi.SendSGEs+n > len(e) {
			return fmt.Errorf("%d bytes inline, the QP takes %d: %w", n, maxInline, syscall.EINVAL)
		}
		wr.InlineData = append([]byte{}, e.Payload()[:n]...)
		return nil
	}
	if wr.Opcode == engine.WRLocalInv {
		return nil
	}
	n := int(e.NumSGE())
	if n > maxSGE || abi.SendSGEs+n*abi.SGESize > len(e) {
		return fmt.Errorf("%d SGEs, the QP takes %d: %w", n, maxSGE, syscall.EINVAL)
	}
	for i := range n {
		wr.SGL = append(wr.SGL, SGE(e.SGE(i)))
	}
	return nil
}

// SGE is an rxe_sge as the engine's.
func SGE(s abi.SGE) engine.SGE {
	return engine.SGE{Addr: s.Addr(), Length: s.Length(), LKey: s.LKey()}
}

// Recv reads an rxe_recv_wqe. One naming more SGEs than the queue takes, or than its slot
// holds, is a receive the engine fails: the message that takes it completes LOC_QP_OP_ERR
// (engine.RecvWR's Err), whatever its length.
func Recv(w abi.RecvWQE, maxSGE int) engine.RecvWR {
	wr := engine.RecvWR{ID: w.WRID()}
	n := w.NumSGE()
	if n > uint32(maxSGE) || abi.RecvSGEs+int(n)*abi.SGESize > len(w) {
		wr.Err = fmt.Errorf("%d SGEs, the queue takes %d: %w", n, maxSGE, syscall.EINVAL)
		return wr
	}
	for i := range int(n) {
		wr.SGL = append(wr.SGL, SGE(w.SGE(i)))
	}
	return wr
}

// ErrOpcode is the opcode a refused WQE's error completion reports: the writer's own if it is
// a byte, else one that is no opcode (its completion is an error, whose opcode verbs leave
// undefined), never the low byte of a larger number.
func ErrOpcode(raw uint32) engine.WROpcode {
	if raw > 0xff {
		return 0xff
	}
	return engine.WROpcode(raw)
}

// EncodeCQE writes wc as struct ib_uverbs_wc: immediate data in network order, an invalidated
// rkey as it is. With netHdr a datagram's network header type goes in the last byte (reserved in
// the user ABI; the Linux guest driver reads it for ib_wc.network_hdr_type).
func EncodeCQE(c abi.CQE, wc *engine.WC, netHdr bool) {
	c.SetWRID(wc.WRID)
	c.SetStatus(uint32(wc.Status))
	c.SetOpcode(uint32(wc.Opcode))
	c.SetByteLen(wc.ByteLen)
	if wc.Flags&engine.WCWithImm != 0 {
		c.SetImm(bits.ReverseBytes32(wc.Imm)) // imm_data: its bytes in network order
	} else {
		c.SetImm(wc.Imm)
	}
	c.SetQPNum(wc.QPNum)
	c.SetSrcQP(wc.SrcQP)
	c.SetWCFlags(uint32(wc.Flags))
	c.SetPortNum(1)
	if netHdr && wc.Flags&engine.WCWithGRH != 0 {
		c.SetNetworkHdrType(byte(wc.NetworkHdrType))
	}
}
