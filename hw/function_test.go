package hw

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/keys"
)

const (
	ramBase = 0x100000
	ctrlQAt = 0x100000 // the control queue's ring, in the first page of RAM
	ctrlLog = 4
)

// bench is a function on the simulator's clock with 1 MiB of guest RAM, driven the way a
// driver drives it: registers, the control queue in guest memory, the vectors it signals.
type bench struct {
	t    testing.TB
	sim  *emu.Sim
	f    *Function
	ram  []byte
	mu   sync.Mutex
	irqs []int
	prod uint32
}

func newBench(t testing.TB) *bench { return newBenchWith(t, nil) }

// newBenchWith is newBench with the config changed by set first.
func newBenchWith(t testing.TB, set func(*Config)) *bench {
	t.Helper()
	b := &bench{t: t, sim: emu.NewSim(), ram: make([]byte, 1<<20)}
	cfg := Config{Name: "fn", Clock: b.sim, IP: netip.MustParseAddr("192.0.2.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
		IRQ: func(v int) { b.mu.Lock(); b.irqs = append(b.irqs, v); b.mu.Unlock() }}
	if set != nil {
		set(&cfg)
	}
	b.f = New(cfg)
	if err := b.f.MapDMA(ramBase, b.ram); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bench) reg(off uint32) uint32 {
	b.t.Helper()
	var p [4]byte
	if err := b.f.RegionRead(abi.BARRegs, uint64(off), p[:]); err != nil {
		b.t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(p[:])
}

func (b *bench) setReg(off, v uint32) {
	b.t.Helper()
	var p [4]byte
	binary.LittleEndian.PutUint32(p[:], v)
	if err := b.f.RegionWrite(abi.BARRegs, uint64(off), p[:]); err != nil {
		b.t.Fatal(err)
	}
}

// enable does what a driver's probe does: bus mastering on, the control queue set up, the
// function enabled.
func (b *bench) enable() {
	b.t.Helper()
	must(b.t, b.f.ConfigWrite(pciCommand, []byte{cmdMemory | cmdBusMaster}))
	b.setReg(abi.RegCtrlQBaseL, ctrlQAt)
	b.setReg(abi.RegCtrlQBaseH, 0)
	b.setReg(abi.RegCtrlQLog, ctrlLog)
	b.setReg(abi.RegDevCtrl, abi.DevCtrlEnable)
	if s := b.reg(abi.RegDevStatus); s != abi.DevStatusReady {
		b.t.Fatalf("status 0x%x after enable", s)
	}
}

// ram returns the RAM at guest address addr.
func (b *bench) at(addr uint64) []byte { return b.ram[addr-ramBase:] }

// cmd runs one control command and returns its errno and results.
func (b *bench) cmd(op uint16, args []byte) (syscall.Errno, [4]uint32) {
	b.t.Helper()
	e := b.at(ctrlQAt + uint64(b.prod)*abi.CtrlEntrySize)[:abi.CtrlEntrySize]
	clear(e)
	binary.LittleEndian.PutUint16(e[abi.CtrlOpcode:], op)
	binary.LittleEndian.PutUint64(e[abi.CtrlCookie:], 0xc00c1e)
	copy(e[abi.CtrlArgs:], args)
	b.prod = (b.prod + 1) & (1<<ctrlLog - 1)
	b.mu.Lock()
	before := len(b.irqs)
	b.mu.Unlock()
	b.setReg(abi.RegCtrlQProd, b.prod)
	if cons := b.reg(abi.RegCtrlQCons); cons != b.prod {
		b.t.Fatalf("consumer index %d, producer %d", cons, b.prod)
	}
	st := binary.LittleEndian.Uint32(e[abi.CtrlStatus:])
	if st&abi.CtrlDone == 0 {
		b.t.Fatalf("command 0x%x not done: status 0x%x", op, st)
	}
	if binary.LittleEndian.Uint64(e[abi.CtrlCookie:]) != 0xc00c1e {
		b.t.Fatal("the device wrote the cookie")
	}
	b.mu.Lock()
	if len(b.irqs) != before+1 || b.irqs[before] != abi.CtrlVector {
		b.t.Fatalf("vectors %v after a command", b.irqs[before:])
	}
	b.mu.Unlock()
	var res [4]uint32
	for i := range res {
		res[i] = binary.LittleEndian.Uint32(e[abi.CtrlResult+4*i:])
	}
	return syscall.Errno(st &^ abi.CtrlDone), res
}

// ok runs a command that must succeed and returns its first result.
// modifyQP runs MODIFY_QP on q under mask, with the attributes set fills in.
func (b *bench) modifyQP(q *guestQP, mask emu.AttrMask, set func(attr []byte)) {
	b.t.Helper()
	a := make([]byte, 8+abi.QPAttrSize)
	binary.LittleEndian.PutUint32(a, q.qpn)
	binary.LittleEndian.PutUint32(a[4:], uint32(mask))
	set(a[8:])
	b.ok(abi.OpModifyQP, a)
}

func (b *bench) ok(op uint16, args []byte) uint32 {
	b.t.Helper()
	errno, res := b.cmd(op, args)
	if errno != 0 {
		b.t.Fatalf("command 0x%x: %v", op, errno)
	}
	return res[0]
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func u32s(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// regMRArgs encodes REG_MR's arguments.
func regMRArgs(pdn uint32, access emu.Access, iova, length, offset uint64, pl []byte) []byte {
	a := make([]byte, abi.RegMRPages+abi.PageListSize)
	binary.LittleEndian.PutUint32(a[abi.RegMRPD:], pdn)
	binary.LittleEndian.PutUint32(a[abi.RegMRAccess:], uint32(access))
	binary.LittleEndian.PutUint64(a[abi.RegMRIOVA:], iova)
	binary.LittleEndian.PutUint64(a[abi.RegMRLength:], length)
	binary.LittleEndian.PutUint64(a[abi.RegMROffset:], offset)
	copy(a[abi.RegMRPages:], pl)
	return a
}

func pageListBytes(addr uint64, pages uint32, shift, levels uint8) []byte {
	b := make([]byte, abi.PageListSize)
	binary.LittleEndian.PutUint64(b[abi.PLAddr:], addr)
	binary.LittleEndian.PutUint32(b[abi.PLPages:], pages)
	b[abi.PLShift], b[abi.PLLevels] = shift, levels
	return b
}

func TestIdentityAndRegisters(t *testing.T) {
	b := newBench(t)
	cfg := make([]byte, configSize)
	must(t, b.f.ConfigRead(0, cfg))
	if v, d := binary.LittleEndian.Uint16(cfg[0:]), binary.LittleEndian.Uint16(cfg[2:]); v != abi.PCIVendorID || d != abi.PCIDeviceID {
		t.Fatalf("IDs %04x:%04x", v, d)
	}
	if class := uint32(cfg[0x0b])<<16 | uint32(cfg[0x0a])<<8 | uint32(cfg[0x09]); class != abi.PCIClassCode {
		t.Fatalf("class 0x%06x", class)
	}
	// Capabilities: MSI-X (table and PBA in BAR 4, 16 vectors), then a PCIe endpoint.
	p := cfg[0x34]
	if cfg[p] != 0x11 || binary.LittleEndian.Uint16(cfg[p+2:])&0x7ff != abi.NumVectors-1 ||
		binary.LittleEndian.Uint32(cfg[p+4:]) != abi.MSIXTableOffset|abi.MSIXBar || binary.LittleEndian.Uint32(cfg[p+8:]) != abi.PBAOffset|abi.MSIXBar {
		t.Fatalf("MSI-X capability % x", cfg[p:p+12])
	}
	q := cfg[p+1]
	if cfg[q] != 0x10 || cfg[q+1] != 0 || binary.LittleEndian.Uint16(cfg[q+2:])&0xf0 != 0 {
		t.Fatalf("PCIe capability % x", cfg[q:q+4])
	}
	// Writes change only the writable bits.
	must(t, b.f.ConfigWrite(0, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}))
	must(t, b.f.ConfigRead(0, cfg[:6]))
	if !bytes.Equal(cfg[:6], []byte{0x34, 0x12, 0x52, 0x53, 0xff, 0x07}) {
		t.Fatalf("after writing ones: % x", cfg[:6])
	}
	if err := b.f.ConfigRead(configSize-2, make([]byte, 4)); err == nil {
		t.Fatal("a config read past the end succeeded")
	}

	for reg, want := range map[uint32]uint32{abi.RegMagic: abi.MagicValue, abi.RegVersion: abi.Version, abi.RegCaps: caps,
		abi.RegPageSizes: 1<<12 | 1<<21, abi.RegMaxQP: 4096, abi.RegMaxMTU: 5, abi.RegPortState: 1, abi.RegDevStatus: 0,
		abi.RegMACLo: 0x00000002, abi.RegMACHi: 0x0100} {
		if got := b.reg(reg); got != want {
			t.Errorf("register 0x%03x = 0x%x, want 0x%x", reg, got, want)
		}
	}
	// Unaligned and narrow accesses read zeros and write nothing; out-of-range ones fail.
	p2 := []byte{9, 9}
	must(t, b.f.RegionRead(abi.BARRegs, abi.RegMagic, p2))
	if p2[0] != 0 || p2[1] != 0 {
		t.Fatalf("a 2-byte read gave % x", p2)
	}
	if err := b.f.RegionRead(abi.BARRegs, abi.BARRegsSize, make([]byte, 4)); err == nil {
		t.Fatal("a read past BAR 0 succeeded")
	}
	if err := b.f.RegionWrite(1, 0, make([]byte, 4)); err == nil {
		t.Fatal("a write to BAR 1 succeeded")
	}
}

// lastArgs is the argument area of the last command's entry, where queries answer.
func (b *bench) lastArgs() []byte {
	at := ctrlQAt + uint64((b.prod-1)&(1<<ctrlLog-1))*abi.CtrlEntrySize
	return b.at(at + abi.CtrlArgs)[:abi.CtrlEntrySize-abi.CtrlArgs]
}

// QUERY_DEVICE answers with the capability registers, QUERY_PORT with the port's state and
// MTUs, QUERY_GID with the table the driver programmed; a port other than 1 or an index past
// the table is EINVAL.
func TestControlQueueQueries(t *testing.T) {
	b := newBenchWith(t, func(c *Config) { c.ActiveMTU = emu.MTU1024 })
	b.enable()
	if v := b.ok(abi.OpQueryDevice, nil); v != abi.Version {
		t.Fatalf("QUERY_DEVICE version 0x%x", v)
	}
	answer := bytes.Clone(b.lastArgs())
	for i := range abi.QueryDeviceWords {
		off := abi.RegCaps + 4*uint32(i)
		if got, want := binary.LittleEndian.Uint32(answer[4*i:]), b.reg(off); got != want {
			t.Errorf("QUERY_DEVICE word %d: 0x%x, register 0x%x reads 0x%x", i, got, off, want)
		}
	}
	if binary.LittleEndian.Uint32(answer) != caps || binary.LittleEndian.Uint32(answer[4*(abi.QueryDeviceWords-1):]) != abi.CtrlQMaxLog {
		t.Fatalf("QUERY_DEVICE answer % x", answer[:8])
	}

	_, res := b.cmd(abi.OpQueryPort, u32s(1))
	if want := [4]uint32{4, uint32(emu.MTU4096), uint32(emu.MTU1024), abi.GIDTableLen}; res != want {
		t.Fatalf("QUERY_PORT: %v, want %v (ACTIVE, max 4096, active 1024, %d GIDs)", res, want, abi.GIDTableLen)
	}

	gid := netip.MustParseAddr("fe80::ff:fe00:1").As16()
	for i := range 4 {
		b.setReg(abi.RegGIDTable+uint32(16*3+4*i), binary.LittleEndian.Uint32(gid[4*i:]))
	}
	b.setReg(abi.RegGIDValid, 1<<3)
	if valid := b.ok(abi.OpQueryGID, u32s(1, 3)); valid != 1 || !bytes.Equal(b.lastArgs()[abi.QueryGIDOffset:][:16], gid[:]) {
		t.Fatalf("QUERY_GID 3: valid %d, % x", valid, b.lastArgs()[abi.QueryGIDOffset:][:16])
	}
	// An entry the driver did not mark valid answers zero, whatever the table holds.
	b.setReg(abi.RegGIDValid, 0)
	if valid := b.ok(abi.OpQueryGID, u32s(1, 3)); valid != 0 || !bytes.Equal(b.lastArgs()[abi.QueryGIDOffset:][:16], make([]byte, 16)) {
		t.Fatalf("QUERY_GID of an invalid entry: valid %d, % x", valid, b.lastArgs()[abi.QueryGIDOffset:][:16])
	}
	for _, c := range []struct {
		name string
		op   uint16
		args []byte
	}{
		{"port_0", abi.OpQueryPort, u32s(0)},
		{"port_2", abi.OpQueryPort, u32s(2)},
		{"gid_port_2", abi.OpQueryGID, u32s(2, 0)},
		{"gid_index_past_table", abi.OpQueryGID, u32s(1, abi.GIDTableLen)},
	} {
		if errno, _ := b.cmd(c.op, c.args); errno != syscall.EINVAL {
			t.Errorf("%s: %v, want EINVAL", c.name, errno)
		}
	}
}

// The control queue: PD, an MR registered from a two-page list with an offset, a window, their
// errors, and a WRITE through the MR's rkey landing in the right guest pages.
func TestControlQueueKeys(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	if pdn != 1 {
		t.Fatalf("first PD %d", pdn)
	}
	// The MR: 6000 bytes from offset 0x100 of page 0x150000, then page 0x140000 (out of order).
	binary.LittleEndian.PutUint64(b.at(0x110000), 0x150000)
	binary.LittleEndian.PutUint64(b.at(0x110008), 0x140000)
	all := emu.AccessLocalWrite | emu.AccessRemoteWrite | emu.AccessRemoteRead | emu.AccessMWBind
	stag := b.ok(abi.OpRegMR, regMRArgs(pdn, all, 0x7000_0100, 6000, 0x100, pageListBytes(0x110000, 2, 12, 1)))
	mr, found := b.f.Device().MR(stag)
	if !found || mr.Addr() != 0x7000_0100 || mr.Len() != 6000 {
		t.Fatalf("MR 0x%x found %v", stag, found)
	}

	// A QP of the engine in the same PD writes through the rkey (over the loopback): the
	// bytes land from 0x150100 to the end of that page, then at 0x140000.
	b.writeThrough(t, pdn, mr, stag, 6000, emu.WCSuccess)
	if !bytes.Equal(b.at(0x150100)[:0xf00], bytes.Repeat([]byte{0xab}, 0xf00)) ||
		!bytes.Equal(b.at(0x140000)[:6000-0xf00], bytes.Repeat([]byte{0xab}, 6000-0xf00)) {
		t.Fatal("the WRITE did not land in the MR's guest pages")
	}
	if b.at(0x1500ff)[0] != 0 || b.at(0x140000 + 6000 - 0xf00)[0] != 0 {
		t.Fatal("the WRITE touched bytes outside the MR")
	}

	// Errors, each with its errno.
	for _, c := range []struct {
		name  string
		op    uint16
		args  []byte
		errno syscall.Errno
	}{
		{"unknown_command", 0x7f, nil, syscall.EOPNOTSUPP},
		{"reg_mr_unknown_pd", abi.OpRegMR, regMRArgs(9, all, 0, 4096, 0, pageListBytes(0x150000, 1, 12, 0)), syscall.ENOENT},
		{"reg_mr_table_unmapped", abi.OpRegMR, regMRArgs(pdn, all, 0, 8192, 0, pageListBytes(0x900000, 2, 12, 1)), syscall.EFAULT},
		{"reg_mr_page_unmapped", abi.OpRegMR, regMRArgs(pdn, all, 0, 4096, 0, pageListBytes(0x900000, 1, 12, 0)), syscall.EFAULT},
		{"reg_mr_bad_page_size", abi.OpRegMR, regMRArgs(pdn, all, 0, 4096, 0, pageListBytes(0x150000, 1, 13, 0)), syscall.EINVAL},
		{"reg_mr_remote_write_without_local", abi.OpRegMR, regMRArgs(pdn, emu.AccessRemoteWrite, 0, 4096, 0, pageListBytes(0x150000, 1, 12, 0)), syscall.EINVAL},
		{"alloc_stag_bad_kind", abi.OpAllocSTag, u32s(pdn, 9, 0), syscall.EINVAL},
		{"dealloc_unknown_stag", abi.OpDeallocSTag, u32s(0x123400), syscall.ENOENT},
		{"dealloc_pd_in_use", abi.OpDeallocPD, u32s(pdn), syscall.EBUSY},
		{"dealloc_unknown_pd", abi.OpDeallocPD, u32s(77), syscall.ENOENT},
	} {
		if errno, _ := b.cmd(c.op, c.args); errno != c.errno {
			t.Errorf("%s: %v, want %v", c.name, errno, c.errno)
		}
	}

	// Windows of each type; a fast-register MR; all freed, then the PD.
	var stags []uint32
	for _, kind := range []uint32{abi.STagMWType1, abi.STagMWType2A, abi.STagMWType2B, abi.STagFastRegMR} {
		stags = append(stags, b.ok(abi.OpAllocSTag, u32s(pdn, kind, 4)))
	}
	dev := b.f.Device()
	if w, ok := dev.MW(stags[2]); !ok || w.Type() != emu.MWType2 {
		t.Fatalf("type 2B window 0x%x: %v", stags[2], ok)
	}
	for _, s := range append(stags, stag) {
		b.ok(abi.OpDeallocSTag, u32s(s))
	}
	b.ok(abi.OpDeallocPD, u32s(pdn))
	if _, ok := dev.MR(stag); ok {
		t.Fatal("the MR outlived DEALLOC_STAG")
	}
}

// reregArgs encodes REREG_MR's arguments: the stag, the flags, then REG_MR's.
func reregArgs(stag uint32, flags keys.ReregFlags, mr []byte) []byte {
	return append(u32s(stag, uint32(flags)), mr...)
}

// REREG_MR over guest memory: new pages and a new iova under the same key, rights taken away
// and given back, the MR moved to another PD (which then holds it), and each refusal with its
// errno leaving the MR as it was.
func TestControlQueueReregMR(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn, pdn2 := b.ok(abi.OpAllocPD, nil), b.ok(abi.OpAllocPD, nil)
	all := emu.AccessLocalWrite | emu.AccessRemoteWrite | emu.AccessRemoteRead
	binary.LittleEndian.PutUint64(b.at(0x110000), 0x150000)
	stag := b.ok(abi.OpRegMR, regMRArgs(pdn, all, 0x7000_0000, 4096, 0, pageListBytes(0x110000, 1, 12, 1)))
	mr, _ := b.f.Device().MR(stag)
	b.writeThrough(t, pdn, mr, stag, 4096, emu.WCSuccess)
	clear(b.at(0x150000)[:4096])

	// New translation: 3000 bytes from offset 0x80 of page 0x140000, at iova 0x9000_0080.
	b.ok(abi.OpReregMR, reregArgs(stag, keys.ChangeTranslation, regMRArgs(0, 0, 0x9000_0080, 3000, 0x80, pageListBytes(0x140000, 1, 12, 0))))
	if mr.Addr() != 0x9000_0080 || mr.Len() != 3000 {
		t.Fatalf("after rereg the MR is at 0x%x, %d bytes", mr.Addr(), mr.Len())
	}
	b.writeThrough(t, pdn, mr, stag, 3000, emu.WCSuccess)
	if !bytes.Equal(b.at(0x140080)[:3000], bytes.Repeat([]byte{0xab}, 3000)) || b.at(0x140080 + 3000)[0] != 0 {
		t.Fatal("the WRITE did not land in the new pages")
	}
	if !bytes.Equal(b.at(0x150000)[:4096], make([]byte, 4096)) {
		t.Fatal("the WRITE reached the MR's old page")
	}

	// Rights: without REMOTE_WRITE the WRITE is refused; with it again it goes through.
	b.ok(abi.OpReregMR, reregArgs(stag, keys.ChangeAccess, regMRArgs(0, emu.AccessLocalWrite, 0, 0, 0, nil)))
	b.writeThrough(t, pdn, mr, stag, 16, emu.WCRemAccessErr)
	b.ok(abi.OpReregMR, reregArgs(stag, keys.ChangeAccess, regMRArgs(0, all, 0, 0, 0, nil)))
	b.writeThrough(t, pdn, mr, stag, 16, emu.WCSuccess)

	// Refusals, each leaving the MR usable from pdn.
	fr := b.ok(abi.OpAllocSTag, u32s(pdn, abi.STagFastRegMR, 4))
	for _, c := range []struct {
		name  string
		args  []byte
		errno syscall.Errno
	}{
		{"unknown_stag", reregArgs(0x4200, keys.ChangeAccess, regMRArgs(0, all, 0, 0, 0, nil)), syscall.EINVAL},
		{"stale_key8", reregArgs(stag+1, keys.ChangeAccess, regMRArgs(0, all, 0, 0, 0, nil)), syscall.EINVAL},
		{"no_flags", reregArgs(stag, 0, regMRArgs(0, all, 0, 0, 0, nil)), syscall.EINVAL},
		{"unknown_flag", reregArgs(stag, 8, regMRArgs(0, all, 0, 0, 0, nil)), syscall.EINVAL},
		{"unknown_pd", reregArgs(stag, keys.ChangePD, regMRArgs(77, 0, 0, 0, 0, nil)), syscall.ENOENT},
		{"remote_write_without_local", reregArgs(stag, keys.ChangeAccess, regMRArgs(0, emu.AccessRemoteWrite, 0, 0, 0, nil)), syscall.EINVAL},
		{"page_unmapped", reregArgs(stag, keys.ChangeTranslation, regMRArgs(0, 0, 0x5000, 4096, 0, pageListBytes(0x900000, 1, 12, 0))), syscall.EFAULT},
		{"fast_register_mr", reregArgs(fr, keys.ChangeAccess, regMRArgs(0, all, 0, 0, 0, nil)), syscall.EINVAL},
	} {
		if errno, _ := b.cmd(abi.OpReregMR, c.args); errno != c.errno {
			t.Errorf("%s: %v, want %v", c.name, errno, c.errno)
		}
	}
	b.writeThrough(t, pdn, mr, stag, 3000, emu.WCSuccess)

	// Another PD: QPs of the old one lose the rkey, the old PD can go, the new one holds the MR.
	b.ok(abi.OpDeallocSTag, u32s(fr))
	b.ok(abi.OpReregMR, reregArgs(stag, keys.ChangePD, regMRArgs(pdn2, 0, 0, 0, 0, nil)))
	b.writeThrough(t, pdn2, mr, stag, 16, emu.WCSuccess)
	b.writeThrough(t, pdn, mr, stag, 16, emu.WCRemAccessErr)
	b.ok(abi.OpDeallocPD, u32s(pdn))
	if errno, _ := b.cmd(abi.OpDeallocPD, u32s(pdn2)); errno != syscall.EBUSY {
		t.Fatalf("DEALLOC_PD of the PD holding the MR: %v", errno)
	}
	b.ok(abi.OpDeallocSTag, u32s(stag))
	b.ok(abi.OpDeallocPD, u32s(pdn2))
}

// writeThrough RDMA-WRITEs n bytes of 0xab to the MR's first byte through rkey from a QP of
// the engine in the function's PD pdn, to another on the same device, and checks the
// completion.
func (b *bench) writeThrough(t *testing.T, pdn uint32, mr *emu.MR, rkey uint32, n int, want emu.WCStatus) {
	t.Helper()
	dev := b.f.Device()
	pd := b.f.pds[pdn].pd
	cq, err := dev.CreateCQ(16)
	must(t, err)
	mk := func() *emu.QP {
		qp, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: emu.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		return qp
	}
	// Two QPs of the device, so that a refusal fails the responder's QP and the requester
	// hears the NAK (one QP connected to itself would flush its own request).
	qp, peer := mk(), mk()
	must(t, emu.ConnectRC(qp, peer, emu.ConnectOptions{}))
	src, err := pd.RegMR(bytes.Repeat([]byte{0xab}, n), emu.AccessLocalWrite)
	must(t, err)
	must(t, qp.PostSend(emu.SendWR{ID: 1, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
		SGL: []emu.SGE{{Addr: src.Addr(), Length: uint32(n), LKey: src.LKey()}}, RemoteAddr: mr.Addr(), RKey: rkey}))
	b.sim.RunUntilIdle(0)
	wc := make([]emu.WC, 1)
	if cq.Poll(wc) != 1 || wc[0].Status != want {
		t.Fatalf("WRITE completion %+v, want %s", wc[0], want)
	}
}

// Both resets forget everything the driver made: registers back to power-on, no engine, the
// old queues' doorbells inert (a WQE left in an old ring is never fetched, nothing is written),
// the old MR's key unknown to the new engine, numbering from 1 again. The function-level reset
// (DEVICE_RESET, a client leaving) also returns config space to power-on; DEV_CTRL's keeps it,
// as a NIC's own reset does.
func TestResetForgetsEverything(t *testing.T) {
	for _, c := range []struct {
		name   string
		reset  func(b *bench)
		cmdReg byte // the command register after the reset
	}{
		{"dev_ctrl", func(b *bench) { b.setReg(abi.RegDevCtrl, abi.DevCtrlReset) }, cmdMemory | cmdBusMaster},
		{"function", func(b *bench) { b.f.Reset() }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBench(t)
			must(t, b.f.ConfigWrite(msixControl+1, []byte{0x80}))
			b.enable()
			b.setReg(abi.RegMACLo, 0x0a0b0c0d)
			_, q1, key, mr := b.trafficPair()

			c.reset(b)
			for _, r := range []uint32{abi.RegDevStatus, abi.RegDevCtrl, abi.RegCtrlQLog, abi.RegCtrlQCons, abi.RegGIDValid, abi.RegFatalCode} {
				if v := b.reg(r); v != 0 {
					t.Errorf("register 0x%x = 0x%x after reset", r, v)
				}
			}
			if mac := b.reg(abi.RegMACLo); mac != 0x00000002 {
				t.Errorf("MAC_LO 0x%x after reset, want the power-on 0x2", mac)
			}
			if b.f.Device() != nil {
				t.Fatal("an engine after reset")
			}
			cfg := make([]byte, configSize)
			must(t, b.f.ConfigRead(0, cfg))
			if cfg[pciCommand] != c.cmdReg || c.cmdReg == 0 && cfg[msixControl+1] != 0 {
				t.Fatalf("command register 0x%x, MSI-X control 0x%x after reset", cfg[pciCommand], cfg[msixControl+1])
			}

			// The driver's rings are still in guest memory: a WQE posted in the old send queue and
			// its doorbell rung, before and after the next enable, reach nothing.
			before := bytes.Clone(b.ram)
			b.postWrite(q1, 2, key)
			must(t, b.f.ConfigWrite(pciCommand, []byte{cmdMemory | cmdBusMaster}))
			b.prod = 0
			b.enable()
			if pdn := b.ok(abi.OpAllocPD, nil); pdn != 1 {
				t.Fatalf("first PD after reset %d", pdn)
			}
			var p [4]byte
			must(t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.SQDoorbell(q1.slot)), p[:]))
			b.sim.RunUntilIdle(0)
			// Only what the test wrote differs: the WQE, the producer index, the control queue.
			b.unchangedBut(before, [2]uint64{q1.sq + abi.QHProducer, 4}, [2]uint64{q1.sq + abi.QueueHeaderSize + 1<<sqLogElem, 1 << sqLogElem},
				[2]uint64{ctrlQAt, abi.CtrlEntrySize})
			// The old MR's key means nothing to the new engine.
			b.writeThrough(t, 1, mr, key, 64, emu.WCRemAccessErr)
		})
	}
}

// Ringing the control queue without bus mastering, or with a ring outside guest memory, is
// fatal: the function says why in FATAL_CODE and with DEVICE_FATAL on the async EQ (its
// vector signalled), and does nothing more; with bus mastering off it writes nothing.
func TestControlQueueFatal(t *testing.T) {
	for _, c := range []struct {
		name string
		prep func(b *bench)
		code uint32
	}{
		{"no_bus_master", func(b *bench) { must(b.t, b.f.ConfigWrite(pciCommand, []byte{cmdMemory})) }, abi.FatalBusMaster},
		{"ring_unmapped", func(b *bench) { b.setReg(abi.RegCtrlQBaseL, 0x800000) }, abi.FatalCtrlQDMA},
		{"ring_misaligned", func(b *bench) { b.setReg(abi.RegCtrlQBaseL, ctrlQAt+64) }, abi.FatalCtrlQSetup},
		{"ring_too_big", func(b *bench) { b.setReg(abi.RegCtrlQLog, abi.CtrlQMaxLog+1) }, abi.FatalCtrlQSetup},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBench(t)
			b.enable()
			b.ringAt(0x130000, 0x111000, 1, 3, 4)
			b.ok(abi.OpCreateEQ, append(pageListBytes(0x111000, 1, 12, 1), 3, abi.EQAsync, 1, 0))
			c.prep(b)
			b.setReg(abi.RegCtrlQProd, b.prod+1)
			if s, code := b.reg(abi.RegDevStatus), b.reg(abi.RegFatalCode); s != abi.DevStatusFatal || code != c.code {
				t.Fatalf("status 0x%x code %d, want fatal %d", s, code, c.code)
			}
			prod, e := binary.LittleEndian.Uint32(b.at(0x130000+abi.QHProducer)), b.at(0x130000+abi.QueueHeaderSize)
			if c.code == abi.FatalBusMaster {
				if prod != 0 || b.sawVector(1) {
					t.Fatalf("with bus mastering off the function wrote %d EQ entries", prod)
				}
			} else if prod != 1 || e[abi.EQType] != uint8(emu.AsyncDeviceFatal) || !b.sawVector(1) {
				t.Fatalf("async EQ: producer %d, entry % x, vector 1 signalled %v", prod, e[:16], b.sawVector(1))
			}
		})
	}
}

// benchWithSecondRegion is an enabled bench with a PD and 64 KiB more guest memory mapped at
// 0x4000_0000, for tests that unmap it again.
func benchWithSecondRegion(t *testing.T) (b *bench, second []byte, pdn uint32) {
	b = newBench(t)
	b.enable()
	second = make([]byte, 1<<16)
	must(t, b.f.MapDMA(0x4000_0000, second))
	return b, second, b.ok(abi.OpAllocPD, nil)
}

// UnmapDMA of memory an MR uses revokes the MR first: the next WRITE through its rkey fails
// REM_ACCESS_ERR and the memory, once handed back, is not touched.
func TestUnmapRevokesMRs(t *testing.T) {
	b, second, pdn := benchWithSecondRegion(t)
	all := emu.AccessLocalWrite | emu.AccessRemoteWrite
	stag := b.ok(abi.OpRegMR, regMRArgs(pdn, all, 0x9000, 4096, 0, pageListBytes(0x4000_1000, 1, 12, 0)))
	mr, _ := b.f.Device().MR(stag)
	b.writeThrough(t, pdn, mr, stag, 64, emu.WCSuccess)
	if second[0x1000] != 0xab {
		t.Fatal("the first WRITE did not land")
	}
	must(t, b.f.UnmapDMA(0x4000_0000, 1<<16))
	before := bytes.Clone(second)
	b.writeThrough(t, pdn, mr, stag, 64, emu.WCRemAccessErr)
	if !bytes.Equal(second, before) {
		t.Fatal("memory changed after UnmapDMA returned")
	}
	if !mr.Revoked() {
		t.Fatal("the MR is not revoked")
	}
	// The guest still deregisters it.
	b.ok(abi.OpDeallocSTag, u32s(stag))
}

// FuzzControlCommand: any 128 bytes as a command complete with a status (done, an errno) and
// the function keeps serving; nothing panics, nothing outside guest memory is touched.
func FuzzControlCommand(f *testing.F) {
	f.Add(make([]byte, abi.CtrlEntrySize))
	for _, op := range []uint16{abi.OpAllocPD, abi.OpRegMR, abi.OpAllocSTag, abi.OpDeallocSTag, abi.OpDeallocPD, abi.OpCreateQP, abi.OpCreateEQ, abi.OpCreateCQ, abi.OpResizeCQ, abi.OpDestroyCQ, abi.OpDestroyEQ, abi.OpMapPages, abi.OpUnmapPages, abi.OpResumeQP} {
		e := make([]byte, abi.CtrlEntrySize)
		binary.LittleEndian.PutUint16(e, op)
		binary.LittleEndian.PutUint32(e[abi.CtrlArgs:], 1)
		f.Add(e)
	}
	reg := make([]byte, abi.CtrlEntrySize)
	binary.LittleEndian.PutUint16(reg, abi.OpRegMR)
	copy(reg[abi.CtrlArgs:], regMRArgs(1, emu.AccessLocalWrite, 0, 4096, 0, pageListBytes(0x150000, 1, 12, 0)))
	f.Add(reg)
	// Each run starts with a PD and an MR, so that commands naming them reach past the lookup.
	setup := func(b *bench) uint32 {
		b.enable()
		pdn := b.ok(abi.OpAllocPD, nil)
		return b.ok(abi.OpRegMR, regMRArgs(pdn, emu.AccessLocalWrite, 0, 4096, 0, pageListBytes(0x150000, 1, 12, 0)))
	}
	stag := setup(newBench(f))
	for _, flags := range []keys.ReregFlags{keys.ChangeTranslation, keys.ChangePD | keys.ChangeAccess} {
		e := make([]byte, abi.CtrlEntrySize)
		binary.LittleEndian.PutUint16(e, abi.OpReregMR)
		copy(e[abi.CtrlArgs:], reregArgs(stag, flags, regMRArgs(1, emu.AccessLocalWrite|emu.AccessRemoteRead, 0x5000, 8192, 0x10, pageListBytes(0x110000, 3, 12, 1))))
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, entry []byte) {
		b := newBench(t)
		setup(b)
		if len(entry) < 2 {
			return
		}
		op := binary.LittleEndian.Uint16(entry)
		var args []byte
		if len(entry) > abi.CtrlArgs {
			args = entry[abi.CtrlArgs:min(len(entry), abi.CtrlEntrySize)]
		}
		b.cmd(op, args)
		b.ok(abi.OpNop, nil)
		if b.reg(abi.RegDevStatus) != abi.DevStatusReady {
			t.Fatal("a command made the function fatal")
		}
	})
}

// queueArgs encodes a queue (abi.QueueArgs) over one level of pages listed at table.
func queueArgs(logCount, logElem uint8, table uint64, pages uint32) []byte {
	q := make([]byte, abi.QueueArgsSize)
	q[abi.QueueLogCount], q[abi.QueueLogElem] = logCount, logElem
	copy(q[abi.QueuePages:], pageListBytes(table, pages, 12, 1))
	return q
}

// ringAt lays a ring's pages out contiguously from addr, listing them in a table at table, and
// writes its header's element size and mask as a driver does.
func (b *bench) ringAt(addr, table uint64, pages int, logCount, logElem uint8) {
	for i := range pages {
		binary.LittleEndian.PutUint64(b.at(table+uint64(8*i)), addr+uint64(i)*4096)
	}
	binary.LittleEndian.PutUint32(b.at(addr+abi.QHLogElemSize), uint32(logElem))
	binary.LittleEndian.PutUint32(b.at(addr+abi.QHIndexMask), 1<<logCount-1)
}

// CQs in guest memory: completions land as ib_uverbs_wc in the ring (one straddling a page
// boundary included); an armed CQ puts an entry in its EQ and signals the EQ's vector; a resize
// carries unpolled completions over; a full CQ overflows into CQ_ERR and QP_FATAL on the async
// EQ.
func TestCompletionQueues(t *testing.T) {
	b := newBench(t)
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	b.ringAt(0x120000, 0x110000, 1, 4, 4)
	eqn := b.ok(abi.OpCreateEQ, append(pageListBytes(0x110000, 1, 12, 1), 4, abi.EQCompletion, 3, 0))
	b.ringAt(0x130000, 0x111000, 1, 3, 4)
	aeqn := b.ok(abi.OpCreateEQ, append(pageListBytes(0x111000, 1, 12, 1), 3, abi.EQAsync, 1, 0))
	if eqn == aeqn {
		t.Fatal("two EQs with one number")
	}
	// 128 CQEs of 64 bytes: 384 + 8 KiB, three pages.
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	args := append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, eqn)[8:]...)
	errno, res := b.cmd(abi.OpCreateCQ, args)
	if errno != 0 {
		t.Fatal(errno)
	}
	cqn, slot := res[0], res[1]
	c := b.f.cqs[cqn]

	dev := b.f.Device()
	pd := b.f.pds[pdn].pd
	qp, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: c.emu, RecvCQ: c.emu,
		Cap: emu.QPCap{MaxSendWR: 128, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	peerCQ, _ := dev.CreateCQ(256)
	peer, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: peerCQ, RecvCQ: peerCQ,
		Cap: emu.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, emu.ConnectRC(qp, peer, emu.ConnectOptions{}))
	buf, err := pd.RegMR(make([]byte, 4096), emu.AccessLocalWrite|emu.AccessRemoteWrite)
	must(t, err)
	write := func(id uint64) {
		must(t, qp.PostSend(emu.SendWR{ID: id, Opcode: emu.WRRDMAWrite, Flags: emu.SendSignaled,
			SGL: []emu.SGE{{Addr: buf.Addr(), Length: 8, LKey: buf.LKey()}}, RemoteAddr: buf.Addr() + 64, RKey: buf.RKey()}))
	}
	b.setArm(slot, abi.ArmNext)
	for id := uint64(1); id <= 70; id++ {
		write(id)
	}
	b.sim.RunUntilIdle(0)
	if prod := binary.LittleEndian.Uint32(b.at(0x140000 + abi.QHProducer)); prod != 70 {
		t.Fatalf("producer %d after 70 completions", prod)
	}
	// Every CQE's fields, across the ring's first two pages.
	for i := range 70 {
		e := b.at(0x140000 + abi.QueueHeaderSize + uint64(i)*64)
		if id := binary.LittleEndian.Uint64(e[abi.CQEWRID:]); id != uint64(i+1) ||
			binary.LittleEndian.Uint32(e[abi.CQEStatus:]) != 0 || binary.LittleEndian.Uint32(e[abi.CQEOpcode:]) != uint32(emu.WCRDMAWrite) ||
			binary.LittleEndian.Uint32(e[abi.CQEQPNum:]) != qp.Num() || e[abi.CQEPortNum] != 1 {
			t.Fatalf("CQE %d: % x", i, e[:abi.CQESize])
		}
	}
	// The arm fired once: one EQ entry naming the CQ, vector 3.
	if prod := binary.LittleEndian.Uint32(b.at(0x120000 + abi.QHProducer)); prod != 1 {
		t.Fatalf("EQ producer %d", prod)
	}
	if e := b.at(0x120000 + abi.QueueHeaderSize); e[abi.EQType] != abi.EQCompletion || binary.LittleEndian.Uint32(e[abi.EQNum:]) != cqn {
		t.Fatalf("EQ entry % x", e[:16])
	}
	if !b.sawVector(3) {
		t.Fatal("vector 3 not signalled")
	}

	// The driver takes the event, polls 60 and arms again. The arm register is a posted write,
	// so the ten CQEs it has not consumed may have landed after its last poll: the arm
	// announces them at once. An arm for solicited completions only does not (none of them is
	// solicited).
	binary.LittleEndian.PutUint32(b.at(0x120000+abi.QHConsumer), 1)
	binary.LittleEndian.PutUint32(b.at(0x140000+abi.QHConsumer), 60)
	eqProducer := func() uint32 { return binary.LittleEndian.Uint32(b.at(0x120000 + abi.QHProducer)) }
	b.setArm(slot, abi.ArmSolicited)
	if p := eqProducer(); p != 1 {
		t.Fatalf("EQ producer %d after a solicited arm over unsolicited CQEs", p)
	}
	b.setArm(slot, abi.ArmNext)
	if p := eqProducer(); p != 2 {
		t.Fatalf("EQ producer %d after an arm over unpolled CQEs, want 2", p)
	}
	if e := b.at(0x120000 + abi.QueueHeaderSize + 16); binary.LittleEndian.Uint32(e[abi.EQNum:]) != cqn {
		t.Fatalf("second EQ entry % x", e[:16])
	}
	// Arms while that event is unread add no entry: one unread entry wakes the CQ, and a
	// process arming again and again cannot fill the EQ other CQs share.
	for range 20 {
		b.setArm(slot, abi.ArmNext)
	}
	if p := eqProducer(); p != 2 {
		t.Fatalf("EQ producer %d after arms over an unread event, want 2", p)
	}
	binary.LittleEndian.PutUint32(b.at(0x120000+abi.QHConsumer), 2)
	// With every CQE consumed, an arm waits for the next completion.
	binary.LittleEndian.PutUint32(b.at(0x140000+abi.QHConsumer), 70)
	b.setArm(slot, abi.ArmNext)
	if p := eqProducer(); p != 2 {
		t.Fatalf("EQ producer %d after an arm over an empty ring", p)
	}
	binary.LittleEndian.PutUint32(b.at(0x140000+abi.QHConsumer), 60)

	// A resize to 32 entries carries the other 10 over.
	b.ringAt(0x150000, 0x113000, 1, 5, 6)
	b.ok(abi.OpResizeCQ, append(u32s(cqn, 0), queueArgs(5, 6, 0x113000, 1)...))
	if prod := binary.LittleEndian.Uint32(b.at(0x150000 + abi.QHProducer)); prod != 10 {
		t.Fatalf("producer %d after the resize", prod)
	}
	if id := binary.LittleEndian.Uint64(b.at(0x150000 + abi.QueueHeaderSize)); id != 61 {
		t.Fatalf("first carried CQE is wr %d", id)
	}
	// 21 more fill the 31 usable slots; the 22nd overflows: QP_FATAL and CQ_ERR on the async EQ.
	for id := uint64(71); id <= 92; id++ {
		write(id)
	}
	b.sim.RunUntilIdle(0)
	if qp.State() != emu.QPSErr {
		t.Fatalf("QP %s after the overflow", qp.State())
	}
	var async []emu.AsyncEvent
	for i := range int(binary.LittleEndian.Uint32(b.at(0x130000 + abi.QHProducer))) {
		e := b.at(0x130000 + abi.QueueHeaderSize + uint64(i)*16)
		async = append(async, emu.AsyncEvent{Type: emu.AsyncEventType(e[abi.EQType]), Num: binary.LittleEndian.Uint32(e[abi.EQNum:])})
	}
	if want := []emu.AsyncEvent{{Type: emu.AsyncCQErr, Num: cqn}, {Type: emu.AsyncQPFatal, Num: qp.Num()}}; fmt.Sprint(async) != fmt.Sprint(want) {
		t.Fatalf("async EQ %v, want %v", async, want)
	}
	if !b.sawVector(1) {
		t.Fatal("the async vector was not signalled")
	}
	// A CQ in use is not destroyed; an EQ serving a CQ neither.
	if errno, _ := b.cmd(abi.OpDestroyCQ, u32s(cqn)); errno != syscall.EBUSY {
		t.Fatalf("destroying a CQ in use: %v", errno)
	}
	if errno, _ := b.cmd(abi.OpDestroyEQ, u32s(eqn)); errno != syscall.EBUSY {
		t.Fatalf("destroying an EQ in use: %v", errno)
	}
	must(t, qp.Destroy())
	b.ok(abi.OpDestroyCQ, u32s(cqn))
	b.ok(abi.OpDestroyEQ, u32s(eqn))
}

// cqOnEQ makes a completion EQ (vector 3, its ring at 0x120000) and a 128-entry CQ on it (its
// ring at 0x140000), and returns the CQ's number and doorbell slot.
func (b *bench) cqOnEQ() (cqn, slot uint32) {
	b.t.Helper()
	b.ringAt(0x120000, 0x110000, 1, 4, 4)
	eqn := b.ok(abi.OpCreateEQ, append(pageListBytes(0x110000, 1, 12, 1), 4, abi.EQCompletion, 3, 0))
	b.ringAt(0x140000, 0x112000, 3, 7, 6)
	errno, res := b.cmd(abi.OpCreateCQ, append(queueArgs(7, 6, 0x112000, 3), u32s(0, 0, eqn)[8:]...))
	if errno != 0 {
		b.t.Fatalf("create_cq: %v", errno)
	}
	return res[0], res[1]
}

// pairOnCQ is an RC QP whose completions go to c, connected to a peer QP of the function's
// engine (completing on a CQ of its own), each depth WRs deep, and an 8-byte SGL of a registered
// buffer for their messages. The function must be enabled.
func (b *bench) pairOnCQ(c *cq, depth int) (qp, peer *emu.QP, sgl []emu.SGE) {
	b.t.Helper()
	pd := b.f.pds[b.ok(abi.OpAllocPD, nil)].pd
	caps := emu.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}
	qp, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: c.emu, RecvCQ: c.emu, Cap: caps})
	must(b.t, err)
	peerCQ, _ := b.f.Device().CreateCQ(2 * depth)
	peer, err = pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: peerCQ, RecvCQ: peerCQ, Cap: caps})
	must(b.t, err)
	must(b.t, emu.ConnectRC(qp, peer, emu.ConnectOptions{}))
	buf, err := pd.RegMR(make([]byte, 4096), emu.AccessLocalWrite)
	must(b.t, err)
	return qp, peer, []emu.SGE{{Addr: buf.Addr(), Length: 8, LKey: buf.LKey()}}
}

func (b *bench) setArm(slot, v uint32) {
	b.t.Helper()
	var p [4]byte
	binary.LittleEndian.PutUint32(p[:], v)
	must(b.t, b.f.RegionWrite(abi.BARDoorbell, uint64(abi.CQArm(slot)), p[:]))
}

func (b *bench) sawVector(v int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.irqs {
		if x == v {
			return true
		}
	}
	return false
}

// A CQ whose ring goes with an unmapped region takes no more completions: the next one is an
// overflow (the QP fails) and the memory is not touched.
func TestUnmapRevokesCQ(t *testing.T) {
	b, second, pdn := benchWithSecondRegion(t)
	binary.LittleEndian.PutUint64(b.at(0x110000), 0x4000_0000)
	binary.LittleEndian.PutUint32(second[abi.QHIndexMask:], 15)
	binary.LittleEndian.PutUint32(second[abi.QHLogElemSize:], 6)
	errno, res := b.cmd(abi.OpCreateCQ, append(queueArgs(4, 6, 0x110000, 1), u32s(0, 0, 0xffffffff)[8:]...))
	if errno != 0 {
		t.Fatal(errno)
	}
	c := b.f.cqs[res[0]]
	pd := b.f.pds[pdn].pd
	qp, err := pd.CreateQP(emu.QPInitAttr{Type: emu.QPTypeRC, SendCQ: c.emu, RecvCQ: c.emu,
		Cap: emu.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, emu.ConnectRC(qp, qp, emu.ConnectOptions{}))
	must(t, b.f.UnmapDMA(0x4000_0000, 1<<16))
	before := bytes.Clone(second)
	must(t, qp.PostSend(emu.SendWR{ID: 1, Opcode: emu.WRSend, Flags: emu.SendSignaled}))
	must(t, qp.PostRecv(emu.RecvWR{ID: 2}))
	b.sim.RunUntilIdle(0)
	if qp.State() != emu.QPSErr {
		t.Fatalf("QP %s after its CQ's ring went", qp.State())
	}
	if !bytes.Equal(second, before) {
		t.Fatal("the unmapped ring was written")
	}
}

// SET_AV_TABLE checks the table it is given: 4 KiB pages, as many as the entries need, mapped.
func TestSetAVTable(t *testing.T) {
	b := newBench(t)
	b.enable()
	binary.LittleEndian.PutUint64(b.at(0x110000), 0x120000)
	binary.LittleEndian.PutUint64(b.at(0x110008), 0x121000)
	args := func(pl []byte, n uint32) []byte { return append(pl, u32s(n)...) }
	b.ok(abi.OpSetAVTable, args(pageListBytes(0x110000, 2, 12, 1), 128))
	if b.f.av == nil || b.f.av.entries != 128 || len(b.f.av.pages) != 2 {
		t.Fatalf("table %+v", b.f.av)
	}
	for _, c := range []struct {
		name  string
		args  []byte
		errno syscall.Errno
	}{
		{"too_few_pages", args(pageListBytes(0x110000, 2, 12, 1), 129), syscall.EINVAL},
		{"too_many_pages", args(pageListBytes(0x110000, 2, 12, 1), 64), syscall.EINVAL},
		{"huge_pages", args(pageListBytes(0x200000, 1, 21, 0), 1), syscall.EINVAL},
		{"unmapped", args(pageListBytes(0x900000, 1, 12, 0), 1), syscall.EFAULT},
		{"too_many_entries", args(pageListBytes(0x110000, 2, 12, 1), 1<<17), syscall.EINVAL},
	} {
		if errno, _ := b.cmd(abi.OpSetAVTable, c.args); errno != c.errno {
			t.Errorf("%s: %v, want %v", c.name, errno, c.errno)
		}
	}
	b.ok(abi.OpSetAVTable, args(pageListBytes(0, 0, 12, 0), 0))
	if b.f.av != nil {
		t.Fatal("the table outlived its removal")
	}
}

// The arm register is a posted write: a solicited receive that lands after the driver's last
// poll and before the device sees its arm for solicited completions is announced by the arm
// (RDS arms its receive CQ so, polls once more and waits: without this it waited on an answer
// sitting in the ring). Unconsumed unsolicited CQEs do not fire that arm, nor consumed ones.
func TestSolicitedArmOverUnpolledSolicitedCQE(t *testing.T) {
	b := newBench(t)
	b.enable()
	cqn, slot := b.cqOnEQ()
	qp, peer, sgl := b.pairOnCQ(b.f.cqs[cqn], 8)
	receive := func(id uint64, flags emu.SendFlags) {
		must(t, qp.PostRecv(emu.RecvWR{ID: id, SGL: sgl}))
		must(t, peer.PostSend(emu.SendWR{ID: id, Opcode: emu.WRSend, Flags: flags, SGL: sgl}))
		b.sim.RunUntilIdle(0)
	}
	wantEvents := func(want uint32, when string) {
		t.Helper()
		if p := binary.LittleEndian.Uint32(b.at(0x120000 + abi.QHProducer)); p != want {
			t.Fatalf("EQ producer %d %s, want %d", p, when, want)
		}
	}
	consumed := func(n uint32) { binary.LittleEndian.PutUint32(b.at(0x140000+abi.QHConsumer), n) }

	// Unarmed, an unsolicited receive and then a solicited one land: nothing announced.
	receive(1, 0)
	receive(2, emu.SendSolicited)
	wantEvents(0, "with the CQ unarmed")
	// The driver polled the first only, then arms for solicited completions: announced at once.
	consumed(1)
	b.setArm(slot, abi.ArmSolicited)
	wantEvents(1, "after a solicited arm over an unpolled solicited CQE")
	// Polled; an unsolicited receive lands on the spent arm; a solicited arm over it: nothing.
	binary.LittleEndian.PutUint32(b.at(0x120000+abi.QHConsumer), 1)
	consumed(2)
	receive(3, 0)
	b.setArm(slot, abi.ArmSolicited)
	wantEvents(1, "after a solicited arm over an unsolicited CQE")
	// Everything consumed: a solicited arm waits, and the next solicited receive fires it.
	consumed(3)
	b.setArm(slot, abi.ArmSolicited)
	wantEvents(1, "after a solicited arm over an empty ring")
	receive(4, emu.SendSolicited)
	wantEvents(2, "after a solicited receive on an armed CQ")
}
