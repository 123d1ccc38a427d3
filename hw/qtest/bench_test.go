package qtest

import "testing"

// What an access through qtest costs: each is one command line to QEMU and one reply back, so
// this is the price of a doorbell or a ring update made by a driver over this transport.
// go test -run '^$' -bench . ./hw/qtest
func BenchmarkQtest(b *testing.B) {
	m, _, bars := virtioRNG(b, false)
	// The MSI-X table is emulated by QEMU's PCI code: an MMIO access that reaches a device model.
	mmio := bars[1].Addr
	page := make([]byte, 4096)
	b.Run("readl-ram", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Readl(0x10000); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("writel-ram", func(b *testing.B) {
		for b.Loop() {
			if err := m.Writel(0x10000, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("writel-mmio", func(b *testing.B) {
		for b.Loop() {
			if err := m.Writel(mmio+8, 0xabcd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write-4KiB-b64", func(b *testing.B) {
		b.SetBytes(4096)
		for b.Loop() {
			if err := m.Write(0x20000, page); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write-4KiB-hex", func(b *testing.B) {
		b.SetBytes(4096)
		for b.Loop() {
			if err := m.WriteHex(0x20000, page); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read-4KiB-b64", func(b *testing.B) {
		b.SetBytes(4096)
		for b.Loop() {
			if err := m.Read(0x20000, page); err != nil {
				b.Fatal(err)
			}
		}
	})
}
