package hw

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/keys"
)

// ringCtrlQLocked takes the control queue's new producer index and runs every command up to
// it, in ring order. It returns the vectors to signal.
func (f *Function) ringCtrlQLocked(prod uint32) []int {
	r := &f.regs
	r.ctrlQProd = prod
	if r.ctrl&abi.DevCtrlEnable == 0 || r.status&abi.DevStatusFatal != 0 {
		return nil // an enable comes first; a fatal function does nothing more
	}
	switch {
	case r.ctrlQLog == 0 || r.ctrlQLog > abi.CtrlQMaxLog || r.ctrlQBase%4096 != 0:
		return f.fatalLocked(abi.FatalCtrlQSetup)
	case !f.busMasterLocked():
		return f.fatalLocked(abi.FatalBusMaster)
	}
	mask := uint32(1)<<r.ctrlQLog - 1
	r.ctrlQProd = prod & mask
	ran := false
	for r.ctrlQCons != r.ctrlQProd {
		addr := r.ctrlQBase + uint64(r.ctrlQCons)*abi.CtrlEntrySize
		var e [abi.CtrlEntrySize]byte
		if err := readGuest(&f.mem, addr, e[:]); err != nil {
			return f.fatalLocked(abi.FatalCtrlQDMA)
		}
		err := f.execLocked(e[:])
		if l := f.cfg.Log; l != nil {
			op := binary.LittleEndian.Uint16(e[abi.CtrlOpcode:])
			if err != nil {
				l.Info("control command failed", "op", fmt.Sprintf("0x%02x", op), "errno", errnoOf(err), "err", err)
			} else {
				l.Debug("control command", "op", fmt.Sprintf("0x%02x", op))
			}
		}
		binary.LittleEndian.PutUint32(e[abi.CtrlStatus:], abi.CtrlDone|errnoOf(err))
		// Results (and a query's answer) first, then the status that says they are there.
		if writeGuest(&f.mem, addr+abi.CtrlResult, e[abi.CtrlResult:]) != nil ||
			writeGuest(&f.mem, addr+abi.CtrlStatus, e[abi.CtrlStatus:abi.CtrlStatus+4]) != nil {
			return f.fatalLocked(abi.FatalCtrlQDMA)
		}
		r.ctrlQCons = (r.ctrlQCons + 1) & mask
		ran = true
	}
	if ran {
		return []int{abi.CtrlVector}
	}
	return nil
}

// fatalLocked stops the function with code and reports DEVICE_FATAL (libibverbs'
// IBV_EVENT_DEVICE_FATAL) on the async event queue, if the driver made one and bus mastering
// lets the function write it: it returns the vector to signal.
func (f *Function) fatalLocked(code uint32) []int {
	f.regs.status |= abi.DevStatusFatal
	f.regs.status &^= abi.DevStatusReady
	f.regs.fatal = code
	if e := f.asyncEQ; e != nil && f.busMasterLocked() && e.post(uint8(engine.AsyncDeviceFatal), 0) {
		return []int{e.vector}
	}
	return nil
}

// execLocked runs one command, writing its results into the entry.
func (f *Function) execLocked(e []byte) error {
	args := e[abi.CtrlArgs:]
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(args[off:]) }
	result := func(i int, v uint32) { binary.LittleEndian.PutUint32(e[abi.CtrlResult+4*i:], v) }
	if fl := binary.LittleEndian.Uint16(e[abi.CtrlFlags:]); fl != 0 {
		return errf(syscall.EINVAL, "control entry flags 0x%x (reserved, 0)", fl)
	}
	switch op := binary.LittleEndian.Uint16(e[abi.CtrlOpcode:]); op {
	case abi.OpNop:
		return nil
	case abi.OpQueryDevice:
		for i := range abi.QueryDeviceWords {
			binary.LittleEndian.PutUint32(args[4*i:], f.readRegLocked(abi.RegCaps+4*uint32(i)))
		}
		result(abi.ResultVersion, abi.Version)
		return nil
	case abi.OpQueryPort:
		if port := u32(abi.QueryPortPort); port != 1 {
			return errf(syscall.EINVAL, "port %d (the function has port 1)", port)
		}
		result(abi.ResultPortState, f.readRegLocked(abi.RegPortState))
		result(abi.ResultPortMaxMTU, f.readRegLocked(abi.RegMaxMTU))
		result(abi.ResultPortActiveMTU, uint32(cmp.Or(f.cfg.ActiveMTU, engine.MTU4096)))
		result(abi.ResultPortGIDLen, abi.GIDTableLen)
		return nil
	case abi.OpQueryGID:
		port, i := u32(abi.QueryGIDPort), u32(abi.QueryGIDIndex)
		switch {
		case port != 1:
			return errf(syscall.EINVAL, "port %d (the function has port 1)", port)
		case i >= abi.GIDTableLen:
			return errf(syscall.EINVAL, "GID index %d of %d", i, abi.GIDTableLen)
		}
		gid := args[abi.QueryGIDGID : abi.QueryGIDGID+16]
		clear(gid)
		if f.regs.gidValid&(1<<i) != 0 {
			copy(gid, f.regs.gids[i][:])
			result(abi.ResultGIDValid, 1)
		}
		return nil
	case abi.OpAllocPD:
		pd, err := f.dev.AllocPD()
		if err != nil {
			return err
		}
		f.nextPD++
		f.pds[f.nextPD] = &pdEntry{pd: pd}
		result(abi.ResultNum, f.nextPD)
		return nil
	case abi.OpDeallocPD:
		pdn := u32(abi.NumArgsNum)
		p, ok := f.pds[pdn]
		switch {
		case !ok:
			return errf(syscall.ENOENT, "PD %d", pdn)
		case p.uses > 0:
			return errf(syscall.EBUSY, "PD %d has %d objects", pdn, p.uses)
		}
		delete(f.pds, pdn)
		f.forgetAHs(p.pd)
		return nil
	case abi.OpAllocSTag:
		return f.allocSTagLocked(u32(abi.AllocSTagPD), u32(abi.AllocSTagKind), u32(abi.AllocSTagMaxPages), result)
	case abi.OpRegMR:
		return f.regMRLocked(args, result)
	case abi.OpReregMR:
		return f.reregMRLocked(u32(abi.ReregMRSTag), keys.ReregFlags(u32(abi.ReregMRFlags)), args[abi.ReregMRReg:abi.ReregMRArgsSize])
	case abi.OpDeallocSTag:
		return f.deallocSTagLocked(u32(abi.NumArgsNum))
	case abi.OpRegDMAMR:
		return f.regDMAMRLocked(u32(abi.RegDMAPD), engine.Access(u32(abi.RegDMAAccess)), result)
	case abi.OpAttachMcast, abi.OpDetachMcast:
		return f.mcastLocked(op == abi.OpAttachMcast, u32(abi.McastQPN), [16]byte(args[abi.McastGID:abi.McastGID+16]))
	case abi.OpCreateEthRing:
		return f.createEthRingLocked(args[:abi.EthRingArgsSize])
	case abi.OpDestroyEthRing:
		return f.destroyEthRingLocked(args[abi.EthRingKind], result)
	case abi.OpSetAVTable:
		return f.setAVTableLocked(args[:abi.SetAVArgsSize])
	case abi.OpCreateEQ:
		return f.createEQLocked(args[:abi.CreateEQArgsSize], result)
	case abi.OpDestroyEQ:
		return f.destroyEQLocked(u32(abi.NumArgsNum))
	case abi.OpCreateCQ:
		return f.createCQLocked(args[:abi.CreateCQArgsSize], result)
	case abi.OpResizeCQ:
		return f.resizeCQLocked(u32(abi.ResizeCQNum), args[abi.ResizeCQQueue:abi.ResizeCQQueue+abi.QueueArgsSize])
	case abi.OpDestroyCQ:
		return f.destroyCQLocked(u32(abi.NumArgsNum))
	case abi.OpCreateQP:
		return f.createQPLocked(args[:abi.CreateQPArgsSize], result)
	case abi.OpModifyQP:
		return f.modifyQPLocked(u32(abi.ModifyQPNum), u32(abi.ModifyQPMask), args[abi.ModifyQPAttr:abi.ModifyQPArgsSize])
	case abi.OpQueryQP:
		return f.queryQPLocked(u32(abi.QueryQPNum), args[abi.QueryQPAttr:abi.QueryQPArgsSize])
	case abi.OpDestroyQP:
		return f.destroyQPLocked(u32(abi.NumArgsNum))
	case abi.OpCreateSRQ:
		return f.createSRQLocked(args[:abi.CreateSRQArgsSize], result)
	case abi.OpModifySRQ:
		return f.modifySRQLocked(u32(abi.ModifySRQNum), u32(abi.ModifySRQMask), u32(abi.ModifySRQLimit),
			args[abi.ModifySRQQueue:abi.ModifySRQQueue+abi.QueueArgsSize])
	case abi.OpQuerySRQ:
		return f.querySRQLocked(u32(abi.NumArgsNum), result)
	case abi.OpDestroySRQ:
		return f.destroySRQLocked(u32(abi.NumArgsNum))
	default:
		return errf(syscall.EOPNOTSUPP, "control command 0x%x", op)
	}
}

func (f *Function) pdLocked(pdn uint32) (*pdEntry, error) {
	p, ok := f.pds[pdn]
	if !ok {
		return nil, errf(syscall.ENOENT, "PD %d", pdn)
	}
	return p, nil
}

func (f *Function) allocSTagLocked(pdn, kind, maxPages uint32, result func(int, uint32)) error {
	p, err := f.pdLocked(pdn)
	if err != nil {
		return err
	}
	var stag uint32
	switch kind {
	case abi.STagFastRegMR:
		if maxPages == 0 || maxPages > abi.MaxMRPages {
			return errf(syscall.EINVAL, "a fast-register MR of %d pages, 1 to %d", maxPages, abi.MaxMRPages)
		}
		if err := f.roomForSTagLocked(false); err != nil {
			return err
		}
		if err := f.reservePagesLocked(maxPages); err != nil {
			return err
		}
		// The largest page a REG_MR work request may use bounds the region.
		mr, err := p.pd.AllocFastRegMR(uint64(maxPages) << 21)
		if err != nil {
			f.regPages -= uint64(maxPages)
			return err
		}
		stag = mr.LKey()
		f.keysMu.Lock()
		f.mrs[stag>>8] = mrEntry{mr: mr, pdn: pdn, pages: maxPages}
		f.keysMu.Unlock()
	case abi.STagMWType1, abi.STagMWType2A, abi.STagMWType2B:
		if err := f.roomForSTagLocked(true); err != nil {
			return err
		}
		typ := map[uint32]engine.MWType{abi.STagMWType1: engine.MWType1, abi.STagMWType2A: engine.MWType2A, abi.STagMWType2B: engine.MWType2}[kind]
		mw, err := p.pd.AllocMW(typ)
		if err != nil {
			return err
		}
		stag = mw.RKey()
		f.keysMu.Lock()
		f.mws[stag>>8] = mwEntry{mw: mw, pdn: pdn}
		f.keysMu.Unlock()
	default:
		return errf(syscall.EINVAL, "STag kind %d", kind)
	}
	p.uses++
	result(abi.ResultNum, stag)
	return nil
}

// reserveWRsLocked counts n more work-request slots against the device's cap: ENOMEM past it.
func (f *Function) reserveWRsLocked(n uint32) error {
	return reserve(&f.wrSlots, n, cmp.Or(f.cfg.MaxWorkRequests, DefaultMaxWorkRequests), "work-request slots")
}

// reserve adds n to *used unless that passes limit (ENOMEM).
func reserve(used *uint64, n uint32, limit uint64, what string) error {
	if *used+uint64(n) > limit {
		return errf(syscall.ENOMEM, "%d more %s; %d of %d in use", n, what, *used, limit)
	}
	*used += uint64(n)
	return nil
}

// roomForSTagLocked refuses an MR or a window past MAX_MR or MAX_MW.
func (f *Function) roomForSTagLocked(mw bool) error {
	n, what := len(f.mrs), "MRs"
	if mw {
		n, what = len(f.mws), "windows"
	}
	if n >= f.maxSTags(mw) {
		return errf(syscall.ENOMEM, "%d %s, at most %d", n, what, f.maxSTags(mw))
	}
	return nil
}

// reservePagesLocked counts n more registered pages against the device's cap: ENOMEM past it.
func (f *Function) reservePagesLocked(n uint32) error {
	return reserve(&f.regPages, n, cmp.Or(f.cfg.MaxRegisteredPages, DefaultMaxRegisteredPages), "registered pages")
}

// mrArgs are REG_MR's arguments, also REREG_MR's from its offset 8.
type mrArgs struct {
	pdn    uint32
	access engine.Access
	iova   uint64
	pages  engine.PageList
}

// decodeMRArgs reads REG_MR's arguments and resolves their page list, whose pages it counts
// against the device's cap (reservePagesLocked): on success the caller owns len(a.pages.Pages)
// reserved pages.
func (f *Function) decodeMRArgs(args []byte) (mrArgs, error) {
	le := binary.LittleEndian
	a := mrArgs{pdn: le.Uint32(args[abi.RegMRPD:]), access: engine.Access(le.Uint32(args[abi.RegMRAccess:])), iova: le.Uint64(args[abi.RegMRIOVA:])}
	pl := decodePageList(args[abi.RegMRPages:])
	if _, err := checkPageList(pl, abi.MaxMRPages); err != nil {
		return mrArgs{}, err // a malformed list is EINVAL, not ENOMEM for its count
	}
	if err := f.reservePagesLocked(pl.pages); err != nil {
		return mrArgs{}, err
	}
	pageSize, pages, err := resolvePages(&f.mem, pl, abi.MaxMRPages)
	if err != nil {
		f.regPages -= uint64(pl.pages)
		return mrArgs{}, err
	}
	a.pages = engine.PageList{PageSize: pageSize, Offset: le.Uint64(args[abi.RegMROffset:]), Length: le.Uint64(args[abi.RegMRLength:]), Pages: pages}
	return a, nil
}

func (f *Function) regMRLocked(args []byte, result func(int, uint32)) error {
	p, err := f.pdLocked(binary.LittleEndian.Uint32(args[abi.RegMRPD:]))
	if err != nil {
		return err
	}
	if err := f.roomForSTagLocked(false); err != nil {
		return err
	}
	a, err := f.decodeMRArgs(args)
	if err != nil {
		return err
	}
	n := uint32(len(a.pages.Pages))
	mr, err := p.pd.RegGuestMR(&f.mem, a.pages, a.iova, a.access)
	if err != nil {
		f.regPages -= uint64(n)
		return err
	}
	f.keysMu.Lock()
	f.mrs[mr.LKey()>>8] = mrEntry{mr: mr, pdn: a.pdn, pages: n}
	f.keysMu.Unlock()
	p.uses++
	result(abi.ResultNum, mr.LKey())
	return nil
}

// reregMRLocked changes an MR's translation, PD or access. The stag must be the MR's current
// one (a rereg keeps the keys); the arguments flags do not name are not read, so their page
// list need not be valid.
func (f *Function) reregMRLocked(stag uint32, flags keys.ReregFlags, args []byte) error {
	m, ok := f.mrs[stag>>8]
	if !ok || m.mr.LKey() != stag {
		return errf(syscall.EINVAL, "no MR with STag 0x%x", stag)
	}
	var a mrArgs
	le := binary.LittleEndian
	a.pdn, a.access = le.Uint32(args[abi.RegMRPD:]), engine.Access(le.Uint32(args[abi.RegMRAccess:]))
	var pd *engine.PD
	if flags&keys.ChangePD != 0 {
		p, err := f.pdLocked(a.pdn)
		if err != nil {
			return err
		}
		pd = p.pd
	}
	pages := m.pages
	if flags&keys.ChangeTranslation != 0 {
		// The new translation replaces the old: only the difference counts against the cap.
		f.regPages -= uint64(m.pages)
		var err error
		if a, err = f.decodeMRArgs(args); err != nil {
			f.regPages += uint64(m.pages)
			return err
		}
		pages = uint32(len(a.pages.Pages))
	}
	if err := m.mr.ReregGuest(flags, pd, &f.mem, a.pages, a.iova, a.access); err != nil {
		if flags&keys.ChangeTranslation != 0 {
			f.regPages = f.regPages - uint64(pages) + uint64(m.pages)
		}
		return err
	}
	pdn := m.pdn
	if flags&keys.ChangePD != 0 && a.pdn != m.pdn {
		f.pds[m.pdn].uses--
		f.pds[a.pdn].uses++
		pdn = a.pdn
	}
	f.keysMu.Lock()
	f.mrs[stag>>8] = mrEntry{mr: m.mr, pdn: pdn, pages: pages}
	f.keysMu.Unlock()
	return nil
}

// deallocSTagLocked frees the MR or window whose STag's index is stag's: the driver names the
// object it allocated, whose key8 may have moved since (a window's binds, a fast-register MR's
// REG_MR work requests).
func (f *Function) deallocSTagLocked(stag uint32) error {
	idx := stag >> 8
	if m, ok := f.mrs[idx]; ok {
		if err := m.mr.Dereg(); err != nil {
			return err
		}
		f.keysMu.Lock()
		delete(f.mrs, idx)
		f.keysMu.Unlock()
		f.pds[m.pdn].uses--
		f.regPages -= uint64(m.pages)
		return nil
	}
	if w, ok := f.mws[idx]; ok {
		if err := w.mw.Dealloc(); err != nil {
			return err
		}
		f.keysMu.Lock()
		delete(f.mws, idx)
		f.keysMu.Unlock()
		f.pds[w.pdn].uses--
		return nil
	}
	return errf(syscall.ENOENT, "STag 0x%x", stag)
}

// setAVTableLocked keeps the address-vector table the driver gave: whole 4 KiB pages of
// abi.AVEntrySize-byte entries, every page mapped. Zero entries removes it.
func (f *Function) setAVTableLocked(args []byte) error {
	n := binary.LittleEndian.Uint32(args[abi.SetAVEntries:])
	if n == 0 {
		f.avMu.Lock()
		f.av = nil
		f.avMu.Unlock()
		return nil
	}
	if n > abi.MaxAH {
		return errf(syscall.EINVAL, "%d address vectors, at most %d", n, abi.MaxAH)
	}
	pl := decodePageList(args[abi.SetAVPages:])
	if pl.shift != 12 {
		return errf(syscall.EINVAL, "an AV table in pages of 2^%d bytes (4 KiB only)", pl.shift)
	}
	perPage := uint32(4096 / abi.AVEntrySize)
	need := (n + perPage - 1) / perPage
	_, pages, err := resolvePages(&f.mem, pl, need)
	if err != nil {
		return err
	}
	if uint32(len(pages)) != need {
		return errf(syscall.EINVAL, "%d address vectors need %d pages, the list has %d", n, need, len(pages))
	}
	f.avMu.Lock()
	f.av = &avTable{pages: pages, entries: n}
	f.avMu.Unlock()
	return nil
}
