package keys

import (
	"bytes"
	"errors"
	"math"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// pageFault asserts that err is a *PageFault over exactly [va, va+n).
func pageFault(t *testing.T, err error, va, n uint64, write bool) {
	t.Helper()
	pf, ok := errors.AsType[*PageFault](err)
	if !ok {
		t.Fatalf("got %v, want a page fault", err)
	}
	if pf.VA != va || pf.Len != n || pf.Write != write {
		t.Fatalf("page fault over [0x%x, +0x%x) write %v, want [0x%x, +0x%x) write %v", pf.VA, pf.Len, pf.Write, va, n, write)
	}
}

// An on-demand paged MR starts with no pages: every access faults, naming the pages from the
// first missing one to the last, until MapPages gives them; the bytes then land in the pages
// given, wherever they lie; UnmapPages takes them back.
func TestOnDemandPagedFaultsAndMaps(t *testing.T) {
	s := newSpace(t)
	as := pages{0x10000: make([]byte, 4096), 0x20000: make([]byte, 4096), 0x30000: make([]byte, 4096), 0x31000: make([]byte, 4096)}
	const iova = 0x7f00_0000_0800 // not page-aligned, as a user buffer rarely is
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: OnDemandPaged(as, 3*4096), IOVA: iova, Access: OnDemand | LocalWrite | RemoteWrite | RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	// The MR's wire pages: 0x7f00_0000_0000 to 0x7f00_0000_3000, four of them.
	_, err = s.Remote(RemoteAccess{Key: k, PD: pdA, VA: iova + 0x1000, Len: 0x1000, Rights: RemoteWrite})
	pageFault(t, err, 0x7f00_0000_1000, 0x2000, true)
	_, err = s.Local(LocalAccess{Key: k, PD: pdA, VA: iova, Len: 8})
	pageFault(t, err, 0x7f00_0000_0000, 0x1000, false)
	// The other checks come first: a fault says only pages are missing.
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdB, VA: iova, Len: 8, Rights: RemoteWrite}, CheckPD)
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: iova - 1, Len: 8, Rights: RemoteWrite}, CheckRange)

	if _, err := s.MapPages(k, 0x7f00_0000_1000, []uint64{0x20000, 0x10000}); err != nil {
		t.Fatal(err)
	}
	if got := s.MappedPages(k); got != 2 {
		t.Fatalf("%d pages mapped, want 2", got)
	}
	// Page 1 to 0x20000, page 2 to 0x10000: a write across them splits there.
	sp, err := s.Remote(RemoteAccess{Key: k, PD: pdA, VA: 0x7f00_0000_1ffc, Len: 8, Rights: RemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	if n := sp.CopyFrom([]byte("ABCDEFGH")); n != 8 {
		t.Fatalf("copied %d", n)
	}
	if !bytes.Equal(as[0x20000][4092:], []byte("ABCD")) || !bytes.Equal(as[0x10000][:4], []byte("EFGH")) {
		t.Fatal("write across two mapped pages landed wrong")
	}
	// A range with a hole faults over the missing pages only, first to last.
	_, err = s.Remote(RemoteAccess{Key: k, PD: pdA, VA: iova, Len: 3 * 4096, Rights: RemoteRead})
	pageFault(t, err, 0x7f00_0000_0000, 0x4000, false)
	if _, err := s.MapPages(k, 0x7f00_0000_3000, []uint64{0x30000}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Remote(RemoteAccess{Key: k, PD: pdA, VA: iova, Len: 3 * 4096, Rights: RemoteRead})
	pageFault(t, err, 0x7f00_0000_0000, 0x1000, false)

	// A span holds the slices it resolved to: unmapping after the lookup does not move it.
	n, err := s.UnmapPages(k, 0x7f00_0000_1fff, 2)
	if err != nil || n != 2 {
		t.Fatalf("UnmapPages: %d, %v", n, err)
	}
	got := make([]byte, 8)
	sp.CopyTo(got)
	if string(got) != "ABCDEFGH" {
		t.Fatalf("span read %q after unmap", got)
	}
	_, err = s.Remote(RemoteAccess{Key: k, PD: pdA, VA: 0x7f00_0000_1ffc, Len: 8, Rights: RemoteWrite})
	pageFault(t, err, 0x7f00_0000_1000, 0x2000, true)
	if got := s.MappedPages(k); got != 1 {
		t.Fatalf("%d pages mapped, want 1", got)
	}
	// Memory leaving the address space leaves the table too.
	if n, err := s.UnmapBacking(k, 0x30800, 1); n != 1 || err != nil {
		t.Fatalf("UnmapBacking: %d, %v", n, err)
	}
	if got := s.MappedPages(k); got != 0 {
		t.Fatalf("%d pages mapped, want 0", got)
	}
}

// MapPages checks everything before it takes anything.
func TestMapPagesRefusals(t *testing.T) {
	s := newSpace(t)
	as := pages{0x10000: make([]byte, 4096), 0x11000: make([]byte, 4096)}
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: OnDemandPaged(as, 2*4096), IOVA: 0x40000, Access: OnDemand | LocalWrite})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := reg(t, s, pdA, 4096, 0x40000, LocalWrite)
	for _, c := range []struct {
		name  string
		key   Key
		va    uint64
		addrs []uint64
		errno syscall.Errno
	}{
		{"not_on_demand", plain, 0x40000, []uint64{0x10000}, syscall.EINVAL},
		{"stale_key", k.Inc(), 0x40000, []uint64{0x10000}, syscall.EINVAL},
		{"va_misaligned", k, 0x40008, []uint64{0x10000}, syscall.EINVAL},
		{"before_mr", k, 0x3f000, []uint64{0x10000, 0x11000}, syscall.EINVAL},
		{"after_mr", k, 0x41000, []uint64{0x10000, 0x11000}, syscall.EINVAL},
		{"wraps", k, math.MaxUint64 &^ 4095, []uint64{0x10000, 0x11000}, syscall.EINVAL},
		{"page_misaligned", k, 0x40000, []uint64{0x10000, 0x11008}, syscall.EINVAL},
		{"page_unmapped", k, 0x40000, []uint64{0x10000, 0x12000}, syscall.EFAULT},
		{"page_top", k, 0x40000, []uint64{math.MaxUint64 &^ 4095}, syscall.EFAULT},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.MapPages(c.key, c.va, c.addrs)
			wantErrno(t, err, c.errno)
			if got := s.MappedPages(k); got != 0 {
				t.Fatalf("%d pages mapped after a refusal", got)
			}
		})
	}
	if _, err := s.RegMR(MRSpec{PD: pdA, Mem: OnDemandPaged(as, 4096), Access: LocalWrite}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("paged on demand without ON_DEMAND: %v", err)
	}
	fr, err := s.AllocFastRegMR(pdA, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FastReg(FastReg{Key: fr.Inc(), PD: pdA, Mem: OnDemandPaged(as, 4096), Access: OnDemand | LocalWrite}); err == nil {
		t.Fatal("a fast-register MR took memory paged on demand")
	}
}

// An implicit on-demand paged MR covers every wire address; its table is bounded.
func TestImplicitOnDemandPaged(t *testing.T) {
	s := newSpace(t)
	as := pages{0x10000: make([]byte, 4096)}
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: OnDemandPaged(as, math.MaxUint64), Access: OnDemand | LocalWrite | RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Remote(RemoteAccess{Key: k, PD: pdA, VA: math.MaxUint64 - 8, Len: 8, Rights: RemoteRead})
	pageFault(t, err, math.MaxUint64&^4095, 4096, false)
	if _, err := s.MapPages(k, math.MaxUint64&^4095, []uint64{0x10000}); err != nil {
		t.Fatal(err)
	}
	as[0x10000][4094] = 'z' // the implicit MR's last byte: its length is 2^64-1
	sp, err := s.Remote(RemoteAccess{Key: k, PD: pdA, VA: math.MaxUint64 - 1, Len: 1, Rights: RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if sp.CopyTo(b); b[0] != 'z' {
		t.Fatalf("read %q", b)
	}
	if n, err := s.UnmapPages(k, 0, math.MaxUint64); err != nil || n != 1 {
		t.Fatalf("UnmapPages of everything: %d, %v", n, err)
	}
	many := make([]uint64, MaxFaultPages+1)
	for i := range many {
		many[i] = 0x10000
	}
	_, err = s.MapPages(k, 0, many)
	wantErrno(t, err, syscall.ENOSPC)
	if _, err := s.MapPages(k, 0, many[:MaxFaultPages]); err != nil {
		t.Fatal(err)
	}
	_, err = s.MapPages(k, uint64(MaxFaultPages)<<FaultPageShift, many[:1])
	wantErrno(t, err, syscall.ENOSPC)
	if _, err := s.MapPages(k, 0, many[:1]); err != nil {
		t.Fatalf("remapping a mapped page at the bound: %v", err)
	}
}

// Against a model of the table: any sequence of maps, unmaps and accesses faults exactly where
// the model has no page, and otherwise reads what was written through the page mapped.
func TestOnDemandPagedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const npages = 6
		as := pages{}
		for i := range 4 {
			as[uint64(0x100000+i*4096)] = make([]byte, 4096)
		}
		s := New(Config{Rand: Seeded(1)})
		const iova = 0x5000_0000
		k, err := s.RegMR(MRSpec{PD: pdA, Mem: OnDemandPaged(as, npages*4096), IOVA: iova, Access: OnDemand | LocalWrite})
		if err != nil {
			t.Fatal(err)
		}
		model := map[uint64]uint64{} // wire page -> address
		for range rapid.IntRange(1, 30).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				p := rapid.IntRange(0, npages-1).Draw(t, "page")
				cnt := rapid.IntRange(1, npages-p).Draw(t, "count")
				addrs := make([]uint64, cnt)
				for i := range addrs {
					addrs[i] = uint64(0x100000 + rapid.IntRange(0, 3).Draw(t, "at")*4096)
				}
				if _, err := s.MapPages(k, iova+uint64(p)*4096, addrs); err != nil {
					t.Fatal(err)
				}
				for i, a := range addrs {
					model[iova>>12+uint64(p+i)] = a
				}
			case 1:
				off := rapid.Uint64Range(0, npages*4096-1).Draw(t, "off")
				n := rapid.Uint64Range(1, npages*4096-off).Draw(t, "n")
				if _, err := s.UnmapPages(k, iova+off, n); err != nil {
					t.Fatal(err)
				}
				for p := (iova + off) >> 12; p <= (iova+off+n-1)>>12; p++ {
					delete(model, p)
				}
			default:
				off := rapid.Uint64Range(0, npages*4096-1).Draw(t, "off")
				n := rapid.Uint64Range(1, npages*4096-off).Draw(t, "n")
				va := iova + off
				var first, last uint64
				missing := false
				for p := va >> 12; p <= (va+n-1)>>12; p++ {
					if _, ok := model[p]; !ok {
						if !missing {
							first = p
						}
						missing, last = true, p
					}
				}
				sp, err := s.Local(LocalAccess{Key: k, PD: pdA, VA: va, Len: n})
				if missing {
					pf, ok := errors.AsType[*PageFault](err)
					if !ok || pf.VA != first<<12 || pf.Len != (last-first+1)<<12 {
						t.Fatalf("access [0x%x, +%d): %v, want a fault over pages 0x%x-0x%x", va, n, err, first, last)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, n)
				if c := sp.CopyTo(got); uint64(c) != n {
					t.Fatalf("copied %d of %d", c, n)
				}
				for i := range n {
					a := va + i
					pg := as[model[a>>12]]
					if got[i] != pg[a&4095] {
						t.Fatalf("byte %d of the access: %d, want %d", i, got[i], pg[a&4095])
					}
				}
			}
			if s.MappedPages(k) != len(model) {
				t.Fatalf("%d pages mapped, model has %d", s.MappedPages(k), len(model))
			}
		}
	})
}
