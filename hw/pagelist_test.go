package hw

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// guestWith maps 1 MiB of guest RAM at 0x100000 and returns it with its backing slice.
func guestWith(t testing.TB) (*emu.GuestMemory, []byte) {
	t.Helper()
	g := &emu.GuestMemory{}
	ram := make([]byte, 1<<20)
	if err := g.Map(0x100000, ram); err != nil {
		t.Fatal(err)
	}
	return g, ram
}

// putTable writes page addresses as a table at guest address addr (inside ram at 0x100000).
func putTable(ram []byte, addr uint64, pages []uint64) {
	for i, p := range pages {
		binary.LittleEndian.PutUint64(ram[addr-0x100000+uint64(8*i):], p)
	}
}

func TestResolvePages(t *testing.T) {
	g, ram := guestWith(t)
	// 4 MiB more at 0x4000_0000, for 2 MiB pages and the many pages of two levels.
	if err := g.Map(0x4000_0000, make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	l1 := []uint64{0x180000, 0x181000, 0x17f000}
	putTable(ram, 0x110000, l1)
	// Two levels, 600 pages: the top table names two tables of up to 512.
	var many []uint64
	for i := range 600 {
		many = append(many, uint64(0x4000_0000+i*0x1000))
	}
	putTable(ram, 0x120000, []uint64{0x121000, 0x122000})
	putTable(ram, 0x121000, many[:512])
	putTable(ram, 0x122000, many[512:])
	putTable(ram, 0x130000, []uint64{0x180000, 0x180800}) // the second is not page-aligned
	putTable(ram, 0x140000, []uint64{0x4000_0000, 0x4020_0000})
	putTable(ram, 0x150000, []uint64{0x4000_0000, 0x4000_1000}) // the second is not 2 MiB-aligned
	putTable(ram, 0x160000, []uint64{0x180000, 0x800000})       // the second is not mapped
	putTable(ram, 0x170000, []uint64{0x180800, 0x800800})       // both misaligned, the second not mapped
	for i := range 512 {
		putTable(ram, 0x1ff000+uint64(8*i), []uint64{0x180000})
	}
	for _, c := range []struct {
		name  string
		pl    pageList
		want  []uint64
		errno syscall.Errno
	}{
		{"one_page", pageList{addr: 0x180000, pages: 1, shift: 12}, []uint64{0x180000}, 0},
		{"one_level", pageList{addr: 0x110000, pages: 3, shift: 12, levels: 1}, l1, 0},
		{"two_levels", pageList{addr: 0x120000, pages: 600, shift: 12, levels: 2}, many, 0},
		{"huge_pages", pageList{addr: 0x140000, pages: 2, shift: 21, levels: 1}, []uint64{0x4000_0000, 0x4020_0000}, 0},
		{"page_misaligned", pageList{addr: 0x180800, pages: 1, shift: 12}, nil, syscall.EINVAL},
		{"listed_page_misaligned", pageList{addr: 0x130000, pages: 2, shift: 12, levels: 1}, nil, syscall.EINVAL},
		{"huge_page_misaligned", pageList{addr: 0x150000, pages: 2, shift: 21, levels: 1}, nil, syscall.EINVAL},
		// Outside guest memory is EFAULT, whatever else is wrong with where the list points.
		{"page_unmapped", pageList{addr: 0x300000, pages: 1, shift: 12}, nil, syscall.EFAULT},
		{"page_unmapped_misaligned", pageList{addr: 0x300800, pages: 1, shift: 12}, nil, syscall.EFAULT},
		{"huge_page_half_mapped", pageList{addr: 0, pages: 1, shift: 21}, nil, syscall.EFAULT},
		{"listed_page_unmapped", pageList{addr: 0x160000, pages: 2, shift: 12, levels: 1}, nil, syscall.EFAULT},
		{"listed_pages_misaligned_one_unmapped", pageList{addr: 0x170000, pages: 2, shift: 12, levels: 1}, nil, syscall.EFAULT},
		{"table_unmapped_misaligned", pageList{addr: 0x800008, pages: 2, shift: 12, levels: 1}, nil, syscall.EFAULT},
		{"page_size_8k", pageList{addr: 0x180000, pages: 1, shift: 13}, nil, syscall.EINVAL},
		{"page_size_2^64", pageList{addr: 0, pages: 1, shift: 64}, nil, syscall.EINVAL},
		{"three_levels", pageList{addr: 0x110000, pages: 1, shift: 12, levels: 3}, nil, syscall.EINVAL},
		{"no_pages", pageList{addr: 0x110000, pages: 0, shift: 12, levels: 1}, nil, syscall.EINVAL},
		{"two_pages_no_table", pageList{addr: 0x180000, pages: 2, shift: 12}, nil, syscall.EINVAL},
		{"more_than_a_table", pageList{addr: 0x110000, pages: 513, shift: 12, levels: 1}, nil, syscall.EINVAL},
		{"more_than_allowed", pageList{addr: 0x120000, pages: 600, shift: 12, levels: 2}, nil, syscall.EINVAL},
		{"table_misaligned", pageList{addr: 0x110008, pages: 2, shift: 12, levels: 1}, nil, syscall.EINVAL},
		{"table_unmapped", pageList{addr: 0x800000, pages: 2, shift: 12, levels: 1}, nil, syscall.EFAULT},
		{"table_at_the_end_of_ram", pageList{addr: 0x1ff000, pages: 512, shift: 12, levels: 1}, []uint64{}, 0},
		{"second_level_unmapped", pageList{addr: 0x1a0000, pages: 2, shift: 12, levels: 2}, nil, syscall.EFAULT},
	} {
		t.Run(c.name, func(t *testing.T) {
			max := uint32(1 << 20)
			if c.name == "more_than_allowed" {
				max = 599
			}
			if c.name == "second_level_unmapped" {
				putTable(ram, 0x1a0000, []uint64{0x900000})
			}
			_, pages, err := resolvePages(g, c.pl, max)
			if c.errno != 0 {
				if !errors.Is(err, c.errno) {
					t.Fatalf("err %v, want %v", err, c.errno)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "table_at_the_end_of_ram" {
				if len(pages) != 512 {
					t.Fatalf("%d pages", len(pages))
				}
				return
			}
			if len(pages) != len(c.want) {
				t.Fatalf("%d pages, want %d", len(pages), len(c.want))
			}
			for i := range pages {
				if pages[i] != c.want[i] {
					t.Fatalf("page %d is 0x%x, want 0x%x", i, pages[i], c.want[i])
				}
			}
		})
	}
}

// FuzzResolvePages: any descriptor over any guest memory resolves to at most the pages allowed,
// each aligned to the page size, or fails with EINVAL or EFAULT; nothing panics, nothing reads
// outside the mapped RAM.
func FuzzResolvePages(f *testing.F) {
	f.Add(make([]byte, abi.PageListSize), []byte{1, 2, 3})
	f.Add([]byte{0, 0, 0x11, 0, 0, 0, 0, 0, 3, 0, 0, 0, 12, 1, 0, 0}, []byte{0, 0x10, 0x20, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0x12, 0, 0, 0, 0, 0, 0x58, 2, 0, 0, 12, 2, 0, 0}, []byte{0, 0x10, 0x12, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, desc, fill []byte) {
		if len(desc) < abi.PageListSize {
			return
		}
		g, ram := guestWith(t)
		for i := range ram {
			if len(fill) > 0 {
				ram[i] = fill[i%len(fill)]
			}
		}
		const max = 1 << 12
		size, pages, err := resolvePages(g, decodePageList(desc), max)
		if err != nil {
			if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EFAULT) {
				t.Fatalf("error %v is neither EINVAL nor EFAULT", err)
			}
			return
		}
		if len(pages) == 0 || len(pages) > max {
			t.Fatalf("%d pages", len(pages))
		}
		for _, p := range pages {
			if p%size != 0 {
				t.Fatalf("page 0x%x not aligned to %d", p, size)
			}
		}
	})
}
