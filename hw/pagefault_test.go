package hw

import (
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/hw/abi"
)

// Beyond the bench's RAM (1 MiB at ramBase): no guest memory is mapped there.
const (
	unmappedPage = 0x4000_0000
	spareTable   = 11 // a table page of the fixture's no command uses
)

// pageListAt is where a command's valid arguments hold a page list, and the fixture's table
// page that lists its pages.
type pageListAt struct {
	name  string
	op    uint16
	off   int
	table int
	pages uint32
}

var pageLists = []pageListAt{
	{"CREATE_EQ", abi.OpCreateEQ, abi.CreateEQPages, 5, 1},
	{"SET_AV_TABLE", abi.OpSetAVTable, abi.SetAVPages, 6, 1},
	{"REG_MR", abi.OpRegMR, abi.RegMRPages, 4, 2},
	{"REREG_MR", abi.OpReregMR, abi.ReregMRReg + abi.RegMRPages, 4, 2},
	{"CREATE_CQ", abi.OpCreateCQ, abi.CreateCQQueue + abi.QueuePages, 0, 1},
	{"RESIZE_CQ", abi.OpResizeCQ, abi.ResizeCQQueue + abi.QueuePages, 7, 1},
	{"CREATE_QP_SQ", abi.OpCreateQP, abi.CreateQPSQ + abi.QueuePages, 2, 1},
	{"CREATE_QP_RQ", abi.OpCreateQP, abi.CreateQPRQ + abi.QueuePages, 3, 1},
	{"CREATE_SRQ", abi.OpCreateSRQ, abi.CreateSRQQueue + abi.QueuePages, 1, 1},
	{"MODIFY_SRQ", abi.OpModifySRQ, abi.ModifySRQQueue + abi.QueuePages, 8, 1},
	{"CREATE_ETH_RING", abi.OpCreateEthRing, abi.EthRingQueue + abi.QueuePages, 9, 1},
}

// Every command that takes guest pages answers EFAULT for a page list that reaches outside
// mapped guest memory, whatever else is odd about where it reaches (a misaligned page or table,
// a length the pages could not hold): docs/device.md's page lists. What is wrong with the list
// itself, read without memory (its page size, levels or count), is EINVAL before that.
func TestPageListOutsideGuestMemory(t *testing.T) {
	le := binary.LittleEndian
	type variant struct {
		name string
		// set changes the valid page list pl (in args) and the fixture's guest memory.
		set   func(fx *fixture, pl []byte, c pageListAt)
		errno syscall.Errno
	}
	variants := []variant{
		{"table_unmapped", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], unmappedPage)
		}, syscall.EFAULT},
		{"table_unmapped_misaligned", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], unmappedPage+8)
		}, syscall.EFAULT},
		{"table_unmapped_top", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], 0xffff_ffff_ffff_ffff)
		}, syscall.EFAULT},
		{"page_unmapped", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(fx.at(fx.table(c.table)+8*uint64(c.pages-1)), unmappedPage)
		}, syscall.EFAULT},
		{"page_unmapped_misaligned", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(fx.at(fx.table(c.table)+8*uint64(c.pages-1)), unmappedPage+8)
		}, syscall.EFAULT},
		{"one_page_unmapped", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], unmappedPage)
			le.PutUint32(pl[abi.PLPages:], 1)
			pl[abi.PLLevels] = 0
		}, syscall.EFAULT},
		{"one_page_unmapped_misaligned", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], unmappedPage+0x10)
			le.PutUint32(pl[abi.PLPages:], 1)
			pl[abi.PLLevels] = 0
		}, syscall.EFAULT},
		{"huge_page_half_mapped", func(fx *fixture, pl []byte, c pageListAt) {
			// A 2 MiB page at 0: the bench's RAM is its second half.
			le.PutUint64(pl[abi.PLAddr:], 0)
			le.PutUint32(pl[abi.PLPages:], 1)
			pl[abi.PLShift], pl[abi.PLLevels] = 21, 0
		}, syscall.EFAULT},
		{"second_level_table_unmapped", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(fx.at(fx.table(spareTable)), unmappedPage)
			le.PutUint64(pl[abi.PLAddr:], fx.table(spareTable))
			pl[abi.PLLevels] = 2
		}, syscall.EFAULT},
		{"second_level_table_unmapped_misaligned", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(fx.at(fx.table(spareTable)), unmappedPage+8)
			le.PutUint64(pl[abi.PLAddr:], fx.table(spareTable))
			pl[abi.PLLevels] = 2
		}, syscall.EFAULT},
		// In guest memory, but misaligned: EINVAL.
		{"table_misaligned", func(fx *fixture, pl []byte, c pageListAt) {
			t := fx.table(c.table)
			copy(fx.at(t + 8)[:8*c.pages], append([]byte(nil), fx.at(t)[:8*c.pages]...))
			le.PutUint64(pl[abi.PLAddr:], t+8)
		}, syscall.EINVAL},
		{"page_misaligned", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(fx.at(fx.table(c.table)+8*uint64(c.pages-1)), fx.ringPage(10)+8)
		}, syscall.EINVAL},
		// Wrong without reading memory: EINVAL, wherever it points.
		{"levels_unmapped", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], unmappedPage)
			pl[abi.PLLevels] = 3
		}, syscall.EINVAL},
		{"page_size_unmapped", func(fx *fixture, pl []byte, c pageListAt) {
			le.PutUint64(pl[abi.PLAddr:], unmappedPage)
			pl[abi.PLShift] = 13
		}, syscall.EINVAL},
	}
	for _, c := range pageLists {
		for _, v := range variants {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				fx := newFixture(t)
				args := fx.validArgs(c.op)
				v.set(fx, args[c.off:c.off+abi.PageListSize], c)
				want := v.errno
				if c.op == abi.OpSetAVTable && v.name == "huge_page_half_mapped" {
					want = syscall.EINVAL // an AV table is in 4 KiB pages: wrong before it is read
				}
				if errno, _ := fx.cmd(c.op, args); errno != want {
					t.Fatalf("%v, want %v", errno, want)
				}
			})
		}
	}
}
