package engine_test

import (
	"runtime"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
)

// guestSpan is the guest-physical address space a registration benchmark or test lays its
// regions in: one 16 MiB backing slice mapped again and again, 32 MiB apart so no two regions
// are adjacent. Registration never touches the bytes, so sharing them costs nothing in
// realism and keeps a 1 GiB registration to 16 MiB of real memory.
const (
	regionBytes  = 16 << 20
	regionStride = 32 << 20
	guestBase    = 1 << 40
)

// scatteredGuest maps enough regions for pages 4 KiB pages and returns a page list naming
// them all once, in an order where no page follows its neighbour (stride 4099 through the
// pages is a permutation of a power of two and never 1), so no two entries merge.
func scatteredGuest(tb testing.TB, pages int) (*engine.GuestMemory, engine.PageList) {
	tb.Helper()
	const perRegion = regionBytes / 4096
	gm := &engine.GuestMemory{}
	backing := make([]byte, regionBytes)
	for r := 0; r*perRegion < pages; r++ {
		must(tb, gm.Map(guestBase+uint64(r)*regionStride, backing))
	}
	pl := engine.PageList{PageSize: 4096, Length: uint64(pages) * 4096, Pages: make([]uint64, pages)}
	for i := range pl.Pages {
		j := (i * 4099) % pages // pages is a power of two, 4099 odd: every page once
		pl.Pages[i] = guestBase + uint64(j/perRegion)*regionStride + uint64(j%perRegion)*4096
	}
	return gm, pl
}

// repeatedGuest is a page list of pages entries over only 16 distinct, non-adjacent pages.
func repeatedGuest(tb testing.TB, pages int) (*engine.GuestMemory, engine.PageList) {
	tb.Helper()
	gm := &engine.GuestMemory{}
	must(tb, gm.Map(guestBase, make([]byte, 1<<20)))
	pl := engine.PageList{PageSize: 4096, Length: uint64(pages) * 4096, Pages: make([]uint64, pages)}
	for i := range pl.Pages {
		pl.Pages[i] = guestBase + uint64(i%16)*8192
	}
	return gm, pl
}

// minAllocPerPage runs reg runs times and returns the fewest bytes one run allocated per page
// of pages: the fewest, because a GC cycle or a runtime allocation can land in any run.
func minAllocPerPage(pages, runs int, reg func()) float64 {
	best := -1.0
	var before, after runtime.MemStats
	for range runs {
		runtime.ReadMemStats(&before)
		reg()
		runtime.ReadMemStats(&after)
		if per := float64(after.TotalAlloc-before.TotalAlloc) / float64(pages); best < 0 || per < best {
			best = per
		}
	}
	return best
}

// BenchmarkRegGuestMR1GiB registers 1 GiB of 4 KiB pages, as a device does for a guest's
// reg_mr: B/page is everything the registration allocates beyond the page list, per page.
func BenchmarkRegGuestMR1GiB(b *testing.B) {
	const pages = 1 << 18
	for _, c := range []struct {
		name  string
		setup func(testing.TB, int) (*engine.GuestMemory, engine.PageList)
	}{{"scattered", scatteredGuest}, {"repeated", repeatedGuest}} {
		b.Run(c.name, func(b *testing.B) {
			p := benchPair(b, 8)
			gm, pl := c.setup(b, pages)
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				mr, err := p.pdB.RegGuestMR(gm, pl, 0, allAccess)
				if err != nil {
					b.Fatal(err)
				}
				if err := mr.Dereg(); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/pages, "B/page")
		})
	}
}

// BenchmarkGuestMRWrite and BenchmarkGuestMRRead are BenchmarkRCWrite and BenchmarkRCRead with
// both ends guest MRs of 4 KiB pages: contiguous pages, and scattered ones where every page is
// a separate piece of the copy.
func BenchmarkGuestMRWrite(b *testing.B) { benchGuestRC(b, engine.WRRDMAWrite) }

func BenchmarkGuestMRRead(b *testing.B) { benchGuestRC(b, engine.WRRDMARead) }

func benchGuestRC(b *testing.B, op engine.WROpcode) {
	const size = 1 << 20
	for _, layout := range []string{"contiguous", "scattered"} {
		for _, s := range benchSizes[1:] {
			b.Run(layout+"/"+s.name, func(b *testing.B) {
				p := benchPair(b, 8)
				gm := &engine.GuestMemory{}
				must(b, gm.Map(0x1000_0000, make([]byte, 2*size)))
				pl := engine.PageList{PageSize: 4096, Length: size, Pages: make([]uint64, size/4096)}
				for i := range pl.Pages {
					pl.Pages[i] = 0x1000_0000 + uint64(i)*4096
					if layout == "scattered" {
						pl.Pages[i] = 0x1000_0000 + uint64(len(pl.Pages)-1-i)*8192
					}
				}
				mrA, err := p.pdA.RegGuestMR(gm, pl, 0x10_0000, allAccess)
				must(b, err)
				mrB, err := p.pdB.RegGuestMR(gm, pl, 0x20_0000, allAccess)
				must(b, err)
				wr := engine.SendWR{ID: 1, Opcode: op, Flags: engine.SendSignaled, SGL: sge(mrA, 0, uint32(s.n)), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}
				wc := make([]engine.WC, 1)
				p.roundTrip(b, &wr, wc)
				b.SetBytes(int64(s.n))
				b.ReportAllocs()
				for b.Loop() {
					p.roundTrip(b, &wr, wc)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}
