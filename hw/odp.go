package hw

import (
	"math"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/keys"

	"github.com/softirdma/softirdma/hw/abi"
)

// On-demand paging (abi.CapOnDemand): an MR registered with IBV_ACCESS_ON_DEMAND has no pages
// until its driver gives them. The engine stops work that reaches a page it lacks (emu/engine's
// pagefault.go says how); the function puts each fault in the page-fault EQ, and the driver
// answers with OP_MAP_PAGES and, for a held send queue, OP_RESUME_QP. OP_UNMAP_PAGES is the
// driver's invalidation: it completes once the function no longer touches the pages. Every
// number of these comes from the guest and is checked before it is used.

// regOnDemandLocked registers an on-demand MR: no page list, its wire range from REG_MR's
// iova and length.
func (f *Function) regOnDemandLocked(p *pdEntry, args abi.RegMRArgs, result func(int, uint32)) error {
	if err := keys.CheckMRAccess(keys.Access(args.Access())); err != nil {
		return err
	}
	switch {
	case f.pfEQ == nil:
		return errf(syscall.EINVAL, "an on-demand MR needs a page-fault EQ")
	case args.Pages().Pages() != 0 || args.Offset() != 0:
		return errf(syscall.EINVAL, "an on-demand MR takes no page list (%d pages, offset %d)", args.Pages().Pages(), args.Offset())
	}
	mr, err := p.pd.RegOnDemandMR(&f.mem, args.IOVA(), args.Length(), engine.Access(args.Access()))
	if err != nil {
		return err
	}
	f.keysMu.Lock()
	f.mrs[mr.LKey()>>8] = mrEntry{mr: mr, pdn: args.PD(), onDemand: true}
	f.keysMu.Unlock()
	p.uses++
	f.odpMRs++
	result(abi.ResultNum, mr.LKey())
	return nil
}

// onDemandLocked is the on-demand MR stag names.
func (f *Function) onDemandLocked(stag uint32) (mrEntry, error) {
	m, ok := f.mrs[stag>>8]
	if !ok || m.mr.LKey() != stag || !m.onDemand {
		return mrEntry{}, errf(syscall.EINVAL, "no on-demand MR with STag 0x%x", stag)
	}
	return m, nil
}

// mapPagesLocked gives an on-demand MR pages: a page list of 4 KiB pages, each counted against
// the device's cap of registered pages, as a registration's are.
func (f *Function) mapPagesLocked(args abi.MapPagesArgs, result func(int, uint32)) error {
	m, err := f.onDemandLocked(args.STag())
	if err != nil {
		return err
	}
	pl := decodePageList(args.Pages())
	if pl.shift != 12 {
		return errf(syscall.EINVAL, "on-demand pages are 4 KiB: page shift %d", pl.shift)
	}
	_, pages, err := f.resolveReservedLocked(pl)
	if err != nil {
		return err
	}
	added, err := m.mr.MapPages(args.VA(), pages)
	f.regPages -= uint64(pl.pages) - uint64(added) // err: added is 0
	if err != nil {
		return err
	}
	m.pages += uint32(added)
	f.keysMu.Lock()
	f.mrs[args.STag()>>8] = m
	f.keysMu.Unlock()
	result(abi.ResultNum, uint32(added))
	return nil
}

// unmapPagesLocked takes pages from an on-demand MR; it returns once no copy over them is
// under way.
func (f *Function) unmapPagesLocked(args abi.UnmapPagesArgs, result func(int, uint32)) error {
	m, err := f.onDemandLocked(args.STag())
	if err != nil {
		return err
	}
	n, err := m.mr.UnmapPages(args.VA(), args.Length())
	if err != nil {
		return err
	}
	dropped := min(uint32(n), m.pages) // pages a DMA unmap took are still counted
	m.pages -= dropped
	f.regPages -= uint64(dropped)
	f.keysMu.Lock()
	f.mrs[args.STag()>>8] = m
	f.keysMu.Unlock()
	result(abi.ResultNum, uint32(n))
	return nil
}

// resumeQPLocked answers the page fault that holds a QP's send queue.
func (f *Function) resumeQPLocked(args abi.ResumeQPArgs) error {
	q, err := find(f.qps, args.QPN(), "QP")
	if err != nil {
		return err
	}
	if st := args.Status(); st > abi.ResumeMaxStatus {
		return errf(syscall.EINVAL, "status %d: at most %d (IBV_WC_GENERAL_ERR)", st, abi.ResumeMaxStatus)
	}
	return q.emu.ResumePageFault(engine.WCStatus(args.Status()))
}

// pageFault puts one of the engine's page faults in the page-fault EQ, if the driver made one.
// It runs on the engine's clock, never with the engine or the function locked.
func (f *Function) pageFault(pf engine.PageFault) {
	f.mu.Lock()
	e := f.pfEQ
	f.mu.Unlock()
	if e == nil {
		return
	}
	var b [abi.FaultEntrySize]byte
	entry := abi.FaultEntry(b[:])
	var flags uint8
	if pf.Write {
		flags |= abi.FaultWrite
	}
	if pf.Held {
		flags |= abi.FaultHeld
	}
	entry.SetFlags(flags)
	entry.SetQPN(pf.QPN)
	entry.SetVA(pf.VA)
	entry.SetSTag(pf.Key)
	entry.SetPages(uint32(min(pf.Len>>12, math.MaxUint32)))
	if e.put(b[:], nil) {
		f.signal(e.vector)
	}
}
