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
	for _, c := range []struct {
		name  string
		bytes int64 // moved per access, when it is a block
		op    func() error
	}{
		{"readl-ram", 0, func() error { _, err := m.Readl(0x10000); return err }},
		{"writel-ram", 0, func() error { return m.Writel(0x10000, 1) }},
		{"writel-mmio", 0, func() error { return m.Writel(mmio+8, 0xabcd) }},
		{"write-4KiB-b64", 4096, func() error { return m.Write(0x20000, page) }},
		{"write-4KiB-hex", 4096, func() error { return m.WriteHex(0x20000, page) }},
		{"read-4KiB-b64", 4096, func() error { return m.Read(0x20000, page) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.bytes != 0 {
				b.SetBytes(c.bytes)
			}
			for b.Loop() {
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
