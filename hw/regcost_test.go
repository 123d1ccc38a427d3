package hw

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// Registering 1 GiB of pages costs a small constant per page beyond the page list.
func TestRegistrationCostPerPage(t *testing.T) {
	const pages = 1 << 16 // 256 MiB of 4 KiB pages, listed in two levels
	b := newBenchWith(t, func(c *Config) {})
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	// Every page is the same 4 KiB of RAM: a list whose pages repeat, as a hostile one may.
	top := uint64(0x1f0000)
	tables := uint64(0x160000) // 128 tables of 512 entries
	for i := range pages / abi.PLEntriesPerPage {
		binary.LittleEndian.PutUint64(b.at(top+uint64(8*i)), tables+uint64(i)*4096)
	}
	for i := range pages {
		binary.LittleEndian.PutUint64(b.at(tables+uint64(8*i)), 0x1f8000)
	}
	args := regMRArgs(pdn, emu.AccessLocalWrite, 0, pages*4096, 0, pageListBytes(top, pages, 12, 2))
	best := uint64(math.MaxUint64)
	for range 3 {
		var key uint32
		a := allocated(func() { key = b.ok(abi.OpRegMR, args) })
		best = min(best, a)
		b.ok(abi.OpDeallocSTag, u32s(key))
	}
	perPage := float64(best)/pages - 8 // beyond the list itself
	t.Logf("REG_MR of %d pages: %d bytes, %.1f bytes a page beyond the page list", pages, best, perPage)
	if perPage > 24 {
		t.Fatalf("%.1f bytes a page beyond the page list, want at most 24", perPage)
	}
}
