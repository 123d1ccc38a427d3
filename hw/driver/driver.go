// Package driver is a Go driver for the softirdma PCI function (docs/device.md), over a Bus: the
// function's BARs and the machine's memory, wherever they are (a vfio-user connection in
// process, QEMU under qtest). It imports only the ABI (hw/abi): it knows the function as a
// guest driver does. It keeps its control queue, page lists and rings in an Arena of guest
// memory it is given, and writes and reads the rings in rxe's user layout as rdma-core's rxe
// provider does.
package driver

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/hw/abi"
)

// Bus reaches the function and guest memory.
type Bus interface {
	ReadReg(bar int, off uint32) (uint32, error)
	WriteReg(bar int, off uint32, v uint32) error
	ReadMem(addr uint64, p []byte) error
	WriteMem(addr uint64, p []byte) error
}

// Arena is guest memory the driver may use: [Base, Base+Size), 4 KiB aligned.
type Arena struct{ Base, Size uint64 }

// Driver drives one function. It is not safe for concurrent use.
type Driver struct {
	bus     Bus
	arena   Arena
	next    uint64 // the arena's next free byte
	ctrlQ   uint64
	prod    uint32
	timeout time.Duration
}

const ctrlLog = 5 // 32 control entries: one page

var le = binary.LittleEndian

// Open checks the function's identity and version, gives it a control queue and enables it.
// The transport has enabled memory decoding and bus mastering in config space.
func Open(bus Bus, arena Arena) (*Driver, error) {
	if arena.Base%4096 != 0 || arena.Size < 16*4096 {
		return nil, fmt.Errorf("driver: arena [0x%x, +0x%x) is not 16 or more aligned pages", arena.Base, arena.Size)
	}
	d := &Driver{bus: bus, arena: arena, next: arena.Base, timeout: 10 * time.Second}
	if v, err := d.reg(abi.RegMagic); err != nil || v != abi.MagicValue {
		return nil, fmt.Errorf("driver: not a softirdma function (magic 0x%x): %v", v, err)
	}
	if v, _ := d.reg(abi.RegVersion); v>>16 != abi.VersionMajor {
		return nil, fmt.Errorf("driver: ABI version %d.%d, this driver knows %d", v>>16, v&0xffff, abi.VersionMajor)
	}
	q, err := d.Alloc(4096)
	if err != nil {
		return nil, err
	}
	d.ctrlQ = q
	for _, w := range [][2]uint32{{abi.RegCtrlQBaseL, uint32(q)}, {abi.RegCtrlQBaseH, uint32(q >> 32)}, {abi.RegCtrlQLog, ctrlLog},
		{abi.RegDevCtrl, abi.DevCtrlEnable}} {
		if err := bus.WriteReg(abi.BARRegs, w[0], w[1]); err != nil {
			return nil, err
		}
	}
	if st, err := d.reg(abi.RegDevStatus); err != nil || st != abi.DevStatusReady {
		return nil, fmt.Errorf("driver: the function is not ready (status 0x%x): %v", st, err)
	}
	return d, nil
}

func (d *Driver) reg(off uint32) (uint32, error) { return d.bus.ReadReg(abi.BARRegs, off) }

// Alloc takes n bytes (rounded up to pages) of zeroed arena memory and returns their address.
func (d *Driver) Alloc(n uint64) (uint64, error) {
	n = (n + 4095) &^ 4095
	if n == 0 || n > d.arena.Base+d.arena.Size-d.next {
		return 0, fmt.Errorf("driver: arena exhausted: %w", syscall.ENOMEM)
	}
	a := d.next
	d.next += n
	if err := d.bus.WriteMem(a, make([]byte, n)); err != nil {
		return 0, err
	}
	return a, nil
}

// free gives back n bytes at addr that Alloc gave. The arena is a bump allocator: only the
// latest allocation can go back (the rings of a queue destroyed before anything newer was
// made, or of a create that failed); older memory stays taken while the driver lives, which
// the arenas a test or a bring-up gives it afford.
func (d *Driver) free(addr, n uint64) {
	if addr+(n+4095)&^4095 == d.next {
		d.next = addr
	}
}

// ReadMem reads guest memory (a registered region, say) through the driver's bus.
func (d *Driver) ReadMem(addr uint64, p []byte) error { return d.bus.ReadMem(addr, p) }

// Command runs one control command and returns its results, or its errno as an error.
func (d *Driver) Command(op uint16, args []byte) ([4]uint32, error) {
	res, _, err := d.Query(op, args)
	return res, err
}

// Query runs a command as Command does and also returns its entry's argument area as the
// device left it, where queries write their answers.
func (d *Driver) Query(op uint16, args []byte) ([4]uint32, []byte, error) {
	var res [4]uint32
	if len(args) > abi.CtrlEntrySize-abi.CtrlArgs {
		return res, nil, fmt.Errorf("driver: %d bytes of arguments", len(args))
	}
	e := abi.CtrlEntry(make([]byte, abi.CtrlEntrySize))
	e.SetOpcode(op)
	copy(e.Args(), args)
	at := d.ctrlQ + uint64(d.prod)*abi.CtrlEntrySize
	if err := d.bus.WriteMem(at, e); err != nil {
		return res, nil, err
	}
	d.prod = (d.prod + 1) & (1<<ctrlLog - 1)
	if err := d.bus.WriteReg(abi.BARRegs, abi.RegCtrlQProd, d.prod); err != nil {
		return res, nil, err
	}
	deadline := time.Now().Add(d.timeout)
	for {
		cons, err := d.reg(abi.RegCtrlQCons)
		if err != nil {
			return res, nil, err
		}
		if cons == d.prod {
			break
		}
		if st, _ := d.reg(abi.RegDevStatus); st&abi.DevStatusFatal != 0 {
			code, _ := d.reg(abi.RegFatalCode)
			return res, nil, fmt.Errorf("driver: the function failed (fatal code %d)", code)
		}
		if time.Now().After(deadline) {
			return res, nil, fmt.Errorf("driver: command 0x%x not done: %w", op, syscall.ETIMEDOUT)
		}
	}
	if err := d.bus.ReadMem(at, e); err != nil {
		return res, nil, err
	}
	for i := range res {
		res[i] = e.Result(i)
	}
	st := e.Status()
	if st&abi.CtrlDone == 0 {
		return res, nil, fmt.Errorf("driver: command 0x%x consumed but not done", op)
	}
	if errno := syscall.Errno(st &^ abi.CtrlDone); errno != 0 {
		return res, nil, fmt.Errorf("driver: command 0x%x: %w", op, errno)
	}
	return res, e.Args(), nil
}

// Port is what QUERY_PORT answers.
type Port struct {
	State, MaxMTU, ActiveMTU, GIDTableLen uint32
}

// QueryPort asks the device about its port through the control queue.
func (d *Driver) QueryPort() (Port, error) {
	args := make(abi.QueryPortArgs, abi.QueryPortArgsSize)
	args.SetPort(1)
	r, err := d.Command(abi.OpQueryPort, args)
	return Port{State: r[abi.ResultPortState], MaxMTU: r[abi.ResultPortMaxMTU], ActiveMTU: r[abi.ResultPortActiveMTU],
		GIDTableLen: r[abi.ResultPortGIDLen]}, err
}

// QueryGID returns GID table entry i and whether it is valid.
func (d *Driver) QueryGID(i uint32) ([16]byte, bool, error) {
	args := make(abi.QueryGIDArgs, abi.QueryGIDArgsSize)
	args.SetPort(1)
	args.SetIndex(i)
	r, answer, err := d.Query(abi.OpQueryGID, args)
	if err != nil {
		return [16]byte{}, false, err
	}
	return [16]byte(abi.QueryGIDArgs(answer).GID()), r[abi.ResultGIDValid] == 1, nil
}

// AllocPD allocates a protection domain.
func (d *Driver) AllocPD() (uint32, error) {
	r, err := d.Command(abi.OpAllocPD, nil)
	return r[abi.ResultNum], err
}

// DeallocPD frees a protection domain: EBUSY while MRs, windows, QPs or SRQs are in it.
func (d *Driver) DeallocPD(pd uint32) error {
	_, err := d.Command(abi.OpDeallocPD, numArgs(pd))
	return err
}

// MR is a registered region of the arena.
type MR struct {
	Addr, Len uint64
	Key       uint32
}

// RegMR allocates length bytes of the arena and registers them at their own address, from a
// one-level page list, with the access flags given (ibv_access_flags).
func (d *Driver) RegMR(pd uint32, length uint64, access uint32) (MR, error) {
	args := make(abi.RegMRArgs, abi.RegMRArgsSize)
	addr, err := d.mrArgs(args, pd, length, access)
	if err != nil {
		return MR{}, err
	}
	r, err := d.Command(abi.OpRegMR, args)
	return MR{Addr: addr, Len: length, Key: r[abi.ResultNum]}, err
}

// ReregMR changes mr's translation, PD or access as flags say (abi.Rereg*): a new translation
// is length fresh bytes of the arena at their own address. The key stays.
func (d *Driver) ReregMR(mr MR, flags, pd uint32, length uint64, access uint32) (MR, error) {
	args := make(abi.ReregMRArgs, abi.ReregMRArgsSize)
	args.SetSTag(mr.Key)
	args.SetFlags(flags)
	reg := args.Reg()
	reg.SetPD(pd)
	reg.SetAccess(access)
	if flags&abi.ReregTranslation != 0 {
		addr, err := d.mrArgs(reg, pd, length, access)
		if err != nil {
			return mr, err
		}
		mr.Addr, mr.Len = addr, length
	}
	_, err := d.Command(abi.OpReregMR, args)
	return mr, err
}

// mrArgs allocates length bytes of the arena and writes REG_MR's arguments registering them at
// their own address from a one-level page list; it returns the address.
func (d *Driver) mrArgs(args abi.RegMRArgs, pd uint32, length uint64, access uint32) (uint64, error) {
	pages := (length + 4095) / 4096
	if pages == 0 || pages > abi.PLEntriesPerPage {
		return 0, fmt.Errorf("driver: an MR of %d bytes: %w", length, syscall.EINVAL)
	}
	addr, err := d.Alloc(pages * 4096)
	if err != nil {
		return 0, err
	}
	table, err := d.pageTable(addr, pages)
	if err != nil {
		return 0, err
	}
	args.SetPD(pd)
	args.SetAccess(access)
	args.SetIOVA(addr)
	args.SetLength(length)
	putPageList(args.Pages(), table, uint32(pages))
	return addr, nil
}

// pageTable writes a page of the addresses of the pages from addr and returns where.
func (d *Driver) pageTable(addr, pages uint64) (uint64, error) {
	t, err := d.Alloc(4096)
	if err != nil {
		return 0, err
	}
	list := make([]uint64, pages)
	for i := range list {
		list[i] = addr + uint64(i)*4096
	}
	return t, d.writePages(t, list)
}

// writePages writes a page list's table of page addresses at t.
func (d *Driver) writePages(t uint64, pages []uint64) error {
	b := make([]byte, 8*len(pages))
	for i, p := range pages {
		le.PutUint64(b[8*i:], p)
	}
	return d.bus.WriteMem(t, b)
}

// putPageList describes pages 4 KiB pages by a one-level list whose table is at table.
func putPageList(p abi.PageList, table uint64, pages uint32) {
	p.SetAddr(table)
	p.SetPages(pages)
	p.SetShift(12)
	p.SetLevels(1)
}

// AllocMW allocates a memory window (abi.STagMWType1, STagMWType2A, STagMWType2B) and returns
// its rkey.
func (d *Driver) AllocMW(pd, kind uint32) (uint32, error) {
	r, err := d.Command(abi.OpAllocSTag, allocSTagArgs(pd, kind, 0))
	return r[abi.ResultNum], err
}

// FastRegMR is an MR that ALLOC_STAG leaves FREE until a REG_MR work request gives it pages
// (the kernel's ib_alloc_mr). It owns a page of the arena for the table of the pages a REG_MR
// names, which the device reads when it takes the work request, so one REG_MR of the MR may be
// outstanding at a time, as with a kernel driver's MR page list.
type FastRegMR struct {
	Key      uint32 // as ALLOC_STAG answered it; a REG_MR keeps its index and picks the key8
	MaxPages uint32
	table    uint64
}

// AllocFastRegMR allocates a fast-register MR in pd for up to maxPages pages of 4 KiB, the
// most one page of page addresses names.
func (d *Driver) AllocFastRegMR(pd, maxPages uint32) (*FastRegMR, error) {
	if maxPages == 0 || maxPages > abi.PLEntriesPerPage {
		return nil, fmt.Errorf("driver: a fast-register MR of %d pages: %w", maxPages, syscall.EINVAL)
	}
	t, err := d.Alloc(4096)
	if err != nil {
		return nil, err
	}
	r, err := d.Command(abi.OpAllocSTag, allocSTagArgs(pd, abi.STagFastRegMR, maxPages))
	if err != nil {
		d.free(t, 4096)
		return nil, err
	}
	return &FastRegMR{Key: r[abi.ResultNum], MaxPages: maxPages, table: t}, nil
}

// DeallocFastRegMR frees a fast-register MR and gives its page table back.
func (d *Driver) DeallocFastRegMR(m *FastRegMR) error {
	if err := d.DeallocSTag(m.Key); err != nil {
		return err
	}
	d.free(m.table, 4096)
	return nil
}

// DeallocSTag frees an MR or a window.
func (d *Driver) DeallocSTag(stag uint32) error {
	_, err := d.Command(abi.OpDeallocSTag, numArgs(stag))
	return err
}

// numArgs are the arguments of a command naming one object (abi.NumArgs).
func numArgs(num uint32) abi.NumArgs {
	a := make(abi.NumArgs, abi.NumArgsSize)
	a.SetNum(num)
	return a
}

func allocSTagArgs(pd, kind, maxPages uint32) abi.AllocSTagArgs {
	a := make(abi.AllocSTagArgs, abi.AllocSTagArgsSize)
	a.SetPD(pd)
	a.SetKind(kind)
	a.SetMaxPages(maxPages)
	return a
}
