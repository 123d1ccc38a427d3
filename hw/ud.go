package hw

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
)

// A UD or GSI QP's SEND names where it goes: an AH number, an entry of the address-vector table
// the driver keeps in guest memory (the kernel creates address handles where it cannot wait for
// the device), or with number 0 a struct rxe_av in the WQE itself (rdma-core's rxe provider when
// the kernel gave it no number). Either way the device reads the GID, flow label, hop limit and
// traffic class and resolves the link address itself.

// ahKey is what an engine address handle is made of, per PD: the handles are made once and
// kept, as many as the AV table has entries at most.
type ahKey struct {
	pd   *engine.PD
	attr engine.AHAttr
}

// address fills a UD SEND's destination from its WQE.
func (q *qp) address(e abi.SendWQE, wr *engine.SendWR) error {
	var attr engine.AHAttr
	if n := e.AHNum(); n != 0 {
		a, err := q.f.readAV(n, q.pdn)
		if err != nil {
			return err
		}
		attr = a
	} else {
		av := e.AV()
		attr = engine.AHAttr{DGID: netip.AddrFrom16([16]byte(av.DGID())).Unmap(), FlowLabel: av.FlowLabel(),
			HopLimit: av.HopLimit(), TrafficClass: av.TrafficClass()}
	}
	if attr.FlowLabel > 0xfffff {
		return fmt.Errorf("flow label 0x%x is wider than 20 bits: %w", attr.FlowLabel, syscall.EINVAL)
	}
	ah, err := q.f.ah(q.emu.PD(), attr)
	if err != nil {
		return err
	}
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, e.RemoteQPN()&0xffffff, e.RemoteQKey()
	return nil
}

// readAV reads entry n of the AV table: valid, of the QP's PD.
func (f *Function) readAV(n, pdn uint32) (engine.AHAttr, error) {
	f.avMu.Lock()
	t := f.av
	f.avMu.Unlock()
	if t == nil || n >= t.entries {
		return engine.AHAttr{}, fmt.Errorf("AH %d: no such address vector: %w", n, syscall.EINVAL)
	}
	perPage := uint32(4096 / abi.AVEntrySize)
	var b [abi.AVEntrySize]byte
	if !f.mem.Read(t.pages[n/perPage]+uint64(n%perPage)*abi.AVEntrySize, b[:]) {
		return engine.AHAttr{}, fmt.Errorf("AH %d: its table page is not mapped: %w", n, syscall.EFAULT)
	}
	av := abi.AVEntry(b[:])
	if av.Flags()&abi.AVValid == 0 {
		return engine.AHAttr{}, fmt.Errorf("AH %d is not valid: %w", n, syscall.EINVAL)
	}
	if p := av.PD(); p != pdn {
		return engine.AHAttr{}, fmt.Errorf("AH %d is of PD %d, the QP of PD %d: %w", n, p, pdn, syscall.EINVAL)
	}
	return engine.AHAttr{DGID: netip.AddrFrom16([16]byte(av.DGID())).Unmap(), FlowLabel: av.FlowLabel(),
		HopLimit: av.HopLimit(), TrafficClass: av.TrafficClass()}, nil
}

// ah is the engine's address handle for attr in pd, made the first time it is asked for. The
// cache is bounded: past MaxAH handles it starts over.
func (f *Function) ah(pd *engine.PD, attr engine.AHAttr) (*engine.AH, error) {
	k := ahKey{pd, attr}
	f.avMu.Lock()
	ah := f.ahs[k]
	f.avMu.Unlock()
	if ah != nil {
		return ah, nil
	}
	ah, err := pd.CreateAH(attr)
	if err != nil {
		return nil, err
	}
	f.avMu.Lock()
	if len(f.ahs) >= abi.MaxAH {
		clear(f.ahs)
	}
	f.ahs[k] = ah
	f.avMu.Unlock()
	return ah, nil
}

// forgetAHs drops the cached handles of a PD that goes.
func (f *Function) forgetAHs(pd *engine.PD) {
	f.avMu.Lock()
	defer f.avMu.Unlock()
	for k := range f.ahs {
		if k.pd == pd {
			delete(f.ahs, k)
		}
	}
}

// regDMAMRLocked registers a PD's DMA MR: all of guest memory, as the memory the bus mapped
// stands at each access (an implicit MR), for a kernel PD's local DMA lkey. A DMA MR grants local
// access only: the kernel gives remote access through MRs of its own.
func (f *Function) regDMAMRLocked(pdn uint32, access engine.Access, result func(int, uint32)) error {
	p, err := f.pdLocked(pdn)
	if err != nil {
		return err
	}
	if access&^engine.AccessLocalWrite != 0 {
		return errf(syscall.EINVAL, "DMA MR access 0x%x: local write at most", uint32(access))
	}
	if err := f.roomForSTagLocked(false); err != nil {
		return err
	}
	mr, err := p.pd.RegImplicitMR(&f.mem, access)
	if err != nil {
		return err
	}
	f.keysMu.Lock()
	f.mrs[mr.LKey()>>8] = mrEntry{mr: mr, pdn: pdn}
	f.keysMu.Unlock()
	p.uses++
	result(abi.ResultNum, mr.LKey())
	return nil
}

// mcastLocked attaches a UD QP to the multicast group gid, or detaches it.
func (f *Function) mcastLocked(attach bool, qpn uint32, gid [16]byte) error {
	q, err := find(f.qps, qpn, "QP")
	if err != nil {
		return err
	}
	g := netip.AddrFrom16(gid).Unmap()
	if !g.IsMulticast() {
		return errf(syscall.EINVAL, "GID %s is not a multicast group", g)
	}
	if attach {
		return q.emu.AttachMcast(g)
	}
	return q.emu.DetachMcast(g)
}
