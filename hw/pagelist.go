package hw

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
)

// Supported page sizes (abi.RegPageSizes): 4 KiB and 2 MiB.
const pageSizes = 1<<12 | 1<<21

// tablePage is the size of a page of a multi-level page list's addresses.
const tablePage = abi.PLEntriesPerPage * 8

// pageList is a decoded page-list descriptor.
type pageList struct {
	addr   uint64
	pages  uint32
	shift  uint8
	levels uint8
}

// decodePageList copies a page list's fields: a REG_MR work request's list is read when the
// request runs, after its WQE slot may have been written again.
func decodePageList(p abi.PageList) pageList {
	return pageList{addr: p.Addr(), pages: p.Pages(), shift: p.Shift(), levels: p.Levels()}
}

// errf is a failure a driver sees as errno.
func errf(errno syscall.Errno, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errno)
}

// resolvePages reads the page addresses a page list names, through guest memory, checking
// everything a guest could get wrong: the page size, the levels, the count against the levels'
// capacity and against max (EINVAL, read without memory), then that every table and every page
// is in mapped guest memory (EFAULT), then their alignment (EINVAL). A list that reaches outside
// guest memory is EFAULT whatever else is wrong with where it points, as docs/device.md says,
// for every command that takes one. Every number is checked, and every table found, before the
// list sizes anything: what it allocates is the list itself, 8 bytes a page, and one table page
// of scratch.
func resolvePages(mem *engine.GuestMemory, pl pageList, max uint32) (pageSize uint64, pages []uint64, err error) {
	if pageSize, err = checkPageList(pl, max); err != nil {
		return 0, nil, err
	}
	// The first misaligned table or page, reported once everything is known to be mapped.
	var misaligned error
	align := func(what string, addr, to uint64) {
		if misaligned == nil && addr%to != 0 {
			misaligned = errf(syscall.EINVAL, "page list: %s 0x%x not aligned to %d", what, addr, to)
		}
	}
	if pl.levels == 0 {
		if !mem.Mapped(pl.addr, pageSize) {
			return 0, nil, errf(syscall.EFAULT, "page list: page 0x%x is not mapped", pl.addr)
		}
		if align("page", pl.addr, pageSize); misaligned != nil {
			return 0, nil, misaligned
		}
		return pageSize, []uint64{pl.addr}, nil
	}
	var scratch [tablePage]byte
	// The tables of page addresses: the list's own page (one level), or the addresses in it
	// (two), read and checked before anything is sized by the count.
	var tableBuf [abi.PLEntriesPerPage]uint64
	tables := tableBuf[:1]
	tables[0] = pl.addr
	if pl.levels == 2 {
		n := (pl.pages + abi.PLEntriesPerPage - 1) / abi.PLEntriesPerPage
		if err := readTable(mem, pl.addr, scratch[:8*n]); err != nil {
			return 0, nil, err
		}
		align("table", pl.addr, tablePage)
		tables = tableBuf[:n]
		for i := range tables {
			tables[i] = binary.LittleEndian.Uint64(scratch[8*i:])
		}
	}
	for _, t := range tables {
		if !mem.Mapped(t, tablePage) {
			return 0, nil, errf(syscall.EFAULT, "page list: table 0x%x is not mapped", t)
		}
		align("table", t, tablePage)
	}
	pages = make([]uint64, 0, pl.pages)
	for _, t := range tables {
		n := min(pl.pages-uint32(len(pages)), abi.PLEntriesPerPage)
		b := scratch[:8*n]
		if err := readTable(mem, t, b); err != nil {
			return 0, nil, err
		}
		for i := range n {
			p := binary.LittleEndian.Uint64(b[8*i:])
			if !mem.Mapped(p, pageSize) {
				return 0, nil, errf(syscall.EFAULT, "page list: page 0x%x is not mapped", p)
			}
			align("page", p, pageSize)
			pages = append(pages, p)
		}
	}
	if misaligned != nil {
		return 0, nil, misaligned
	}
	return pageSize, pages, nil
}

// checkPageList checks a page list's own fields, reading nothing: the page size, the levels,
// the count against the levels' capacity and against max.
func checkPageList(pl pageList, max uint32) (pageSize uint64, err error) {
	if pl.shift >= 64 || pageSizes&(uint64(1)<<pl.shift) == 0 {
		return 0, errf(syscall.EINVAL, "page list: pages of 2^%d bytes", pl.shift)
	}
	var limit uint64
	switch pl.levels {
	case 0:
		limit = 1
	case 1:
		limit = abi.PLEntriesPerPage
	case 2:
		limit = abi.PLEntriesPerPage * abi.PLEntriesPerPage
	default:
		return 0, errf(syscall.EINVAL, "page list: %d levels", pl.levels)
	}
	switch {
	case pl.pages == 0:
		return 0, errf(syscall.EINVAL, "page list: no pages")
	case uint64(pl.pages) > limit:
		return 0, errf(syscall.EINVAL, "page list: %d pages in %d levels", pl.pages, pl.levels)
	case pl.pages > max:
		return 0, errf(syscall.EINVAL, "page list: %d pages, at most %d", pl.pages, max)
	}
	return uint64(1) << pl.shift, nil
}

// readTable reads len(b) bytes of page addresses from the table page at addr: EFAULT if it is
// not mapped (its alignment is the caller's to check, after).
func readTable(mem *engine.GuestMemory, addr uint64, b []byte) error {
	if !mem.Mapped(addr, tablePage) {
		return errf(syscall.EFAULT, "page list: table 0x%x is not mapped", addr)
	}
	return readGuest(mem, addr, b)
}

// readGuest copies guest memory at addr into p, or fails with EFAULT if any of it is unmapped.
// The copy holds the lock GuestMemory.Unmap takes, so an unmap waits for it.
func readGuest(mem *engine.GuestMemory, addr uint64, p []byte) error {
	if !mem.Read(addr, p) {
		return errf(syscall.EFAULT, "guest memory [0x%x, +%d) is not mapped", addr, len(p))
	}
	return nil
}

// writeGuest copies p into guest memory at addr, or fails with EFAULT. Like readGuest, it
// copies under the lock an unmap waits for.
func writeGuest(mem *engine.GuestMemory, addr uint64, p []byte) error {
	if !mem.Write(addr, p) {
		return errf(syscall.EFAULT, "guest memory [0x%x, +%d) is not mapped", addr, len(p))
	}
	return nil
}
