package qtest

import (
	"errors"
	"fmt"
)

// PortIO is x86 port I/O, through which PCI configuration space is reached (0xCF8/0xCFC).
type PortIO interface {
	Inb(port uint16) (uint8, error)
	Inw(port uint16) (uint16, error)
	Inl(port uint16) (uint32, error)
	Outb(port uint16, v uint8) error
	Outw(port uint16, v uint16) error
	Outl(port uint16, v uint32) error
}

// MMIO is 32-bit access to guest physical addresses, which is how MSI-X tables are programmed.
type MMIO interface {
	Readl(addr uint64) (uint32, error)
	Writel(addr uint64, v uint32) error
}

// Bus is what the PCI helpers need; *Client is one.
type Bus interface {
	PortIO
	MMIO
}

// Configuration space offsets and bits used here (PCI Local Bus 3.0, chapter 6).
const (
	CfgVendorID   = 0x00
	CfgDeviceID   = 0x02
	CfgCommand    = 0x04
	CfgStatus     = 0x06
	CfgRevision   = 0x08
	CfgClass      = 0x09 // 3 bytes: programming interface, subclass, class
	CfgHeaderType = 0x0e
	CfgBAR0       = 0x10
	CfgCapPtr     = 0x34

	CmdIO     = 1 << 0
	CmdMemory = 1 << 1
	CmdMaster = 1 << 2

	statusCapList = 1 << 4

	CapMSI  = 0x05
	CapPCIe = 0x10
	CapMSIX = 0x11
)

// The q35 windows the helpers place BARs in: above the ECAM window QEMU's firmware would use at
// 0xB0000000 (256 MiB) and below the I/O APIC at 0xFEC00000; ports from 0xC000, above the
// chipset's fixed ports. Nothing runs firmware under qtest, so nothing else claims them.
const (
	MMIOWindowStart = 0xE0000000
	MMIOWindowEnd   = 0xFEC00000
	IOWindowStart   = 0xC000
	IOWindowEnd     = 0x10000
)

// ErrNotFound is returned when no function or capability matches.
var ErrNotFound = errors.New("qtest: not found")

// PCI reaches the functions on a Bus and hands out BAR addresses from the q35 windows.
type PCI struct {
	bus      Bus
	nextMMIO uint64
	nextIO   uint64
}

// NewPCI returns PCI helpers over bus. Each PCI hands out addresses on its own: use one per
// machine.
func NewPCI(bus Bus) *PCI {
	return &PCI{bus: bus, nextMMIO: MMIOWindowStart, nextIO: IOWindowStart}
}

// Addr is a function's bus, device (slot) and function number.
type Addr struct {
	Bus, Dev, Fn uint8
}

func (a Addr) String() string { return fmt.Sprintf("%02x:%02x.%x", a.Bus, a.Dev, a.Fn) }

// Function is one PCI function on the bus.
type Function struct {
	pci      *PCI
	Addr     Addr
	VendorID uint16
	DeviceID uint16
}

// Function returns the function at a, whether or not it exists.
func (p *PCI) Function(a Addr) *Function {
	return &Function{pci: p, Addr: a}
}

func (p *PCI) cf8(a Addr, off uint16) error {
	if a.Dev > 31 || a.Fn > 7 {
		return fmt.Errorf("qtest: PCI %s: no such device or function number", a)
	}
	return p.bus.Outl(0xcf8, 1<<31|uint32(a.Bus)<<16|uint32(a.Dev)<<11|uint32(a.Fn)<<8|uint32(off&0xfc))
}

// checkOff refuses what port 0xCF8 cannot address: beyond 256 bytes, or unaligned. (Extended
// configuration space needs ECAM, which q35 maps only once firmware programs the MCH's PCIEXBAR;
// nothing here needs it: the capabilities a driver looks for live in the first 256 bytes.)
func checkOff(a Addr, off uint16, size uint16) error {
	if int(off)+int(size) > 256 || off%size != 0 {
		return fmt.Errorf("qtest: PCI %s: config offset 0x%x size %d is unaligned or beyond 256 bytes", a, off, size)
	}
	return nil
}

// ConfigRead8 reads a byte of configuration space.
func (f *Function) ConfigRead8(off uint16) (uint8, error) {
	port, err := f.selectConfig(off, 1)
	if err != nil {
		return 0, err
	}
	return f.pci.bus.Inb(port)
}

// ConfigRead16 reads an aligned 16-bit value of configuration space.
func (f *Function) ConfigRead16(off uint16) (uint16, error) {
	port, err := f.selectConfig(off, 2)
	if err != nil {
		return 0, err
	}
	return f.pci.bus.Inw(port)
}

// ConfigRead32 reads an aligned 32-bit value of configuration space.
func (f *Function) ConfigRead32(off uint16) (uint32, error) {
	port, err := f.selectConfig(off, 4)
	if err != nil {
		return 0, err
	}
	return f.pci.bus.Inl(port)
}

// ConfigWrite8 writes a byte of configuration space.
func (f *Function) ConfigWrite8(off uint16, v uint8) error {
	port, err := f.selectConfig(off, 1)
	if err != nil {
		return err
	}
	return f.pci.bus.Outb(port, v)
}

// ConfigWrite16 writes an aligned 16-bit value of configuration space.
func (f *Function) ConfigWrite16(off uint16, v uint16) error {
	port, err := f.selectConfig(off, 2)
	if err != nil {
		return err
	}
	return f.pci.bus.Outw(port, v)
}

// ConfigWrite32 writes an aligned 32-bit value of configuration space.
func (f *Function) ConfigWrite32(off uint16, v uint32) error {
	port, err := f.selectConfig(off, 4)
	if err != nil {
		return err
	}
	return f.pci.bus.Outl(port, v)
}

// selectConfig checks off for a size-byte access (1, 2 or 4) and points port 0xCF8 at its
// dword; it returns the data port the access goes to, 0xCFC plus off's place in the dword.
func (f *Function) selectConfig(off, size uint16) (uint16, error) {
	if err := checkOff(f.Addr, off, size); err != nil {
		return 0, err
	}
	if err := f.pci.cf8(f.Addr, off); err != nil {
		return 0, err
	}
	return 0xcfc + off&(4-size), nil
}

// Scan lists the functions present on bus, in slot and function order.
func (p *PCI) Scan(bus uint8) ([]*Function, error) {
	var fns []*Function
	for dev := uint8(0); dev < 32; dev++ {
		for fn := uint8(0); fn < 8; fn++ {
			f := p.Function(Addr{bus, dev, fn})
			id, err := f.ConfigRead32(CfgVendorID)
			if err != nil {
				return nil, err
			}
			if uint16(id) == 0xffff {
				if fn == 0 {
					break
				}
				continue
			}
			f.VendorID, f.DeviceID = uint16(id), uint16(id>>16)
			fns = append(fns, f)
			if fn == 0 {
				ht, err := f.ConfigRead8(CfgHeaderType)
				if err != nil {
					return nil, err
				}
				if ht&0x80 == 0 {
					break // not multi-function
				}
			}
		}
	}
	return fns, nil
}

// Find returns the first function on bus with the vendor and device ID, or ErrNotFound.
func (p *PCI) Find(bus uint8, vendor, device uint16) (*Function, error) {
	fns, err := p.Scan(bus)
	if err != nil {
		return nil, err
	}
	for _, f := range fns {
		if f.VendorID == vendor && f.DeviceID == device {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%w: PCI %04x:%04x on bus %d", ErrNotFound, vendor, device, bus)
}

// SetCommand sets and clears bits of the command register (CmdIO, CmdMemory, CmdMaster).
func (f *Function) SetCommand(set, clear uint16) error {
	cmd, err := f.ConfigRead16(CfgCommand)
	if err != nil {
		return err
	}
	return f.ConfigWrite16(CfgCommand, cmd&^clear|set)
}

// Enable turns on memory decoding and bus mastering (DMA, and so MSI/MSI-X writes), and I/O
// decoding when io is set.
func (f *Function) Enable(io bool) error {
	set := uint16(CmdMemory | CmdMaster)
	if io {
		set |= CmdIO
	}
	return f.SetCommand(set, 0)
}

// BAR is one base address register after sizing.
type BAR struct {
	Index    int    // 0-5; a 64-bit BAR also occupies Index+1
	Size     uint64 // 0: not implemented
	IO       bool
	Is64     bool
	Prefetch bool
	Addr     uint64 // where it is placed; 0 until assigned
}

// SizeBAR sizes BAR i the standard way (all ones written, the mask read back, the old value
// restored), with decoding off meanwhile so that the probe never claims addresses.
func (f *Function) SizeBAR(i int) (BAR, error) {
	if i < 0 || i > 5 {
		return BAR{}, fmt.Errorf("qtest: PCI %s: no BAR %d", f.Addr, i)
	}
	b := BAR{Index: i}
	cmd, err := f.ConfigRead16(CfgCommand)
	if err != nil {
		return b, err
	}
	if err := f.ConfigWrite16(CfgCommand, cmd&^(CmdIO|CmdMemory)); err != nil {
		return b, err
	}
	off := uint16(CfgBAR0 + 4*i)
	orig, err := f.ConfigRead32(off)
	if err != nil {
		return b, err
	}
	if err := f.ConfigWrite32(off, 0xffffffff); err != nil {
		return b, err
	}
	mask, err := f.ConfigRead32(off)
	if err != nil {
		return b, err
	}
	if err := f.ConfigWrite32(off, orig); err != nil {
		return b, err
	}
	switch {
	case mask == 0:
	case orig&1 == 1:
		b.IO = true
		b.Size = uint64(^(mask&^3)&0xffff) + 1
		b.Addr = uint64(orig &^ 3)
	default:
		b.Prefetch = orig&8 != 0
		b.Is64 = orig&6 == 4
		full := uint64(mask &^ 0xf)
		addr := uint64(orig &^ 0xf)
		if b.Is64 {
			if i == 5 {
				return b, fmt.Errorf("qtest: PCI %s: 64-bit BAR 5 has no upper half", f.Addr)
			}
			hiOrig, err := f.ConfigRead32(off + 4)
			if err != nil {
				return b, err
			}
			if err := f.ConfigWrite32(off+4, 0xffffffff); err != nil {
				return b, err
			}
			hi, err := f.ConfigRead32(off + 4)
			if err != nil {
				return b, err
			}
			if err := f.ConfigWrite32(off+4, hiOrig); err != nil {
				return b, err
			}
			full |= uint64(hi) << 32
			addr |= uint64(hiOrig) << 32
		} else {
			full |= 0xffffffff << 32
		}
		b.Size = ^full + 1
		b.Addr = addr
	}
	if err := f.ConfigWrite16(CfgCommand, cmd); err != nil {
		return b, err
	}
	return b, nil
}

// AssignBARs sizes every BAR, places each implemented one in the q35 windows (naturally aligned,
// 64-bit ones below 4 GiB too) and returns them, indexed 0-5; the upper half of a 64-bit BAR is
// reported as not implemented. Decoding is left as it was: call Enable after.
func (f *Function) AssignBARs() ([6]BAR, error) {
	var bars [6]BAR
	cmd, err := f.ConfigRead16(CfgCommand)
	if err != nil {
		return bars, err
	}
	if err := f.ConfigWrite16(CfgCommand, cmd&^(CmdIO|CmdMemory)); err != nil {
		return bars, err
	}
	for i := 0; i < 6; i++ {
		b, err := f.SizeBAR(i)
		if err != nil {
			return bars, err
		}
		bars[i] = b
		if b.Size == 0 {
			continue
		}
		if b.Size&(b.Size-1) != 0 {
			return bars, fmt.Errorf("qtest: PCI %s: BAR %d size 0x%x is not a power of two", f.Addr, i, b.Size)
		}
		next, end := &f.pci.nextMMIO, uint64(MMIOWindowEnd)
		if b.IO {
			next, end = &f.pci.nextIO, IOWindowEnd
		}
		addr := (*next + b.Size - 1) &^ (b.Size - 1)
		if addr+b.Size > end || addr+b.Size < addr {
			return bars, fmt.Errorf("qtest: PCI %s: BAR %d of 0x%x bytes does not fit the window", f.Addr, i, b.Size)
		}
		*next = addr + b.Size
		off := uint16(CfgBAR0 + 4*i)
		if err := f.ConfigWrite32(off, uint32(addr)); err != nil {
			return bars, err
		}
		if b.Is64 {
			if err := f.ConfigWrite32(off+4, uint32(addr>>32)); err != nil {
				return bars, err
			}
			i++
			bars[i] = BAR{Index: i}
		}
		bars[b.Index].Addr = addr
	}
	return bars, f.ConfigWrite16(CfgCommand, cmd)
}

// FindCap returns the configuration offset of the first capability with the ID, or ErrNotFound.
// A looping or out-of-range list is an error, not a hang.
func (f *Function) FindCap(id uint8) (uint16, error) {
	st, err := f.ConfigRead16(CfgStatus)
	if err != nil {
		return 0, err
	}
	if st&statusCapList == 0 {
		return 0, fmt.Errorf("%w: PCI %s has no capability list", ErrNotFound, f.Addr)
	}
	p, err := f.ConfigRead8(CfgCapPtr)
	if err != nil {
		return 0, err
	}
	// 48 capabilities of 4 bytes fill the 192 bytes after the header: more means a loop.
	for n := 0; p != 0; n++ {
		p &^= 3
		if n == 48 || p < 0x40 {
			return 0, fmt.Errorf("qtest: PCI %s: capability list is broken at 0x%x", f.Addr, p)
		}
		hdr, err := f.ConfigRead16(uint16(p))
		if err != nil {
			return 0, err
		}
		if uint8(hdr) == id {
			return uint16(p), nil
		}
		p = uint8(hdr >> 8)
	}
	return 0, fmt.Errorf("%w: PCI %s has no capability 0x%02x", ErrNotFound, f.Addr, id)
}

// MSIX describes a function's MSI-X capability.
type MSIX struct {
	Cap       uint16 // configuration offset of the capability
	Vectors   int    // table entries
	TableBAR  int
	TableOff  uint32
	PBABAR    int
	PBAOff    uint32
	tableAddr uint64 // set by Setup once the BAR is placed
	pbaAddr   uint64
}

// MSI-X message control bits.
const (
	msixEnable   = 1 << 15
	msixFuncMask = 1 << 14
)

// MSIX reads the function's MSI-X capability.
func (f *Function) MSIX() (MSIX, error) {
	var x MSIX
	c, err := f.FindCap(CapMSIX)
	if err != nil {
		return x, err
	}
	ctl, err := f.ConfigRead16(c + 2)
	if err != nil {
		return x, err
	}
	t, err := f.ConfigRead32(c + 4)
	if err != nil {
		return x, err
	}
	p, err := f.ConfigRead32(c + 8)
	if err != nil {
		return x, err
	}
	x = MSIX{Cap: c, Vectors: int(ctl&0x7ff) + 1, TableBAR: int(t & 7), TableOff: t &^ 7, PBABAR: int(p & 7), PBAOff: p &^ 7}
	if x.TableBAR > 5 || x.PBABAR > 5 {
		return x, fmt.Errorf("qtest: PCI %s: MSI-X table in BAR %d, PBA in BAR %d", f.Addr, x.TableBAR, x.PBABAR)
	}
	return x, nil
}

// Setup locates the MSI-X table and PBA in the assigned bars (from AssignBARs), checking
// both lie inside their BARs.
func (x *MSIX) Setup(bars [6]BAR) error {
	tb, pb := bars[x.TableBAR], bars[x.PBABAR]
	if tb.IO || tb.Size == 0 || uint64(x.TableOff)+16*uint64(x.Vectors) > tb.Size {
		return fmt.Errorf("qtest: MSI-X table (%d entries at 0x%x) outside BAR %d (0x%x bytes)", x.Vectors, x.TableOff, x.TableBAR, tb.Size)
	}
	if pb.IO || pb.Size == 0 || uint64(x.PBAOff)+8*uint64((x.Vectors+63)/64) > pb.Size {
		return fmt.Errorf("qtest: MSI-X PBA at 0x%x outside BAR %d (0x%x bytes)", x.PBAOff, x.PBABAR, pb.Size)
	}
	x.tableAddr = tb.Addr + uint64(x.TableOff)
	x.pbaAddr = pb.Addr + uint64(x.PBAOff)
	return nil
}

// TableAddr is the guest physical address of vector n's table entry (after Setup).
func (x *MSIX) TableAddr(n int) uint64 { return x.tableAddr + 16*uint64(n) }

// SetVector programs table entry n: the message goes to addr with data, unless masked. With
// addr in guest RAM, the interrupt becomes a memory write a test reads back.
func (x *MSIX) SetVector(bus MMIO, n int, addr uint64, data uint32, masked bool) error {
	if n < 0 || n >= x.Vectors || x.tableAddr == 0 {
		return fmt.Errorf("qtest: MSI-X vector %d of %d (table set up: %t)", n, x.Vectors, x.tableAddr != 0)
	}
	e := x.TableAddr(n)
	ctl := uint32(0)
	if masked {
		ctl = 1
	}
	for i, v := range [4]uint32{uint32(addr), uint32(addr >> 32), data, ctl} {
		if err := bus.Writel(e+4*uint64(i), v); err != nil {
			return err
		}
	}
	return nil
}

// Pending reports vector n's bit in the PBA.
func (x *MSIX) Pending(bus MMIO, n int) (bool, error) {
	if n < 0 || n >= x.Vectors || x.pbaAddr == 0 {
		return false, fmt.Errorf("qtest: MSI-X vector %d of %d (PBA set up: %t)", n, x.Vectors, x.pbaAddr != 0)
	}
	w, err := bus.Readl(x.pbaAddr + 4*uint64(n/32))
	return w>>(n%32)&1 != 0, err
}

// EnableMSIX turns MSI-X on (function mask cleared) or off in the capability at x.Cap.
func (f *Function) EnableMSIX(x *MSIX, on bool) error {
	ctl, err := f.ConfigRead16(x.Cap + 2)
	if err != nil {
		return err
	}
	ctl &^= msixEnable | msixFuncMask
	if on {
		ctl |= msixEnable
	}
	return f.ConfigWrite16(x.Cap+2, ctl)
}
