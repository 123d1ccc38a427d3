package qtest

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// fakeBus is configuration space behind ports 0xCF8/0xCFC, for the configuration spaces QEMU's
// devices do not have: broken ones.
type fakeBus struct {
	cf8   uint32
	cfg   map[Addr]*[256]byte
	masks map[uint16]uint32 // writable bits of the dwords at these offsets (BARs); others all
}

func (b *fakeBus) space() *[256]byte {
	if b.cf8>>31 == 0 {
		return nil
	}
	return b.cfg[Addr{uint8(b.cf8 >> 16), uint8(b.cf8>>11) & 31, uint8(b.cf8>>8) & 7}]
}

func (b *fakeBus) read(port uint16, n int) uint32 {
	s := b.space()
	if s == nil {
		return 0xffffffff
	}
	off := int(b.cf8&0xfc) + int(port-0xcfc)
	var v uint32
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint32(s[off+i])
	}
	return v
}

func (b *fakeBus) write(port uint16, n int, v uint32) {
	if s := b.space(); s != nil {
		off := int(b.cf8&0xfc) + int(port-0xcfc)
		for i := 0; i < n; i++ {
			s[off+i] = byte(v >> (8 * i))
		}
	}
}

func (b *fakeBus) Inb(p uint16) (uint8, error)  { return uint8(b.read(p, 1)), nil }
func (b *fakeBus) Inw(p uint16) (uint16, error) { return uint16(b.read(p, 2)), nil }
func (b *fakeBus) Inl(p uint16) (uint32, error) { return b.read(p, 4), nil }
func (b *fakeBus) Outb(p uint16, v uint8) error { b.write(p, 1, uint32(v)); return nil }
func (b *fakeBus) Outw(p uint16, v uint16) error {
	b.write(p, 2, uint32(v))
	return nil
}
func (b *fakeBus) Outl(p uint16, v uint32) error {
	if p == 0xcf8 {
		b.cf8 = v
		return nil
	}
	if mask, ok := b.masks[uint16(b.cf8&0xfc)]; ok {
		v = v&mask | b.read(p, 4)&^mask
	}
	b.write(p, 4, v)
	return nil
}
func (b *fakeBus) Readl(uint64) (uint32, error) { return 0, errors.New("no MMIO") }
func (b *fakeBus) Writel(uint64, uint32) error  { return errors.New("no MMIO") }

// A device's capability list is input too: a loop or a pointer into the header is an error, not
// a hang or a read of the wrong registers.
func TestFindCapRefusesBrokenLists(t *testing.T) {
	var cfg [256]byte
	binary.LittleEndian.PutUint32(cfg[0:], 0x12345678)
	cfg[CfgStatus] = statusCapList
	bus := &fakeBus{cfg: map[Addr]*[256]byte{{0, 1, 0}: &cfg}}
	f := NewPCI(bus).Function(Addr{0, 1, 0})

	cfg[CfgCapPtr] = 0x40
	cfg[0x40], cfg[0x41] = CapPCIe, 0x50
	cfg[0x50], cfg[0x51] = CapMSIX, 0x40 // loops back
	if off, err := f.FindCap(CapMSIX); err != nil || off != 0x50 {
		t.Fatalf("FindCap(MSI-X) = %#x, %v", off, err)
	}
	if _, err := f.FindCap(CapMSI); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("a looping list: %v", err)
	}
	cfg[0x51] = 0x10 // into the header
	if _, err := f.FindCap(CapMSI); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("a pointer into the header: %v", err)
	}
	cfg[0x51] = 0
	if _, err := f.FindCap(CapMSI); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an absent capability: %v", err)
	}
	cfg[CfgStatus] = 0
	if _, err := f.FindCap(CapMSIX); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no capability list: %v", err)
	}
	// The MSI-X capability's BIR fields name BARs that do not exist.
	cfg[CfgStatus] = statusCapList
	binary.LittleEndian.PutUint32(cfg[0x54:], 6)
	if _, err := f.MSIX(); err == nil {
		t.Fatal("a table in BAR 6 was accepted")
	}
	// Configuration offsets that port 0xCF8 cannot reach.
	for _, off := range []uint16{0xffff, 0x100, 0xfe} {
		if _, err := f.ConfigRead32(off); err == nil {
			t.Errorf("offset %#x accepted", off)
		}
	}
	if _, err := NewPCI(bus).Function(Addr{0, 32, 0}).ConfigRead8(0); err == nil {
		t.Error("device 32 accepted")
	}
}

// BARs are placed naturally aligned in the window and their upper halves set; a 64-bit BAR in the
// last slot has no upper half, and a size that is not a power of two is refused rather than placed
// overlapping its neighbours.
func TestAssignBARs(t *testing.T) {
	var cfg [256]byte
	bus := &fakeBus{cfg: map[Addr]*[256]byte{{0, 2, 0}: &cfg}, masks: map[uint16]uint32{
		0x10: 0xfffff000, // BAR 0: 4 KiB, 32-bit memory
		0x14: 0xffffc000, // BAR 1-2: 16 KiB, 64-bit prefetchable
		0x18: 0xffffffff,
		0x1c: 0xffffffe0, // BAR 3: 32 I/O ports
		0x20: 0, 0x24: 0, // BARs 4, 5: not implemented
	}}
	cfg[0x14], cfg[0x1c] = 0xc, 1
	f := NewPCI(bus).Function(Addr{0, 2, 0})
	bars, err := f.AssignBARs()
	if err != nil {
		t.Fatal(err)
	}
	want := [6]BAR{
		{Index: 0, Size: 4096, Addr: MMIOWindowStart},
		{Index: 1, Size: 16384, Is64: true, Prefetch: true, Addr: MMIOWindowStart + 16384},
		{Index: 2},
		{Index: 3, Size: 32, IO: true, Addr: IOWindowStart},
		{Index: 4}, {Index: 5},
	}
	if bars != want {
		t.Fatalf("BARs\n%+v, want\n%+v", bars, want)
	}
	for off, v := range map[uint16]uint32{0x10: MMIOWindowStart, 0x14: MMIOWindowStart + 16384 | 0xc, 0x18: 0, 0x1c: IOWindowStart | 1} {
		if got := binary.LittleEndian.Uint32(cfg[off:]); got != v {
			t.Errorf("config %#x = %#x, want %#x", off, got, v)
		}
	}

	bus.masks[0x10] = 0xffffffd0 // 0x30 bytes
	if _, err := f.AssignBARs(); err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Fatalf("a 0x30-byte BAR: %v", err)
	}
	bus.masks[0x10] = 0xfffff000
	cfg[CfgBAR0+20], bus.masks[0x24] = 4, 0xfffff000 // BAR 5: 64-bit memory
	if _, err := f.SizeBAR(5); err == nil || !strings.Contains(err.Error(), "upper half") {
		t.Fatalf("64-bit BAR 5: %v", err)
	}
	if _, err := f.SizeBAR(6); err == nil {
		t.Fatal("BAR 6 accepted")
	}
}
