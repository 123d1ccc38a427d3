package driver_test

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/driver"
)

// open opens the driver over a fresh in-process function.
func open(t *testing.T) *driver.Driver {
	t.Helper()
	d, err := driver.Open(inProcess(t, nil), driver.Arena{Base: ramBase, Size: ramSize})
	must(t, err)
	return d
}

// wantErrno fails unless err is errno.
func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("%s: %v, want %v", what, err, errno)
	}
}

// defined is the part of wc that verbs define: all of it on success; on an error, the work
// request, the status and the QP (opcode and byte_len are undefined then).
func defined(wc driver.WC) driver.WC {
	if wc.Status == 0 {
		return wc
	}
	return driver.WC{WRID: wc.WRID, Status: wc.Status, QPNum: wc.QPNum}
}

// Destroying what is in use is EBUSY and changes nothing; once its users are gone it succeeds,
// and a second time it is ENOENT. Destroyed in the reverse order of their making, the objects
// give their rings back to the arena, which is a bump allocator.
func TestDestroyVerbs(t *testing.T) {
	d := open(t)
	pd, err := d.AllocPD()
	must(t, err)
	mark, err := d.Alloc(4096)
	must(t, err)
	eq, err := d.CreateEQ(4, abi.EQCompletion, 1)
	must(t, err)
	cq, err := d.CreateCQ(4, eq)
	must(t, err)
	srq, err := d.CreateSRQ(pd, 4, 1, 0)
	must(t, err)
	qp, err := d.CreateQPOnSRQ(pd, cq, cq, srq, driver.QPCaps{SendLog: 4, MaxSendSGE: 1})
	must(t, err)

	wantErrno(t, "DEALLOC_PD with objects", d.DeallocPD(pd), syscall.EBUSY)
	wantErrno(t, "DESTROY_CQ of a QP's CQ", cq.Destroy(), syscall.EBUSY)
	wantErrno(t, "DESTROY_SRQ of a QP's SRQ", srq.Destroy(), syscall.EBUSY)
	wantErrno(t, "DESTROY_EQ of a CQ's EQ", eq.Destroy(), syscall.EBUSY)

	must(t, qp.Destroy())
	wantErrno(t, "DESTROY_QP again", qp.Destroy(), syscall.ENOENT)
	wantErrno(t, "DEALLOC_PD with an SRQ", d.DeallocPD(pd), syscall.EBUSY)
	must(t, srq.Destroy())
	wantErrno(t, "DESTROY_SRQ again", srq.Destroy(), syscall.ENOENT)
	must(t, cq.Destroy())
	wantErrno(t, "DESTROY_CQ again", cq.Destroy(), syscall.ENOENT)
	must(t, eq.Destroy())
	wantErrno(t, "DESTROY_EQ again", eq.Destroy(), syscall.ENOENT)
	must(t, d.DeallocPD(pd))
	wantErrno(t, "DEALLOC_PD again", d.DeallocPD(pd), syscall.ENOENT)

	if next, err := d.Alloc(4096); err != nil || next != mark+4096 {
		t.Fatalf("after the destroys the arena gives 0x%x (%v), want 0x%x", next, err, mark+4096)
	}
	// A create the device refuses gives its ring back too.
	_, err = d.CreateCQ(4, &driver.EQ{Num: 99})
	wantErrno(t, "CREATE_CQ on an unknown EQ", err, syscall.ENOENT)
	if next, err := d.Alloc(4096); err != nil || next != mark+2*4096 {
		t.Fatalf("after a refused create the arena gives 0x%x (%v), want 0x%x", next, err, mark+2*4096)
	}
}

// An MR or window keeps its PD: DEALLOC_PD is EBUSY until it is freed.
func TestDeallocPDWithMR(t *testing.T) {
	d := open(t)
	pd, err := d.AllocPD()
	must(t, err)
	mr, err := d.RegMR(pd, 4096, 1)
	must(t, err)
	mw, err := d.AllocMW(pd, abi.STagMWType2B)
	must(t, err)
	wantErrno(t, "DEALLOC_PD with an MR and a window", d.DeallocPD(pd), syscall.EBUSY)
	must(t, d.DeallocSTag(mr.Key))
	wantErrno(t, "DEALLOC_PD with a window", d.DeallocPD(pd), syscall.EBUSY)
	must(t, d.DeallocSTag(mw))
	must(t, d.DeallocPD(pd))
}

// QUERY_QP answers what MODIFY_QP set, the state the QP is in and the capacities its rings and
// CreateQP gave; a QP that is gone is ENOENT.
func TestQueryQP(t *testing.T) {
	lb := newLoopback(t)
	got, err := lb.q1.Query()
	must(t, err)
	want := driver.QPAttr{State: 3, PathMTU: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12, MaxRdAtomic: 4, MaxDestRdAtomic: 4,
		HopLimit: 64, PortNum: 1, AccessFlags: allAccess &^ (1 | 16), DestQPN: lb.q2.Num,
		DGID:      [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1},
		MaxSendWR: 31, MaxRecvWR: 15, MaxInline: 64, MaxSendSGE: 2, MaxRecvSGE: 2}
	if got != want {
		t.Fatalf("QUERY_QP in RTS:\n got %+v\nwant %+v", got, want)
	}
	// RTS to RTS changes the access flags and the RNR timer; to ERR, the state.
	must(t, lb.q1.Modify(driver.QPAttr{State: 3, AccessFlags: 2, MinRNRTimer: 20}, 1|8|1<<15))
	must(t, lb.q1.Modify(driver.QPAttr{State: 6}, 1))
	got, err = lb.q1.Query()
	must(t, err)
	want.State, want.AccessFlags, want.MinRNRTimer = 6, 2, 20
	if got != want {
		t.Fatalf("QUERY_QP in ERR:\n got %+v\nwant %+v", got, want)
	}
	must(t, lb.q1.Destroy())
	_, err = lb.q1.Query()
	wantErrno(t, "QUERY_QP of a destroyed QP", err, syscall.ENOENT)
}

// MODIFY_SRQ arms the limit QUERY_SRQ then reports; a limit the ring cannot reach is EINVAL, as
// is a resize to fewer receives than are posted; a resize moves the SRQ to a bigger ring; an
// SRQ that is gone is ENOENT.
func TestModifyQuerySRQ(t *testing.T) {
	d := open(t)
	pd, err := d.AllocPD()
	must(t, err)
	srq, err := d.CreateSRQ(pd, 4, 2, 3)
	must(t, err)
	for _, c := range []struct {
		limit uint32
		err   syscall.Errno
	}{{0, 0}, {5, 0}, {15, 0}, {16, syscall.EINVAL}} {
		err := srq.Modify(driver.SRQAttr{Limit: c.limit}, driver.SRQAttrLimit)
		if c.err != 0 {
			wantErrno(t, "MODIFY_SRQ beyond the ring", err, c.err)
			continue
		}
		must(t, err)
		if a, err := srq.Query(); err != nil || a != (driver.SRQAttr{MaxWR: 15, MaxSGE: 2, Limit: c.limit}) {
			t.Fatalf("QUERY_SRQ after a limit of %d: %+v, %v", c.limit, a, err)
		}
	}
	// Three receives posted: a ring of one receive cannot take them; one of 31 does.
	for i := range 3 {
		must(t, srq.PostRecv(uint64(i), driver.SGE{}))
	}
	wantErrno(t, "MODIFY_SRQ max_wr below the posted receives", srq.Modify(driver.SRQAttr{MaxWR: 1}, driver.SRQAttrMaxWR), syscall.EINVAL)
	if a, err := srq.Query(); err != nil || a != (driver.SRQAttr{MaxWR: 15, MaxSGE: 2, Limit: 15}) {
		t.Fatalf("QUERY_SRQ after refused modifies: %+v, %v", a, err)
	}
	must(t, srq.Modify(driver.SRQAttr{MaxWR: 31}, driver.SRQAttrMaxWR))
	if a, err := srq.Query(); err != nil || a != (driver.SRQAttr{MaxWR: 31, MaxSGE: 2, Limit: 15}) {
		t.Fatalf("QUERY_SRQ after the resize: %+v, %v", a, err)
	}
	must(t, srq.PostRecv(3, driver.SGE{}))
	must(t, srq.Destroy())
	_, err = srq.Query()
	wantErrno(t, "QUERY_SRQ of a destroyed SRQ", err, syscall.ENOENT)
	wantErrno(t, "MODIFY_SRQ of a destroyed SRQ", srq.Modify(driver.SRQAttr{Limit: 1}, driver.SRQAttrLimit), syscall.ENOENT)
}

// RESIZE_CQ moves the completions not yet polled into the new ring, in order, from wherever
// the old one's consumer was; new completions follow them there, lap after lap. A ring too
// small for them is EINVAL and changes nothing; a CQ that is gone is ENOENT.
func TestResizeCQ(t *testing.T) {
	lb := newLoopback(t)
	next := uint64(1)
	post := func(n int) {
		t.Helper()
		for range n {
			must(t, lb.q1.PostSend(driver.SendWR{ID: next, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled | driver.SendInline,
				Inline: []byte{byte(next)}, RemoteAddr: lb.mr.Addr + next, RKey: lb.mr.Key}))
			next++
		}
	}
	waitLen := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := lb.cq.Len()
			must(t, err)
			if got == n {
				return
			}
			if got > n || time.Now().After(deadline) {
				t.Fatalf("%d completions waiting, want %d", got, n)
			}
		}
	}
	polled := uint64(0)
	poll := func(n int) {
		t.Helper()
		for _, wc := range waitWC(t, lb.cq, n) {
			polled++
			if wc != (driver.WC{WRID: polled, Status: 0, Opcode: 1, ByteLen: 1, QPNum: lb.q1.Num}) {
				t.Fatalf("completion %+v, want WRITE %d's", wc, polled)
			}
		}
	}
	post(5)
	waitLen(5)
	poll(1)

	mark, err := lb.d.Alloc(4096)
	must(t, err)
	wantErrno(t, "RESIZE_CQ to 3 entries with 4 waiting", lb.cq.Resize(2), syscall.EINVAL)
	if a, err := lb.d.Alloc(4096); err != nil || a != mark+4096 {
		t.Fatalf("after a refused resize the arena gives 0x%x (%v), want 0x%x", a, err, mark+4096)
	}
	waitLen(4)

	must(t, lb.cq.Resize(3))
	waitLen(4)
	post(2)
	waitLen(6)
	poll(6)
	for range 4 { // laps of the 8-entry ring
		post(5)
		poll(5)
	}

	cq, err := lb.d.CreateCQ(3, nil)
	must(t, err)
	must(t, cq.Destroy())
	wantErrno(t, "RESIZE_CQ of a destroyed CQ", cq.Resize(4), syscall.ENOENT)
}

// MODIFY_CQ takes a count and a period within the device's bounds; a period the ABI cannot
// carry is refused before it reaches the device, and a CQ that is gone is ENOENT.
func TestModerateCQ(t *testing.T) {
	lb := newLoopback(t)
	must(t, lb.cq.Moderate(16, 50*time.Microsecond))
	must(t, lb.cq.Moderate(abi.CQModMaxCount, abi.CQModMaxPeriod*time.Microsecond))
	must(t, lb.cq.Moderate(0, 0))
	if err := lb.cq.Moderate(4, (abi.CQModMaxPeriod+1)*time.Microsecond); err == nil {
		t.Fatal("a period over the bound was taken")
	}
	cq, err := lb.d.CreateCQ(3, nil)
	must(t, err)
	must(t, cq.Destroy())
	wantErrno(t, "MODIFY_CQ of a destroyed CQ", cq.Moderate(4, time.Microsecond), syscall.ENOENT)
}

// ATOMIC_WRITE from one QP of a loopback pair puts its 8 bytes at the other's target; FLUSHes of
// the range and of the whole MR (whose address and length are not looked at), of each placement
// type, complete SUCCESS in order after it; a FLUSH of a range past the MR's end is
// REM_ACCESS_ERR.
func TestAtomicWriteAndFlush(t *testing.T) {
	lb := newLoopback(t)
	target := lb.mr.Addr + 0x2f00
	value := [8]byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}
	must(t, lb.bus.WriteMem(target-8, make([]byte, 24)))
	must(t, lb.q1.PostSend(
		driver.SendWR{ID: 1, Opcode: driver.WRAtomicWrite, Flags: driver.SendSignaled, RemoteAddr: target, RKey: lb.mr.Key, AtomicWrite: value},
		driver.SendWR{ID: 2, Opcode: driver.WRFlush, Flags: driver.SendSignaled, RemoteAddr: target, RKey: lb.mr.Key,
			Flush: driver.Flush{Type: driver.FlushGlobal, Level: driver.FlushRange, Length: 8}},
		driver.SendWR{ID: 3, Opcode: driver.WRFlush, Flags: driver.SendSignaled, RemoteAddr: lb.mr.Addr + lb.mr.Len, RKey: lb.mr.Key,
			Flush: driver.Flush{Type: driver.FlushGlobal | driver.FlushPersistent, Level: driver.FlushMR, Length: 1 << 20}},
		driver.SendWR{ID: 4, Opcode: driver.WRFlush, Flags: driver.SendSignaled, RemoteAddr: lb.mr.Addr + lb.mr.Len - 4, RKey: lb.mr.Key,
			Flush: driver.Flush{Type: driver.FlushGlobal, Level: driver.FlushRange, Length: 8}},
	))
	wcs := waitWC(t, lb.cq, 4)
	for i, want := range []driver.WC{
		{WRID: 1, Opcode: 9, ByteLen: 8, QPNum: lb.q1.Num}, // IBV_WC_ATOMIC_WRITE
		{WRID: 2, Opcode: 8, QPNum: lb.q1.Num},             // IBV_WC_FLUSH: the engine moves no bytes for one
		{WRID: 3, Opcode: 8, QPNum: lb.q1.Num},
		{WRID: 4, Status: 10, QPNum: lb.q1.Num}, // IBV_WC_REM_ACCESS_ERR
	} {
		if defined(wcs[i]) != want {
			t.Fatalf("completion %d: %+v, want %+v", i, wcs[i], want)
		}
	}
	got := make([]byte, 24)
	must(t, lb.bus.ReadMem(target-8, got))
	if want := append(append(make([]byte, 8), value[:]...), make([]byte, 8)...); !bytes.Equal(got, want) {
		t.Fatalf("around the ATOMIC_WRITE's target: % x, want % x", got, want)
	}
}

// A REG_MR work request gives a fast-register MR the pages it names, in the order it names
// them: a WRITE through the new key lands there. Once a LOCAL_INV invalidates the key, a WRITE
// through it is REM_ACCESS_ERR and changes nothing.
func TestRegMRWorkRequest(t *testing.T) {
	lb := newLoopback(t)
	fr, err := lb.d.AllocFastRegMR(lb.pd, 4)
	must(t, err)
	p0, err := lb.d.Alloc(4096)
	must(t, err)
	p1, err := lb.d.Alloc(4096)
	must(t, err)
	key := fr.Key&^0xff | (fr.Key+9)&0xff
	wantErrno(t, "REG_MR of more pages than the MR takes",
		lb.q2.PostSend(driver.SendWR{ID: 4, Opcode: driver.WRRegMR, Reg: driver.Reg{MR: fr, Key: key, Pages: make([]uint64, 5)}}), syscall.EINVAL)
	must(t, lb.q2.PostSend(driver.SendWR{ID: 5, Opcode: driver.WRRegMR, Flags: driver.SendSignaled,
		Reg: driver.Reg{MR: fr, Key: key, Access: 1 | 2, IOVA: 0x8000_0010, Length: 5000, Offset: 16, Pages: []uint64{p1, p0}}}))
	if wc := waitWC(t, lb.cq, 1)[0]; wc != (driver.WC{WRID: 5, Opcode: 0x20, QPNum: lb.q2.Num}) { // IB_WC_REG_MR
		t.Fatalf("REG_MR completion %+v", wc)
	}

	src := make([]byte, 4096)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	must(t, lb.bus.WriteMem(lb.mr.Addr, src))
	write := driver.SendWR{ID: 6, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: lb.mr.Addr, Length: 4096, Key: lb.mr.Key}}, RemoteAddr: 0x8000_0010, RKey: key}
	must(t, lb.q1.PostSend(write))
	if wc := waitWC(t, lb.cq, 1)[0]; wc != (driver.WC{WRID: 6, Opcode: 1, ByteLen: 4096, QPNum: lb.q1.Num}) { // IBV_WC_RDMA_WRITE
		t.Fatalf("WRITE through the fast-registered MR: %+v", wc)
	}
	// IOVA 0x8000_0010 is byte 16 of the first page named, p1; the last 16 bytes spill into p0.
	want := append(append(make([]byte, 16), src[:4080]...), src[4080:]...)
	want = append(want, make([]byte, 4096-16)...)
	got := make([]byte, 8192)
	must(t, lb.bus.ReadMem(p1, got[:4096]))
	must(t, lb.bus.ReadMem(p0, got[4096:]))
	if !bytes.Equal(got, want) {
		t.Fatal("the WRITE did not land in the pages the REG_MR named, in their order")
	}

	must(t, lb.q2.PostSend(driver.SendWR{ID: 7, Opcode: driver.WRLocalInv, Flags: driver.SendSignaled, Imm: key}))
	if wc := waitWC(t, lb.cq, 1)[0]; wc != (driver.WC{WRID: 7, Opcode: 6, QPNum: lb.q2.Num}) { // IBV_WC_LOCAL_INV
		t.Fatalf("LOCAL_INV completion %+v", wc)
	}
	clear(src)
	must(t, lb.bus.WriteMem(lb.mr.Addr, src))
	write.ID = 8
	must(t, lb.q1.PostSend(write))
	if wc := defined(waitWC(t, lb.cq, 1)[0]); wc != (driver.WC{WRID: 8, Status: 10, QPNum: lb.q1.Num}) { // IBV_WC_REM_ACCESS_ERR
		t.Fatalf("WRITE after LOCAL_INV: %+v", wc)
	}
	must(t, lb.bus.ReadMem(p1, got[:4096]))
	must(t, lb.bus.ReadMem(p0, got[4096:]))
	if !bytes.Equal(got, want) {
		t.Fatal("a WRITE through an invalidated key changed the pages")
	}

	must(t, lb.d.DeallocFastRegMR(fr))
	wantErrno(t, "DEALLOC_STAG of a freed fast-register MR", lb.d.DeallocFastRegMR(fr), syscall.ENOENT)
}
