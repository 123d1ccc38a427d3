package vfiouser

import (
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/internal/sockguard"
)

// rawMsg builds a request with the header's size field set to the real length.
func rawMsg(id uint16, cmd Command, flags uint32, body []byte) []byte {
	m := make([]byte, HeaderSize+len(body))
	Header{ID: id, Cmd: cmd, Size: uint32(len(m)), Flags: flags}.put(m)
	copy(m[HeaderSize:], body)
	return m
}

func u32s(vs ...uint32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		le.PutUint32(b[4*i:], v)
	}
	return b
}

func rw(off uint64, region, count uint32, data []byte) []byte {
	b := make([]byte, regionRWSize, regionRWSize+len(data))
	le.PutUint64(b, off)
	le.PutUint32(b[8:], region)
	le.PutUint32(b[12:], count)
	return append(b, data...)
}

func unmapBody(iova, size uint64, flags uint32) []byte {
	b := make([]byte, dmaUnmapSize)
	le.PutUint32(b, dmaUnmapSize)
	le.PutUint32(b[4:], flags)
	le.PutUint64(b[8:], iova)
	le.PutUint64(b[16:], size)
	return b
}

// Every malformed message gets the error reply it deserves (the request's id and command,
// the error flag, the errno, nothing else), the descriptors that came with it are closed,
// and the next valid message is served.
func TestMalformedMessages(t *testing.T) {
	dev := newFakeDev(t)
	c, _ := serve(t, newServer(t, dev))
	mapRAM(t, c)
	shortHeader := make([]byte, HeaderSize)
	Header{ID: 7, Cmd: CmdDeviceGetInfo, Size: 8}.put(shortHeader)
	overLimit := rawMsg(7, CmdRegionWrite, 0, rw(0, 0, 2<<20, make([]byte, 2<<20)))
	multi := func(n uint64, count uint32) []byte {
		b := make([]byte, 8+multiWrEntry*int(n))
		le.PutUint64(b, n)
		for i := range int(n) {
			le.PutUint32(b[8+i*multiWrEntry+12:], count)
		}
		return b
	}
	cases := []struct {
		name  string
		msg   []byte
		nfds  int  // eventfds sent with it
		memfd bool // send a memfd instead
		errno syscall.Errno
	}{
		{"short header", shortHeader, 0, false, syscall.EINVAL},
		{"short header with fds", shortHeader, 2, false, syscall.EINVAL},
		{"message over the size limit", overLimit, 1, false, syscall.E2BIG},
		{"DMA_MAP body shorter than argsz", rawMsg(7, CmdDMAMap, 0, append(u32s(32, 3), make([]byte, 16)...)), 0, false, syscall.EINVAL},
		{"DMA_MAP argsz 24", rawMsg(7, CmdDMAMap, 0, append(u32s(24, 3), make([]byte, 24)...)), 0, false, syscall.EINVAL},
		{"DMA_MAP with two fds", rawMsg(7, CmdDMAMap, 0, append(u32s(32, 3, 0, 0, 0, 0x100, 0, 0x1000), 0, 0, 0, 0)), 2, false, syscall.EINVAL},
		{"DMA_UNMAP argsz 32", rawMsg(7, CmdDMAUnmap, 0, append(unmapBody(0, 1<<20, 0), make([]byte, 8)...)), 0, false, syscall.EINVAL},
		{"DMA_UNMAP of an unknown range", rawMsg(7, CmdDMAUnmap, 0, unmapBody(0x5000000, 0x1000, 0)), 0, false, syscall.ENOENT},
		{"DMA_UNMAP with a dirty bitmap", rawMsg(7, CmdDMAUnmap, 0, unmapBody(0, 1<<20, 1)), 0, false, syscall.ENOTSUP},
		{"DEVICE_GET_INFO argsz 8", rawMsg(7, CmdDeviceGetInfo, 0, u32s(8, 0, 0, 0)), 0, false, syscall.EINVAL},
		{"DEVICE_GET_INFO short body", rawMsg(7, CmdDeviceGetInfo, 0, u32s(16)), 0, false, syscall.EINVAL},
		{"fds on DEVICE_GET_INFO", rawMsg(7, CmdDeviceGetInfo, 0, u32s(16, 0, 0, 0)), 1, false, syscall.EINVAL},
		{"memfd on REGION_WRITE", rawMsg(7, CmdRegionWrite, 0, rw(0, 0, 1, []byte{1})), 0, true, syscall.EINVAL},
		{"REGION_INFO of region 9", rawMsg(7, CmdRegionInfo, 0, append(u32s(32, 0, 9), make([]byte, 20)...)), 0, false, syscall.EINVAL},
		{"REGION_INFO argsz 16", rawMsg(7, CmdRegionInfo, 0, append(u32s(16, 0, 0), make([]byte, 20)...)), 0, false, syscall.EINVAL},
		{"IRQ_INFO of index 5", rawMsg(7, CmdIRQInfo, 0, u32s(16, 0, 5, 0)), 0, false, syscall.EINVAL},
		{"SET_IRQS argsz beyond the body", rawMsg(7, CmdSetIRQs, 0, u32s(24, IRQDataEventfd|IRQActionTrig, 2, 0, 1)), 1, false, syscall.EINVAL},
		{"SET_IRQS too many fds", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, 2, 0, 4)), 17, false, syscall.EINVAL},
		{"SET_IRQS more fds than a message holds", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, 2, 0, 4)), 40, false, syscall.EINVAL},
		{"SET_IRQS fds not matching count", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, 2, 0, 3)), 2, false, syscall.EINVAL},
		{"SET_IRQS vectors past the index", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, 2, 3, 2)), 2, false, syscall.EINVAL},
		{"SET_IRQS start+count wraps", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataNone|IRQActionTrig, 2, 0xffffffff, 2)), 0, false, syscall.EINVAL},
		{"SET_IRQS index 9", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, 9, 0, 1)), 1, false, syscall.EINVAL},
		{"SET_IRQS a memfd for an eventfd", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataEventfd|IRQActionTrig, 2, 0, 1)), 0, true, syscall.EINVAL},
		{"SET_IRQS two data types", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataNone|IRQDataBool|IRQActionTrig, 2, 0, 1)), 0, false, syscall.EINVAL},
		{"SET_IRQS fds with DATA_NONE", rawMsg(7, CmdSetIRQs, 0, u32s(20, IRQDataNone|IRQActionTrig, 2, 0, 1)), 1, false, syscall.EINVAL},
		{"SET_IRQS DATA_BOOL short", rawMsg(7, CmdSetIRQs, 0, append(u32s(21, IRQDataBool|IRQActionTrig, 2, 0, 2), 1)), 0, false, syscall.EINVAL},
		{"REGION_READ of region 9", rawMsg(7, CmdRegionRead, 0, rw(0, 9, 4, nil)), 0, false, syscall.EINVAL},
		{"REGION_READ of region 2^32-1", rawMsg(7, CmdRegionRead, 0, rw(0, 0xffffffff, 4, nil)), 0, false, syscall.EINVAL},
		{"REGION_READ of an unused region", rawMsg(7, CmdRegionRead, 0, rw(0, 1, 4, nil)), 0, false, syscall.EINVAL},
		{"REGION_READ past the end", rawMsg(7, CmdRegionRead, 0, rw(4092, 0, 8, nil)), 0, false, syscall.EINVAL},
		{"REGION_READ offset wraps", rawMsg(7, CmdRegionRead, 0, rw(^uint64(0)-3, 0, 8, nil)), 0, false, syscall.EINVAL},
		{"REGION_READ over max_data_xfer_size", rawMsg(7, CmdRegionRead, 0, rw(0, 0, 2<<20, nil)), 0, false, syscall.E2BIG},
		{"REGION_READ with data", rawMsg(7, CmdRegionRead, 0, rw(0, 0, 4, []byte{1, 2, 3, 4})), 0, false, syscall.EINVAL},
		{"REGION_WRITE count above its data", rawMsg(7, CmdRegionWrite, 0, rw(0, 0, 8, []byte{1, 2, 3, 4})), 0, false, syscall.EINVAL},
		{"REGION_WRITE count below its data", rawMsg(7, CmdRegionWrite, 0, rw(0, 0, 2, []byte{1, 2, 3, 4})), 0, false, syscall.EINVAL},
		{"REGION_WRITE of oversized data", rawMsg(7, CmdRegionWrite, 0, rw(0, 0, 1<<20+8, make([]byte, 1<<20+8))), 0, false, syscall.E2BIG},
		{"REGION_WRITE to a read-only region", rawMsg(7, CmdRegionWrite, 0, rw(0, 4, 1, []byte{1})), 0, false, syscall.EINVAL},
		{"REGION_WRITE past the end", rawMsg(7, CmdRegionWrite, 0, rw(4095, 0, 2, []byte{1, 2})), 0, false, syscall.EINVAL},
		{"REGION_WRITE_MULTI of 201", rawMsg(7, CmdRegionWriteMulti, 0, multi(201, 1)), 0, false, syscall.EINVAL},
		{"REGION_WRITE_MULTI entry of 9 bytes", rawMsg(7, CmdRegionWriteMulti, 0, multi(2, 9)), 0, false, syscall.EINVAL},
		{"REGION_WRITE_MULTI count beyond the body", rawMsg(7, CmdRegionWriteMulti, 0, multi(2, 1)[:40]), 0, false, syscall.EINVAL},
		{"DEVICE_RESET with a body", rawMsg(7, CmdDeviceReset, 0, u32s(0)), 0, false, syscall.EINVAL},
		{"GET_REGION_IO_FDS", rawMsg(7, CmdRegionIOFDs, 0, u32s(32, 0, 0, 0)), 0, false, syscall.ENOSYS},
		{"DMA_READ from the client", rawMsg(7, CmdDMARead, 0, make([]byte, 24)), 0, false, syscall.ENOSYS},
		{"unknown command 99", rawMsg(7, 99, 0, nil), 0, false, syscall.ENOSYS},
		{"a reply from the client", rawMsg(7, CmdDeviceGetInfo, FlagReply, u32s(16, 0, 0, 0)), 0, false, syscall.EINVAL},
		{"unknown header flags", rawMsg(7, CmdDeviceGetInfo, 0x100, u32s(16, 0, 0, 0)), 0, false, syscall.EINVAL},
	}
	before := openFDs(t)
	for _, tc := range cases {
		var fds []int
		for range tc.nfds {
			fds = append(fds, eventfd(t))
		}
		if tc.memfd {
			fds = append(fds, memfd(t, 4096, nil))
		}
		h, body, rfds, err := c.CallRaw(tc.msg, fds, true)
		sockguard.CloseFDs(fds)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := Header{ID: 7, Cmd: parseHeader(tc.msg).Cmd, Size: HeaderSize, Flags: FlagReply | FlagError, Errno: uint32(tc.errno)}
		if h != want || len(body) != 0 || len(rfds) != 0 {
			t.Errorf("%s: reply %+v with %d bytes and %d fds, want %+v", tc.name, h, len(body), len(rfds), want)
		}
		if info, err := c.GetDeviceInfo(); err != nil || info.NumRegions != PCINumRegions {
			t.Fatalf("after %s: the next valid message got %+v, %v", tc.name, info, err)
		}
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after the malformed messages, %d before", after, before)
	}
	// None of them reached the device, and the DMA map is intact.
	if calls := dev.takeCalls(); len(calls) != 1 {
		t.Errorf("device calls %q, want only the map", calls)
	}
	if err := c.DMAUnmap(0, 1<<20, false); err != nil {
		t.Fatal(err)
	}
}
