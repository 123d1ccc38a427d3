package hw

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// The function against a hostile guest: every number a guest writes into the control queue,
// a ring, a descriptor, a doorbell or a BAR, at the smallest and the largest value past its
// bound, gets the documented answer (an errno, an error completion, a counted drop, FATAL)
// without a panic, a hang or a large allocation, and the function then serves a well-behaved
// driver.

// maxAlloc is what an out-of-bound value may make the process allocate.
const maxAlloc = 1 << 20

// allocated runs fn and returns the bytes the process allocated meanwhile.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Where the hostile fixture's objects live: page tables from fxTables, rings from fxRings, one
// page each (the well-behaved traffic of trafficPair uses 0x110000-0x1a0fff).
const (
	fxTables = 0x1b0000
	fxRings  = 0x1c0000
	fxData   = 0x1e0000
)

// fixture is a function with one of each object a command can name.
type fixture struct {
	*bench
	pdn, cqn, qpn, srqn, mrKey uint32
	odpKey                     uint32 // an on-demand MR over fxODPPages pages at odpWire, made by onDemand
}

// fxODPPages is the size of the fixture's on-demand MR.
const fxODPPages = 4

// onDemand makes the fixture's page-fault EQ (ring 10) and on-demand MR once, and returns the MR's stag.
func (fx *fixture) onDemand() uint32 {
	if fx.odpKey == 0 {
		fx.ringAt(fx.ringPage(10), fx.table(10), 1, 4, 5)
		fx.ok(abi.OpCreateEQ, append(pageListBytes(fx.table(10), 1, 12, 1), 4, abi.EQPageFault, 5, 0))
		fx.odpKey = fx.ok(abi.OpRegMR, regMRArgs(fx.pdn, emu.AccessLocalWrite|emu.AccessOnDemand, odpWire, fxODPPages*4096, 0, pageListBytes(0, 0, 0, 0)))
	}
	return fx.odpKey
}

func (b *bench) table(i int) uint64 { return fxTables + uint64(i)*4096 }
func (b *bench) ringPage(i int) uint64 {
	return fxRings + uint64(i)*4096
}

// oneRing lays out ring i (one page at ringPage(i), listed in table(i)) for logCount entries of
// 2^logElem bytes and returns its QueueArgs.
func (b *bench) oneRing(i int, logCount, logElem uint8) []byte {
	b.ringAt(b.ringPage(i), b.table(i), 1, logCount, logElem)
	return queueArgs(logCount, logElem, b.table(i), 1)
}

func newFixture(t testing.TB) *fixture { return newFixtureWith(t, nil) }

func newFixtureWith(t testing.TB, set func(*Config)) *fixture {
	b := newBenchWith(t, set)
	b.enable()
	fx := &fixture{bench: b}
	fx.pdn = b.ok(abi.OpAllocPD, nil)
	fx.cqn = b.ok(abi.OpCreateCQ, fx.createCQArgs())
	fx.srqn = b.ok(abi.OpCreateSRQ, fx.createSRQArgs())
	fx.qpn = b.ok(abi.OpCreateQP, fx.createQPArgs())
	fx.mrKey = b.ok(abi.OpRegMR, fx.regMRArgs())
	return fx
}

func put(b []byte, off, size int, v uint64) {
	switch size {
	case 1:
		b[off] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[off:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b[off:], v)
	}
}

func (fx *fixture) createCQArgs() []byte {
	a := make([]byte, abi.CreateCQArgsSize)
	copy(a[abi.CreateCQQueue:], fx.oneRing(0, 4, 6))
	put(a, abi.CreateCQEQ, 4, abi.CQNoEQ)
	return a
}

func (fx *fixture) createSRQArgs() []byte {
	a := make([]byte, abi.CreateSRQArgsSize)
	put(a, abi.CreateSRQPD, 4, uint64(fx.pdn))
	put(a, abi.CreateSRQMaxSGE, 4, 4)
	copy(a[abi.CreateSRQQueue:], fx.oneRing(1, 4, rqLogElem))
	return a
}

func (fx *fixture) createQPArgs() []byte {
	a := make([]byte, abi.CreateQPArgsSize)
	put(a, abi.CreateQPPD, 4, uint64(fx.pdn))
	a[abi.CreateQPType] = abi.QPTypeRC
	put(a, abi.CreateQPSendCQ, 4, uint64(fx.cqn))
	put(a, abi.CreateQPRecvCQ, 4, uint64(fx.cqn))
	put(a, abi.CreateQPMaxInline, 4, 64)
	put(a, abi.CreateQPSendSGE, 2, 4)
	put(a, abi.CreateQPRecvSGE, 2, 4)
	copy(a[abi.CreateQPSQ:], fx.oneRing(2, 2, 9)) // 384 + 4 x 512: one page
	copy(a[abi.CreateQPRQ:], fx.oneRing(3, 3, rqLogElem))
	return a
}

func (fx *fixture) regMRArgs() []byte {
	binary.LittleEndian.PutUint64(fx.at(fx.table(4)), fxData)
	binary.LittleEndian.PutUint64(fx.at(fx.table(4)+8), fxData+4096)
	return regMRArgs(fx.pdn, emu.AccessLocalWrite, fxData, 8192, 0, pageListBytes(fx.table(4), 2, 12, 1))
}

// validArgs are arguments a well-behaved driver gives each command; the cases change one
// field of them.
func (fx *fixture) validArgs(op uint16) []byte {
	num := func(n uint32) []byte { return args(abi.NumArgsSize, arg{abi.NumArgsNum, 4, uint64(n)}) }
	with := func(a []byte, off int, b []byte) []byte {
		copy(a[off:], b)
		return a
	}
	switch op {
	case abi.OpQueryPort:
		return num(1)
	case abi.OpQueryGID:
		return args(abi.QueryGIDArgsSize, arg{abi.QueryGIDPort, 4, 1})
	case abi.OpCreateEQ:
		fx.ringAt(fx.ringPage(5), fx.table(5), 1, 4, 4)
		a := args(abi.CreateEQArgsSize, arg{abi.CreateEQLogCount, 1, 4}, arg{abi.CreateEQKind, 1, abi.EQCompletion},
			arg{abi.CreateEQVector, 2, 3})
		return with(a, abi.CreateEQPages, pageListBytes(fx.table(5), 1, 12, 1))
	case abi.OpSetAVTable:
		binary.LittleEndian.PutUint64(fx.at(fx.table(6)), fx.ringPage(6))
		return with(args(abi.SetAVArgsSize, arg{abi.SetAVEntries, 4, 64}), abi.SetAVPages, pageListBytes(fx.table(6), 1, 12, 1))
	case abi.OpAllocSTag:
		return args(abi.AllocSTagArgsSize, arg{abi.AllocSTagPD, 4, uint64(fx.pdn)}, arg{abi.AllocSTagKind, 4, abi.STagFastRegMR},
			arg{abi.AllocSTagMaxPages, 4, 4})
	case abi.OpRegMR:
		return fx.regMRArgs()
	case abi.OpRegDMAMR:
		return args(abi.RegDMAArgsSize, arg{abi.RegDMAPD, 4, uint64(fx.pdn)}, arg{abi.RegDMAAccess, 4, uint64(emu.AccessLocalWrite)})
	case abi.OpReregMR:
		a := args(abi.ReregMRArgsSize, arg{abi.ReregMRSTag, 4, uint64(fx.mrKey)},
			arg{abi.ReregMRFlags, 4, abi.ReregAccess | abi.ReregTranslation | abi.ReregPD})
		return with(a, abi.ReregMRReg, fx.regMRArgs())
	case abi.OpCreateCQ:
		return fx.createCQArgs()
	case abi.OpResizeCQ:
		return with(args(abi.ResizeCQArgsSize, arg{abi.ResizeCQNum, 4, uint64(fx.cqn)}), abi.ResizeCQQueue, fx.oneRing(7, 4, 6))
	case abi.OpCreateQP:
		return fx.createQPArgs()
	case abi.OpModifyQP:
		// RESET (or INIT) to INIT: valid again and again.
		return args(abi.ModifyQPArgsSize, arg{abi.ModifyQPNum, 4, uint64(fx.qpn)},
			arg{abi.ModifyQPMask, 4, uint64(emu.AttrState | emu.AttrPKeyIndex | emu.AttrPort | emu.AttrAccessFlags)},
			arg{abi.ModifyQPAttr + abi.QPAttrState, 1, uint64(emu.QPSInit)}, arg{abi.ModifyQPAttr + abi.QPAttrPortNum, 1, 1})
	case abi.OpQueryQP:
		return args(abi.QueryQPArgsSize, arg{abi.QueryQPNum, 4, uint64(fx.qpn)})
	case abi.OpCreateSRQ:
		return fx.createSRQArgs()
	case abi.OpModifySRQ:
		a := args(abi.ModifySRQArgsSize, arg{abi.ModifySRQNum, 4, uint64(fx.srqn)},
			arg{abi.ModifySRQMask, 4, abi.SRQModifyLimit | abi.SRQModifyMaxWR}, arg{abi.ModifySRQLimit, 4, 2})
		return with(a, abi.ModifySRQQueue, fx.oneRing(8, 4, rqLogElem))
	case abi.OpQuerySRQ:
		return num(fx.srqn)
	case abi.OpCreateEthRing:
		a := args(abi.EthRingArgsSize, arg{abi.EthRingKind, 1, abi.EthTX}, arg{abi.EthRingVector, 2, 4})
		return with(a, abi.EthRingQueue, fx.oneRing(9, 4, 4))
	case abi.OpMapPages:
		return mapArgs(fx.onDemand(), odpWire, pageListBytes(fxData, 1, 12, 0))
	case abi.OpUnmapPages:
		return unmapArgs(fx.onDemand(), odpWire, fxODPPages*4096)
	case abi.OpResumeQP:
		return args(abi.ResumeQPArgsSize, arg{abi.ResumeQPNum, 4, uint64(fx.qpn)}) // answered EINVAL: no fault holds it
	}
	return nil
}

// arg is one field of a command's arguments and the value a test gives it.
type arg struct {
	off, size int
	v         uint64
}

// args is size bytes of a command's arguments, zero but for the fields set.
func args(size int, fields ...arg) []byte {
	a := make([]byte, size)
	for _, f := range fields {
		put(a, f.off, f.size, f.v)
	}
	return a
}

// field is one guest-written number of a command's arguments.
type field struct {
	off, size int
}

// Page-list fields relative to where a PageList sits.
func plFields(at int) (addr, pages, shift, levels field) {
	return field{at + abi.PLAddr, 8}, field{at + abi.PLPages, 4}, field{at + abi.PLShift, 1}, field{at + abi.PLLevels, 1}
}

// ctrlCase is one out-of-bound value of one field of one command.
type ctrlCase struct {
	op    uint16
	name  string
	f     field
	v     uint64
	errno syscall.Errno
}

// ctrlCases lists, for every command, each field a guest writes at its smallest and largest
// value past its bound, with the errno docs/device.md gives for it.
func ctrlCases() []ctrlCase {
	var cs []ctrlCase
	add := func(op uint16, name string, f field, errno syscall.Errno, vs ...uint64) {
		for _, v := range vs {
			cs = append(cs, ctrlCase{op, name, f, v, errno})
		}
	}
	const u32max, u16max, u8max = math.MaxUint32, math.MaxUint16, math.MaxUint8
	inval, noent := syscall.EINVAL, syscall.ENOENT

	// A queue's arguments at offset at: its log sizes and its page list.
	queue := func(op uint16, at int, maxLog uint8, minElemLog uint8) {
		add(op, "log_count", field{at + abi.QueueLogCount, 1}, inval, 0, uint64(maxLog)+1, u8max)
		add(op, "log_elem", field{at + abi.QueueLogElem, 1}, inval, uint64(minElemLog)-1, abi.ElemMaxLog+1, u8max)
		addr, pages, shift, levels := plFields(at + abi.QueuePages)
		add(op, "pages", pages, inval, 0, u32max)
		add(op, "shift", shift, inval, 0, 11, 13, 20, 22, 63, 64, u8max)
		add(op, "levels", levels, inval, 3, u8max)
		// Misaligned and outside guest memory: EFAULT (TestPageListOutsideGuestMemory has
		// misaligned tables in it).
		add(op, "table_unmapped_misaligned", addr, syscall.EFAULT, 8, math.MaxUint64)
		add(op, "table_unmapped", addr, syscall.EFAULT, 0, 0xfffffffffffff000)
	}
	regMR := func(op uint16, at int) {
		add(op, "pd", field{at + abi.RegMRPD, 4}, noent, 0, u32max)
		// Access bits libibverbs does not define: the engine does not offer them.
		add(op, "access", field{at + abi.RegMRAccess, 4}, syscall.EOPNOTSUPP, 1<<31, u32max)
		add(op, "length", field{at + abi.RegMRLength, 8}, inval, 0, 8193, math.MaxUint64)
		add(op, "offset", field{at + abi.RegMROffset, 8}, inval, 4096, math.MaxUint64)
		addr, pages, shift, levels := plFields(at + abi.RegMRPages)
		add(op, "pages", pages, inval, 0, 1, abi.MaxMRPages+1, u32max)
		// A third page the table does not list: its entry, 0, is outside guest memory.
		add(op, "pages", pages, syscall.EFAULT, 3)
		add(op, "shift", shift, inval, 0, 11, 13, 63, 64, u8max)
		add(op, "levels", levels, inval, 0, 3, u8max)
		add(op, "table_unmapped_misaligned", addr, syscall.EFAULT, 8, math.MaxUint64)
		add(op, "table_unmapped", addr, syscall.EFAULT, 0, 0xfffffffffffff000)
	}
	num := field{abi.NumArgsNum, 4}

	add(abi.OpQueryPort, "port", field{abi.QueryPortPort, 4}, inval, 0, 2, u32max)
	add(abi.OpQueryGID, "port", field{abi.QueryGIDPort, 4}, inval, 0, 2, u32max)
	add(abi.OpQueryGID, "index", field{abi.QueryGIDIndex, 4}, inval, abi.GIDTableLen, u32max)

	add(abi.OpCreateEQ, "log_count", field{abi.CreateEQLogCount, 1}, inval, 0, abi.EQMaxLog+1, u8max)
	add(abi.OpCreateEQ, "kind", field{abi.CreateEQKind, 1}, inval, abi.EQPageFault+1, u8max)
	add(abi.OpCreateEQ, "vector", field{abi.CreateEQVector, 2}, inval, abi.NumVectors, u16max)
	addr, pages, shift, levels := plFields(abi.CreateEQPages)
	add(abi.OpCreateEQ, "pages", pages, inval, 0, u32max)
	add(abi.OpCreateEQ, "shift", shift, inval, 11, u8max)
	add(abi.OpCreateEQ, "levels", levels, inval, 3, u8max)
	add(abi.OpCreateEQ, "table_unmapped", addr, syscall.EFAULT, 0, 0xfffffffffffff000)
	add(abi.OpDestroyEQ, "eqn", num, noent, 0, u32max)

	add(abi.OpSetAVTable, "entries", field{abi.SetAVEntries, 4}, inval, 65, abi.MaxAH+1, u32max)
	addr, pages, shift, levels = plFields(abi.SetAVPages)
	add(abi.OpSetAVTable, "pages", pages, inval, 0, 2, u32max)
	add(abi.OpSetAVTable, "shift", shift, inval, 11, 13, 21, u8max)
	add(abi.OpSetAVTable, "levels", levels, inval, 3, u8max)
	add(abi.OpSetAVTable, "table_unmapped", addr, syscall.EFAULT, 0, 0xfffffffffffff000)

	add(abi.OpDeallocPD, "pdn", num, noent, 0, u32max)
	add(abi.OpAllocSTag, "pd", field{abi.AllocSTagPD, 4}, noent, 0, u32max)
	add(abi.OpAllocSTag, "kind", field{abi.AllocSTagKind, 4}, inval, 0, abi.STagMWType2B+1, u32max)
	add(abi.OpAllocSTag, "max_pages", field{abi.AllocSTagMaxPages, 4}, inval, 0, abi.MaxMRPages+1, u32max)
	regMR(abi.OpRegMR, 0)
	add(abi.OpReregMR, "stag", field{abi.ReregMRSTag, 4}, inval, 0, u32max)
	add(abi.OpReregMR, "flags", field{abi.ReregMRFlags, 4}, inval, 0, 8, u32max)
	regMR(abi.OpReregMR, abi.ReregMRReg)
	add(abi.OpDeallocSTag, "stag", num, noent, 0, u32max)
	add(abi.OpRegDMAMR, "pd", field{abi.RegDMAPD, 4}, noent, 0, u32max)
	add(abi.OpRegDMAMR, "access", field{abi.RegDMAAccess, 4}, inval, uint64(emu.AccessRemoteWrite), u32max)

	add(abi.OpMapPages, "stag", field{abi.MapPagesSTag, 4}, inval, 0, u32max)
	add(abi.OpMapPages, "va", field{abi.MapPagesVA, 8}, inval, 1, odpWire-4096, odpWire+fxODPPages*4096, math.MaxUint64)
	addr, pages, shift, levels = plFields(abi.MapPagesList)
	add(abi.OpMapPages, "pages", pages, inval, 0, 2, abi.MaxMRPages+1, u32max)
	add(abi.OpMapPages, "shift", shift, inval, 0, 11, 13, 21, 64, u8max)
	add(abi.OpMapPages, "levels", levels, inval, 3, u8max)
	add(abi.OpMapPages, "page_unmapped", addr, syscall.EFAULT, 0, 0x4000_0000, 0xfffffffffffff000)
	add(abi.OpUnmapPages, "stag", field{abi.UnmapPagesSTag, 4}, inval, 0, u32max)
	add(abi.OpResumeQP, "qpn", field{abi.ResumeQPNum, 4}, noent, 0, u32max)
	add(abi.OpResumeQP, "status", field{abi.ResumeQPStatus, 4}, inval, abi.ResumeMaxStatus+1, u32max)

	queue(abi.OpCreateCQ, abi.CreateCQQueue, abi.CQMaxLog, 6)
	add(abi.OpCreateCQ, "eqn", field{abi.CreateCQEQ, 4}, noent, 0, abi.CQNoEQ-1)
	add(abi.OpResizeCQ, "cqn", field{abi.ResizeCQNum, 4}, noent, 0, u32max)
	queue(abi.OpResizeCQ, abi.ResizeCQQueue, abi.CQMaxLog, 6)
	add(abi.OpDestroyCQ, "cqn", num, noent, 0, u32max)

	lim := emu.DefaultLimits
	add(abi.OpCreateQP, "pd", field{abi.CreateQPPD, 4}, noent, 0, u32max)
	add(abi.OpCreateQP, "type", field{abi.CreateQPType, 1}, syscall.EOPNOTSUPP, 0, abi.QPTypeUD+1, u8max)
	add(abi.OpCreateQP, "sig_all", field{abi.CreateQPSigAll, 1}, inval, 2, u8max)
	add(abi.OpCreateQP, "send_cq", field{abi.CreateQPSendCQ, 4}, noent, 0, u32max)
	add(abi.OpCreateQP, "recv_cq", field{abi.CreateQPRecvCQ, 4}, noent, 0, u32max)
	add(abi.OpCreateQP, "srq", field{abi.CreateQPSRQ, 4}, noent, u32max)
	add(abi.OpCreateQP, "max_inline", field{abi.CreateQPMaxInline, 4}, inval, uint64(lim.MaxInline)+1, u32max)
	add(abi.OpCreateQP, "max_send_sge", field{abi.CreateQPSendSGE, 2}, inval, uint64(lim.MaxSGE)+1, u16max)
	add(abi.OpCreateQP, "max_recv_sge", field{abi.CreateQPRecvSGE, 2}, inval, uint64(lim.MaxSGE)+1, u16max)
	queue(abi.OpCreateQP, abi.CreateQPSQ, ringLog(lim.MaxQPWR), 9)
	queue(abi.OpCreateQP, abi.CreateQPRQ, ringLog(lim.MaxQPWR), rqLogElem)

	add(abi.OpModifyQP, "qpn", field{abi.ModifyQPNum, 4}, noent, 0, u32max)
	add(abi.OpModifyQP, "mask", field{abi.ModifyQPMask, 4}, inval, 1<<31, u32max)
	add(abi.OpModifyQP, "state", field{abi.ModifyQPAttr + abi.QPAttrState, 1}, inval, uint64(emu.QPSErr)+1, u8max)
	add(abi.OpModifyQP, "port", field{abi.ModifyQPAttr + abi.QPAttrPortNum, 1}, inval, 0, 2, u8max)
	add(abi.OpModifyQP, "pkey_index", field{abi.ModifyQPAttr + abi.QPAttrPKeyIndex, 2}, inval, 1, u16max)
	add(abi.OpModifyQP, "access", field{abi.ModifyQPAttr + abi.QPAttrAccessFlags, 4}, inval, 1<<31, u32max)
	add(abi.OpQueryQP, "qpn", field{abi.QueryQPNum, 4}, noent, 0, u32max)
	add(abi.OpDestroyQP, "qpn", num, noent, 0, u32max)
	add(abi.OpAttachMcast, "qpn", field{abi.McastQPN, 4}, noent, 0, u32max)
	add(abi.OpDetachMcast, "qpn", field{abi.McastQPN, 4}, noent, 0, u32max)

	add(abi.OpCreateSRQ, "pd", field{abi.CreateSRQPD, 4}, noent, 0, u32max)
	add(abi.OpCreateSRQ, "max_sge", field{abi.CreateSRQMaxSGE, 4}, inval, 0, uint64(lim.MaxSGE)+1, u32max)
	add(abi.OpCreateSRQ, "limit", field{abi.CreateSRQLimit, 4}, inval, 16, u32max)
	queue(abi.OpCreateSRQ, abi.CreateSRQQueue, ringLog(lim.MaxSRQWR), rqLogElem)
	add(abi.OpModifySRQ, "srqn", field{abi.ModifySRQNum, 4}, noent, 0, u32max)
	add(abi.OpModifySRQ, "mask", field{abi.ModifySRQMask, 4}, inval, 0, 4, u32max)
	add(abi.OpModifySRQ, "limit", field{abi.ModifySRQLimit, 4}, inval, 16, u32max)
	queue(abi.OpModifySRQ, abi.ModifySRQQueue, ringLog(lim.MaxSRQWR), rqLogElem)
	add(abi.OpQuerySRQ, "srqn", num, noent, 0, u32max)
	add(abi.OpDestroySRQ, "srqn", num, noent, 0, u32max)

	add(abi.OpCreateEthRing, "kind", field{abi.EthRingKind, 1}, inval, abi.EthRX+1, u8max)
	add(abi.OpCreateEthRing, "vector", field{abi.EthRingVector, 2}, inval, abi.NumVectors, u16max)
	add(abi.OpCreateEthRing, "flags", field{abi.EthRingFlags, 4}, inval, abi.EthRingPromisc<<1, u32max)
	queue(abi.OpCreateEthRing, abi.EthRingQueue, abi.EthMaxLog, 4)
	add(abi.OpDestroyEthRing, "kind", field{abi.EthRingKind, 1}, noent, abi.EthRX+1, u8max)
	return cs
}

// Every command's every guest-written number past its bound, smallest and largest: the
// documented errno, a small allocation, and the function then serves a well-behaved driver.
func TestHostileControlCommands(t *testing.T) {
	fx := newFixture(t)
	// The valid arguments are valid: what fails below fails by the one field.
	for _, op := range []uint16{abi.OpQueryPort, abi.OpQueryGID, abi.OpCreateEQ, abi.OpSetAVTable, abi.OpAllocSTag,
		abi.OpRegMR, abi.OpRegDMAMR, abi.OpReregMR, abi.OpCreateCQ, abi.OpResizeCQ, abi.OpCreateQP, abi.OpModifyQP, abi.OpQueryQP,
		abi.OpCreateSRQ, abi.OpModifySRQ, abi.OpQuerySRQ, abi.OpCreateEthRing, abi.OpMapPages, abi.OpUnmapPages} {
		if errno, _ := fx.cmd(op, fx.validArgs(op)); errno != 0 {
			t.Fatalf("command 0x%x with valid arguments: %v", op, errno)
		}
		if op == abi.OpCreateEthRing {
			fx.ok(abi.OpDestroyEthRing, []byte{abi.EthTX})
		}
	}
	n := 0
	for _, c := range ctrlCases() {
		name := fmt.Sprintf("op_0x%02x_%s_%d", c.op, c.name, c.v)
		args := fx.validArgs(c.op)
		if args == nil {
			args = make([]byte, abi.CtrlEntrySize-abi.CtrlArgs)
		}
		put(args, c.f.off, c.f.size, c.v)
		var errno syscall.Errno
		if a := allocated(func() { errno, _ = fx.cmd(c.op, args) }); a > maxAlloc {
			t.Errorf("%s: allocated %d bytes", name, a)
		}
		if errno != c.errno {
			t.Errorf("%s: %v, want %v", name, errno, c.errno)
		}
		if c.op == abi.OpCreateEthRing && errno == 0 {
			fx.ok(abi.OpDestroyEthRing, []byte{abi.EthTX})
		}
		n++
	}
	if n < 200 {
		t.Fatalf("only %d cases", n)
	}
	t.Logf("%d out-of-bound values", n)
	// Opcodes and flags of the entry itself.
	for _, op := range []uint16{0, abi.OpQueryGID + 1, abi.OpDestroyEthRing + 1, math.MaxUint16} {
		if errno, _ := fx.cmd(op, nil); errno != syscall.EOPNOTSUPP {
			t.Errorf("opcode 0x%x: %v, want EOPNOTSUPP", op, errno)
		}
	}
	for _, fl := range []uint16{1, math.MaxUint16} {
		e := fx.at(ctrlQAt + uint64(fx.prod)*abi.CtrlEntrySize)
		clear(e[:abi.CtrlEntrySize])
		binary.LittleEndian.PutUint16(e[abi.CtrlOpcode:], abi.OpNop)
		binary.LittleEndian.PutUint16(e[abi.CtrlFlags:], fl)
		fx.prod = (fx.prod + 1) & (1<<ctrlLog - 1)
		fx.setReg(abi.RegCtrlQProd, fx.prod)
		if st := binary.LittleEndian.Uint32(e[abi.CtrlStatus:]); st != abi.CtrlDone|uint32(syscall.EINVAL) {
			t.Errorf("entry flags 0x%x: status 0x%x, want EINVAL", fl, st)
		}
	}
	fx.trafficPair()
}

// More EQs than MAX_EQ, more work-request slots, MRs, windows or registered pages than the
// function's caps: ENOMEM, and what an object held comes back when it goes.
func TestHostileTableLimits(t *testing.T) {
	fx := newFixture(t)
	var errno syscall.Errno
	for i := 0; errno == 0; i++ {
		errno, _ = fx.cmd(abi.OpCreateEQ, fx.validArgs(abi.OpCreateEQ))
		if errno == 0 && i >= abi.NumVectors {
			t.Fatalf("%d EQs made, RegMaxEQ is %d", i+1, fx.reg(abi.RegMaxEQ))
		}
	}
	if errno != syscall.ENOMEM {
		t.Fatalf("one EQ too many: %v, want ENOMEM", errno)
	}

	// Work-request slots: the fixture's SRQ (15) and QP (3 + 7) are 25 of 40; one more QP fits,
	// a second does not until one goes.
	fx = newFixtureWith(t, func(c *Config) { c.MaxWorkRequests = 40 })
	qp2 := fx.ok(abi.OpCreateQP, fx.createQPArgs())
	if errno, _ := fx.cmd(abi.OpCreateQP, fx.createQPArgs()); errno != syscall.ENOMEM {
		t.Fatalf("a QP past the work-request cap: %v, want ENOMEM", errno)
	}
	if errno, _ := fx.cmd(abi.OpCreateSRQ, fx.createSRQArgs()); errno != syscall.ENOMEM {
		t.Fatalf("an SRQ past the work-request cap: %v, want ENOMEM", errno)
	}
	grow := fx.validArgs(abi.OpModifySRQ) // 15 to 15: fits
	fx.ok(abi.OpModifySRQ, grow)
	fx.ringAt(fx.ringPage(8), fx.table(8), 2, 5, rqLogElem) // 31 slots of 128 bytes: two pages
	copy(grow[abi.ModifySRQQueue:], queueArgs(5, rqLogElem, fx.table(8), 2))
	binary.LittleEndian.PutUint64(fx.at(fx.table(8)+8), fx.ringPage(16))
	if errno, _ := fx.cmd(abi.OpModifySRQ, grow); errno != syscall.ENOMEM {
		t.Fatalf("an SRQ grown past the work-request cap: %v, want ENOMEM", errno)
	}
	fx.ok(abi.OpDestroyQP, u32s(qp2))
	fx.ok(abi.OpCreateQP, fx.createQPArgs())

	// MRs and windows: MAX_MR and MAX_MW, each.
	fx = newFixtureWith(t, func(c *Config) { c.MaxSTags = 3 })
	if fx.reg(abi.RegMaxMR) != 3 || fx.reg(abi.RegMaxMW) != 3 {
		t.Fatalf("MAX_MR %d, MAX_MW %d, want 3", fx.reg(abi.RegMaxMR), fx.reg(abi.RegMaxMW))
	}
	mw := fx.validArgs(abi.OpAllocSTag)
	put(mw, abi.AllocSTagKind, 4, abi.STagMWType2B)
	for range 3 {
		fx.ok(abi.OpAllocSTag, mw)
	}
	if errno, _ := fx.cmd(abi.OpAllocSTag, mw); errno != syscall.ENOMEM {
		t.Fatalf("a window past MAX_MW: %v, want ENOMEM", errno)
	}
	fx.ok(abi.OpRegMR, fx.regMRArgs()) // the fixture's MR and this one: 2 of 3
	fx.ok(abi.OpAllocSTag, fx.validArgs(abi.OpAllocSTag))
	if errno, _ := fx.cmd(abi.OpRegMR, fx.regMRArgs()); errno != syscall.ENOMEM {
		t.Fatalf("an MR past MAX_MR: %v, want ENOMEM", errno)
	}

	b := newBenchWith(t, func(c *Config) { c.MaxRegisteredPages = 6 })
	b.enable()
	fx = &fixture{bench: b}
	fx.pdn = b.ok(abi.OpAllocPD, nil)
	k1 := b.ok(abi.OpRegMR, fx.regMRArgs())                    // 2 pages
	k2 := b.ok(abi.OpAllocSTag, fx.validArgs(abi.OpAllocSTag)) // 4 more: 6
	if errno, _ := b.cmd(abi.OpRegMR, fx.regMRArgs()); errno != syscall.ENOMEM {
		t.Fatalf("past the cap: %v, want ENOMEM", errno)
	}
	if errno, _ := b.cmd(abi.OpAllocSTag, fx.validArgs(abi.OpAllocSTag)); errno != syscall.ENOMEM {
		t.Fatalf("a fast-register MR past the cap: %v, want ENOMEM", errno)
	}
	rereg := fx.validArgs(abi.OpReregMR)
	put(rereg, abi.ReregMRSTag, 4, uint64(k1))
	b.ok(abi.OpReregMR, rereg) // 2 pages for 2: still 6
	b.ok(abi.OpDeallocSTag, u32s(k2))
	b.ok(abi.OpDeallocSTag, u32s(k1))
	for range 3 {
		b.ok(abi.OpRegMR, fx.regMRArgs())
	}
	if errno, _ := b.cmd(abi.OpRegMR, fx.regMRArgs()); errno != syscall.ENOMEM {
		t.Fatalf("past the cap after deregistration: %v, want ENOMEM", errno)
	}
}

// The attributes of the INIT to RTR and RTR to RTS transitions past their bounds (IBTA's field
// widths, the device's limits, its one port and GID table): EINVAL, the QP left as it was.
func TestHostileQPAttributes(t *testing.T) {
	rtrMask := emu.AttrState | emu.AttrAV | emu.AttrPathMTU | emu.AttrDestQPN | emu.AttrRQPSN | emu.AttrMaxDestRdAtomic | emu.AttrMinRNRTimer
	rtsMask := emu.AttrState | emu.AttrSQPSN | emu.AttrTimeout | emu.AttrRetryCnt | emu.AttrRNRRetry | emu.AttrMaxQPRdAtomic
	const u8max, u32max = math.MaxUint8, math.MaxUint32
	rdAtom := uint64(emu.DefaultLimits.MaxQPRdAtom)
	for _, c := range []struct {
		rts  bool
		name string
		f    field
		vs   []uint64
	}{
		{false, "path_mtu", field{abi.QPAttrPathMTU, 1}, []uint64{0, uint64(emu.MTU4096) + 1, u8max}},
		{false, "dest_qpn", field{abi.QPAttrDestQPN, 4}, []uint64{1 << 24, u32max}},
		{false, "rq_psn", field{abi.QPAttrRQPSN, 4}, []uint64{1 << 24, u32max}},
		{false, "max_dest_rd_atomic", field{abi.QPAttrMaxDestRdAtom, 1}, []uint64{rdAtom + 1, u8max}},
		{false, "min_rnr_timer", field{abi.QPAttrMinRNRTimer, 1}, []uint64{32, u8max}},
		{false, "sgid_index", field{abi.QPAttrSGIDIndex, 1}, []uint64{abi.GIDTableLen, u8max}},
		{false, "flow_label", field{abi.QPAttrFlowLabel, 4}, []uint64{1 << 20, u32max}},
		{true, "timeout", field{abi.QPAttrTimeout, 1}, []uint64{32, u8max}},
		{true, "retry_cnt", field{abi.QPAttrRetryCnt, 1}, []uint64{8, u8max}},
		{true, "rnr_retry", field{abi.QPAttrRNRRetry, 1}, []uint64{8, u8max}},
		{true, "sq_psn", field{abi.QPAttrSQPSN, 4}, []uint64{1 << 24, u32max}},
		{true, "max_rd_atomic", field{abi.QPAttrMaxRdAtomic, 1}, []uint64{rdAtom + 1, u8max}},
	} {
		for _, v := range c.vs {
			t.Run(fmt.Sprintf("%s_%d", c.name, v), func(t *testing.T) {
				fx := newFixture(t)
				mod := func(mask emu.AttrMask, set func(x []byte)) syscall.Errno {
					a := make([]byte, abi.ModifyQPArgsSize)
					put(a, abi.ModifyQPNum, 4, uint64(fx.qpn))
					put(a, abi.ModifyQPMask, 4, uint64(mask))
					set(a[abi.ModifyQPAttr:])
					errno, _ := fx.cmd(abi.OpModifyQP, a)
					return errno
				}
				rtr := func(x []byte) {
					x[abi.QPAttrState], x[abi.QPAttrPathMTU], x[abi.QPAttrMaxDestRdAtom] = byte(emu.QPSRTR), byte(emu.MTU1024), 4
					x[abi.QPAttrMinRNRTimer], x[abi.QPAttrHopLimit] = emu.DefaultMinRNRTimer, 64
					put(x, abi.QPAttrDestQPN, 4, uint64(fx.qpn))
					g := netip.MustParseAddr("::ffff:192.0.2.1").As16()
					copy(x[abi.QPAttrDGID:], g[:])
				}
				rts := func(x []byte) {
					x[abi.QPAttrState], x[abi.QPAttrTimeout], x[abi.QPAttrRetryCnt] = byte(emu.QPSRTS), emu.DefaultTimeout, emu.DefaultRetryCnt
					x[abi.QPAttrRNRRetry], x[abi.QPAttrMaxRdAtomic] = emu.DefaultRNRRetry, 4
				}
				if e := mod(emu.AttrState|emu.AttrPKeyIndex|emu.AttrPort|emu.AttrAccessFlags, func(x []byte) {
					x[abi.QPAttrState], x[abi.QPAttrPortNum] = byte(emu.QPSInit), 1
				}); e != 0 {
					t.Fatalf("to INIT: %v", e)
				}
				mask, good, want := rtrMask, rtr, emu.QPSInit
				if c.rts {
					if e := mod(rtrMask, rtr); e != 0 {
						t.Fatalf("to RTR: %v", e)
					}
					mask, good, want = rtsMask, rts, emu.QPSRTR
				}
				if e := mod(mask, func(x []byte) { good(x); put(x, c.f.off, c.f.size, v) }); e != syscall.EINVAL {
					t.Fatalf("%v, want EINVAL", e)
				}
				if st := fx.f.qps[fx.qpn].emu.Query().State; st != want {
					t.Fatalf("the QP is %s after a refused modify, want %s", st, want)
				}
				if e := mod(mask, good); e != 0 {
					t.Fatalf("the same transition done right: %v", e)
				}
			})
		}
	}
}
