package hw

import (
	"cmp"
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
		if !f.runEntryLocked(r.ctrlQBase + uint64(r.ctrlQCons)*abi.CtrlEntrySize) {
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

// runEntryLocked runs the command in the entry at addr and writes its completion back: false
// if the entry is not in mapped guest memory.
func (f *Function) runEntryLocked(addr uint64) bool {
	var b [abi.CtrlEntrySize]byte
	if err := readGuest(&f.mem, addr, b[:]); err != nil {
		return false
	}
	e := abi.CtrlEntry(b[:])
	err := f.execLocked(e)
	if l := f.cfg.Log; l != nil {
		op := fmt.Sprintf("0x%02x", e.Opcode())
		if err != nil {
			l.Info("control command failed", "op", op, "errno", errnoOf(err), "err", err)
		} else {
			l.Debug("control command", "op", op)
		}
	}
	e.SetStatus(abi.CtrlDone | errnoOf(err))
	// Results (and a query's answer) first, then the status that says they are there.
	return writeGuest(&f.mem, addr+abi.CtrlResult, e.ResultBytes()) == nil &&
		writeGuest(&f.mem, addr+abi.CtrlStatus, e.StatusBytes()) == nil
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

// execLocked runs one command, writing its results (and a query's answer) into the entry.
func (f *Function) execLocked(e abi.CtrlEntry) error {
	if fl := e.Flags(); fl != 0 {
		return errf(syscall.EINVAL, "control entry flags 0x%x (reserved, 0)", fl)
	}
	run, ok := ctrlCommands[e.Opcode()]
	if !ok {
		return errf(syscall.EOPNOTSUPP, "control command 0x%x", e.Opcode())
	}
	return run(f, e)
}

// ctrlCommand runs one control command on its entry: it reads its arguments there and writes
// its results there.
type ctrlCommand func(f *Function, e abi.CtrlEntry) error

// ctrlCommands are the commands the function runs, by opcode; any other is EOPNOTSUPP.
var ctrlCommands = map[uint16]ctrlCommand{
	abi.OpNop:         func(*Function, abi.CtrlEntry) error { return nil },
	abi.OpQueryDevice: (*Function).queryDeviceLocked,
	abi.OpQueryPort:   (*Function).queryPortLocked,
	abi.OpQueryGID:    (*Function).queryGIDLocked,
	abi.OpAllocPD:     (*Function).allocPDLocked,
	abi.OpDeallocPD:   byNum((*Function).deallocPDLocked),
	abi.OpAllocSTag: func(f *Function, e abi.CtrlEntry) error {
		a := e.AllocSTagArgs()
		return f.allocSTagLocked(a.PD(), a.Kind(), a.MaxPages(), e.SetResult)
	},
	abi.OpRegMR: func(f *Function, e abi.CtrlEntry) error { return f.regMRLocked(e.RegMRArgs(), e.SetResult) },
	abi.OpReregMR: func(f *Function, e abi.CtrlEntry) error {
		a := e.ReregMRArgs()
		return f.reregMRLocked(a.STag(), keys.ReregFlags(a.Flags()), a.Reg())
	},
	abi.OpDeallocSTag: byNum((*Function).deallocSTagLocked),
	abi.OpRegDMAMR: func(f *Function, e abi.CtrlEntry) error {
		a := e.RegDMAArgs()
		return f.regDMAMRLocked(a.PD(), engine.Access(a.Access()), e.SetResult)
	},
	abi.OpMapPages:      func(f *Function, e abi.CtrlEntry) error { return f.mapPagesLocked(e.MapPagesArgs(), e.SetResult) },
	abi.OpUnmapPages:    func(f *Function, e abi.CtrlEntry) error { return f.unmapPagesLocked(e.UnmapPagesArgs(), e.SetResult) },
	abi.OpResumeQP:      func(f *Function, e abi.CtrlEntry) error { return f.resumeQPLocked(e.ResumeQPArgs()) },
	abi.OpAttachMcast:   mcastCommand(true),
	abi.OpDetachMcast:   mcastCommand(false),
	abi.OpCreateEthRing: func(f *Function, e abi.CtrlEntry) error { return f.createEthRingLocked(e.EthRingArgs()) },
	abi.OpDestroyEthRing: func(f *Function, e abi.CtrlEntry) error {
		return f.destroyEthRingLocked(e.EthRingArgs().Kind(), e.SetResult)
	},
	abi.OpSetAVTable: func(f *Function, e abi.CtrlEntry) error { return f.setAVTableLocked(e.SetAVArgs()) },
	abi.OpCreateEQ:   func(f *Function, e abi.CtrlEntry) error { return f.createEQLocked(e.CreateEQArgs(), e.SetResult) },
	abi.OpDestroyEQ:  byNum((*Function).destroyEQLocked),
	abi.OpCreateCQ:   func(f *Function, e abi.CtrlEntry) error { return f.createCQLocked(e.CreateCQArgs(), e.SetResult) },
	abi.OpResizeCQ: func(f *Function, e abi.CtrlEntry) error {
		a := e.ResizeCQArgs()
		return f.resizeCQLocked(a.Num(), a.Queue())
	},
	abi.OpDestroyCQ: byNum((*Function).destroyCQLocked),
	abi.OpModifyCQ: func(f *Function, e abi.CtrlEntry) error {
		a := e.ModifyCQArgs()
		return f.modifyCQLocked(a.Num(), a.Count(), a.Period())
	},
	abi.OpCreateQP: func(f *Function, e abi.CtrlEntry) error { return f.createQPLocked(e.CreateQPArgs(), e.SetResult) },
	abi.OpModifyQP: func(f *Function, e abi.CtrlEntry) error {
		a := e.ModifyQPArgs()
		return f.modifyQPLocked(a.Num(), a.Mask(), a.Attr())
	},
	abi.OpQueryQP: func(f *Function, e abi.CtrlEntry) error {
		a := e.QueryQPArgs()
		return f.queryQPLocked(a.Num(), a.Attr())
	},
	abi.OpDestroyQP: byNum((*Function).destroyQPLocked),
	abi.OpCreateSRQ: func(f *Function, e abi.CtrlEntry) error { return f.createSRQLocked(e.CreateSRQArgs(), e.SetResult) },
	abi.OpModifySRQ: func(f *Function, e abi.CtrlEntry) error {
		a := e.ModifySRQArgs()
		return f.modifySRQLocked(a.Num(), a.Mask(), a.Limit(), a.Queue())
	},
	abi.OpQuerySRQ:   func(f *Function, e abi.CtrlEntry) error { return f.querySRQLocked(e.NumArgs().Num(), e.SetResult) },
	abi.OpDestroySRQ: byNum((*Function).destroySRQLocked),
}

// byNum is a command whose arguments name one object (abi.NumArgs) and that answers nothing.
func byNum(run func(f *Function, num uint32) error) ctrlCommand {
	return func(f *Function, e abi.CtrlEntry) error { return run(f, e.NumArgs().Num()) }
}

// mcastCommand attaches a QP to a multicast group (attach) or detaches it.
func mcastCommand(attach bool) ctrlCommand {
	return func(f *Function, e abi.CtrlEntry) error {
		a := e.McastArgs()
		return f.mcastLocked(attach, a.QPN(), [16]byte(a.GID()))
	}
}

// queryDeviceLocked answers the registers CAPS to CTRLQ_MAX, in order, in the arguments.
func (f *Function) queryDeviceLocked(e abi.CtrlEntry) error {
	for i := range abi.QueryDeviceWords {
		e.SetQueryDeviceWord(i, f.readRegLocked(abi.RegCaps+4*uint32(i)))
	}
	e.SetResult(abi.ResultVersion, abi.Version)
	return nil
}

func (f *Function) queryPortLocked(e abi.CtrlEntry) error {
	if port := e.QueryPortArgs().Port(); port != 1 {
		return errf(syscall.EINVAL, "port %d (the function has port 1)", port)
	}
	e.SetResult(abi.ResultPortState, f.readRegLocked(abi.RegPortState))
	e.SetResult(abi.ResultPortMaxMTU, f.readRegLocked(abi.RegMaxMTU))
	e.SetResult(abi.ResultPortActiveMTU, uint32(cmp.Or(f.cfg.ActiveMTU, engine.MTU4096)))
	e.SetResult(abi.ResultPortGIDLen, abi.GIDTableLen)
	return nil
}

func (f *Function) queryGIDLocked(e abi.CtrlEntry) error {
	a := e.QueryGIDArgs()
	port, i := a.Port(), a.Index()
	switch {
	case port != 1:
		return errf(syscall.EINVAL, "port %d (the function has port 1)", port)
	case i >= abi.GIDTableLen:
		return errf(syscall.EINVAL, "GID index %d of %d", i, abi.GIDTableLen)
	}
	gid := a.GID()
	clear(gid)
	if f.regs.gidValid&(1<<i) != 0 {
		copy(gid, f.regs.gids[i][:])
		e.SetResult(abi.ResultGIDValid, 1)
	}
	return nil
}

func (f *Function) allocPDLocked(e abi.CtrlEntry) error {
	pd, err := f.dev.AllocPD()
	if err != nil {
		return err
	}
	f.nextPD++
	f.pds[f.nextPD] = &pdEntry{pd: pd}
	e.SetResult(abi.ResultNum, f.nextPD)
	return nil
}

func (f *Function) deallocPDLocked(pdn uint32) error {
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
}

func (f *Function) pdLocked(pdn uint32) (*pdEntry, error) { return find(f.pds, pdn, "PD") }

// find is the object numbered n in objs, or ENOENT naming it as what.
func find[T any](objs map[uint32]*T, n uint32, what string) (*T, error) {
	o, ok := objs[n]
	if !ok {
		return nil, errf(syscall.ENOENT, "%s %d", what, n)
	}
	return o, nil
}

// destroyFound finds object n of objs, has the engine destroy it with destroy and forgets it;
// then gone stops the object's own accesses and gives back what it held.
func destroyFound[T any](objs map[uint32]*T, n uint32, what string, destroy func(*T) error, gone func(*T)) error {
	o, err := find(objs, n, what)
	if err != nil {
		return err
	}
	if err := destroy(o); err != nil {
		return err
	}
	delete(objs, n)
	gone(o)
	return nil
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

// resolveReservedLocked resolves a page list whose pages count against the device's cap: a list
// malformed in itself is EINVAL before its count can be ENOMEM (reservePagesLocked), and one
// that does not resolve gives its reservation back. On success the caller owns pl.pages
// reserved pages.
func (f *Function) resolveReservedLocked(pl pageList) (pageSize uint64, pages []uint64, err error) {
	if _, err := checkPageList(pl, abi.MaxMRPages); err != nil {
		return 0, nil, err
	}
	if err := f.reservePagesLocked(pl.pages); err != nil {
		return 0, nil, err
	}
	if pageSize, pages, err = resolvePages(&f.mem, pl, abi.MaxMRPages); err != nil {
		f.regPages -= uint64(pl.pages)
	}
	return pageSize, pages, err
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
func (f *Function) decodeMRArgs(args abi.RegMRArgs) (mrArgs, error) {
	a := mrArgs{pdn: args.PD(), access: engine.Access(args.Access()), iova: args.IOVA()}
	pageSize, pages, err := f.resolveReservedLocked(decodePageList(args.Pages()))
	if err != nil {
		return mrArgs{}, err
	}
	a.pages = engine.PageList{PageSize: pageSize, Offset: args.Offset(), Length: args.Length(), Pages: pages}
	return a, nil
}

func (f *Function) regMRLocked(args abi.RegMRArgs, result func(int, uint32)) error {
	p, err := f.pdLocked(args.PD())
	if err != nil {
		return err
	}
	if err := f.roomForSTagLocked(false); err != nil {
		return err
	}
	if engine.Access(args.Access())&engine.AccessOnDemand != 0 {
		return f.regOnDemandLocked(p, args, result)
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
func (f *Function) reregMRLocked(stag uint32, flags keys.ReregFlags, args abi.RegMRArgs) error {
	m, ok := f.mrs[stag>>8]
	if !ok || m.mr.LKey() != stag {
		return errf(syscall.EINVAL, "no MR with STag 0x%x", stag)
	}
	if m.onDemand {
		return errf(syscall.EOPNOTSUPP, "rereg_mr of on-demand MR 0x%x", stag)
	}
	a := mrArgs{pdn: args.PD(), access: engine.Access(args.Access())}
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
		if m.onDemand {
			f.odpMRs--
		}
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
func (f *Function) setAVTableLocked(args abi.SetAVArgs) error {
	n := args.Entries()
	if n == 0 {
		f.avMu.Lock()
		f.av = nil
		f.avMu.Unlock()
		return nil
	}
	if n > abi.MaxAH {
		return errf(syscall.EINVAL, "%d address vectors, at most %d", n, abi.MaxAH)
	}
	pl := decodePageList(args.Pages())
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
