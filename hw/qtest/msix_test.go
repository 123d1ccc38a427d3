package qtest

import (
	"encoding/binary"
	"testing"
)

// A real device's MSI-X interrupt, with the table entry pointing into guest RAM, becomes a memory
// write the test reads back: the path by which the vfio-user device's completions will arrive.
// The device is virtio-rng-pci driven through its legacy interface: one 16-byte buffer on its
// queue, and its used-buffer interrupt on vector 0 = address 0x5000, data 0xabcd. The vector starts
// masked: the interrupt must then wait in the PBA, and land only once the vector is unmasked.
func TestMSIXInterruptBecomesMemoryWrite(t *testing.T) {
	m, f, bars := virtioRNG(t, true)
	x, err := f.MSIX()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Setup(bars); err != nil {
		t.Fatal(err)
	}
	const msiAddr, msiData = 0x5000, 0xabcd
	if err := x.SetVector(m, 0, msiAddr, msiData, true); err != nil {
		t.Fatal(err)
	}
	if err := f.EnableMSIX(&x, true); err != nil {
		t.Fatal(err)
	}

	io := uint16(bars[0].Addr)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Legacy virtio-pci registers (virtio 0.9.5), with the two MSI-X vector registers present.
	const (
		guestFeatures = 0x04
		queuePFN      = 0x08
		queueNum      = 0x0c
		queueSel      = 0x0e
		queueNotify   = 0x10
		status        = 0x12
		queueVector   = 0x16
		ring          = 0x40000 // page aligned, in RAM
		buf           = 0x50000
	)
	must(m.Outb(io+status, 0))
	must(m.Outb(io+status, 1|2)) // ACKNOWLEDGE | DRIVER
	must(m.Outl(io+guestFeatures, 0))
	must(m.Outw(io+queueSel, 0))
	n, err := m.Inw(io + queueNum)
	if err != nil || n == 0 || n&(n-1) != 0 {
		t.Fatalf("queue size %d, %v", n, err)
	}
	must(m.Memset(ring, 2*4096+uint64(n)*32, 0))
	must(m.Memset(msiAddr, 4, 0))
	must(m.Outl(io+queuePFN, ring>>12))
	must(m.Outw(io+queueVector, 0))
	if v, err := m.Inw(io + queueVector); err != nil || v != 0 {
		t.Fatalf("queue vector reads %#x, %v: the device refused vector 0", v, err)
	}
	must(m.Outb(io+status, 1|2|4)) // DRIVER_OK

	// Descriptor 0: 16 device-writable bytes at buf; the available ring offers it.
	desc := make([]byte, 16)
	binary.LittleEndian.PutUint64(desc[0:], buf)
	binary.LittleEndian.PutUint32(desc[8:], 16)
	binary.LittleEndian.PutUint16(desc[12:], 2) // VRING_DESC_F_WRITE
	must(m.Write(ring, desc))
	avail := uint64(ring) + 16*uint64(n)
	must(m.Writew(avail+4, 0)) // ring[0] = descriptor 0
	must(m.Writew(avail+2, 1)) // idx = 1
	if v, err := m.Readl(msiAddr); err != nil || v != 0 {
		t.Fatalf("0x%x holds %#x before any interrupt", msiAddr, v)
	}
	must(m.Outw(io+queueNotify, 0))

	usedRing := (avail + 6 + 2*uint64(n) + 4095) &^ 4095
	ctx := ctxT(t)
	for {
		idx, err := m.Readw(usedRing + 2)
		must(err)
		if idx == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the device never used the buffer")
		}
	}
	if l, err := m.Readl(usedRing + 8); err != nil || l != 16 {
		t.Fatalf("used length %d, %v", l, err)
	}
	if pend, err := x.Pending(m, 0); err != nil || !pend {
		t.Fatalf("masked vector 0 pending %v, %v", pend, err)
	}
	if v, err := m.Readl(msiAddr); err != nil || v != 0 {
		t.Fatalf("masked vector wrote %#x, %v", v, err)
	}
	must(x.SetVector(m, 0, msiAddr, msiData, false))
	must(m.WaitL(ctx, msiAddr, msiData))
	if pend, err := x.Pending(m, 0); err != nil || pend {
		t.Fatalf("vector 0 pending %v, %v after delivery", pend, err)
	}
}
