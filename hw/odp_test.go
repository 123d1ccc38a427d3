package hw

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu"
	"github.com/softirdma/softirdma/hw/abi"
)

// The page-fault protocol as a driver speaks it: REG_MR with ON_DEMAND, the page-fault EQ,
// OP_MAP_PAGES, OP_UNMAP_PAGES and OP_RESUME_QP, over guest QPs on the function's loopback.

const (
	odpWire  = 0x7f00_0000_0000 // the on-demand MR's wire addresses: a process's
	odpPages = 8
	odpRAM   = 0x1a0000 // the process's pages: wire page i is guest page odpRAM + i*4096
	pfRing   = 0x190000
	pfTable  = 0x117000
	pfVector = 5
	srcPage  = 0x1b0000 // a registered page for the other side of each transfer
)

// odpBench is a loopback pair, a page-fault EQ, an on-demand MR over odpPages pages and a
// plain MR over one page.
type odpBench struct {
	*bench
	pdn, stag, plain uint32
	q1, q2           *guestQP
	pfSeen           uint32 // page-fault entries read
}

func newODPBench(t *testing.T) *odpBench {
	b := newBench(t)
	b.enable()
	o := &odpBench{bench: b}
	o.pdn, o.q1, o.q2 = b.loopbackPair()
	b.ringAt(pfRing, pfTable, 1, 4, 5)
	b.ok(abi.OpCreateEQ, append(pageListBytes(pfTable, 1, 12, 1), 4, abi.EQPageFault, pfVector, 0))
	o.stag = b.ok(abi.OpRegMR, regMRArgs(o.pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite|emu.AccessRemoteRead|emu.AccessOnDemand,
		odpWire, odpPages*4096, 0, pageListBytes(0, 0, 0, 0)))
	o.plain = b.ok(abi.OpRegMR, regMRArgs(o.pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite, srcPage, 4096, 0, pageListBytes(srcPage, 1, 12, 0)))
	return o
}

// faults reads the page-fault entries written since the last call.
func (o *odpBench) faults() []abi.FaultEntry {
	le := binary.LittleEndian
	prod := le.Uint32(o.at(pfRing + abi.QHProducer))
	var out []abi.FaultEntry
	for ; o.pfSeen != prod; o.pfSeen = (o.pfSeen + 1) & 15 {
		e := o.at(pfRing + abi.QueueHeaderSize + uint64(o.pfSeen)*abi.FaultEntrySize)[:abi.FaultEntrySize]
		out = append(out, abi.FaultEntry(bytes.Clone(e)))
	}
	le.PutUint32(o.at(pfRing+abi.QHConsumer), prod)
	return out
}

// wantFault checks the one new entry.
func (o *odpBench) wantFault(flags uint8, qpn uint32, va uint64, pages uint32) {
	o.t.Helper()
	fs := o.faults()
	if len(fs) != 1 {
		o.t.Fatalf("%d page-fault entries, want 1", len(fs))
	}
	f := fs[0]
	if f.Flags() != flags || f.QPN() != qpn || f.VA() != va || f.STag() != o.stag || f.Pages() != pages {
		o.t.Fatalf("entry flags %d qpn 0x%x va 0x%x stag 0x%x pages %d, want %d 0x%x 0x%x 0x%x %d",
			f.Flags(), f.QPN(), f.VA(), f.STag(), f.Pages(), flags, qpn, va, o.stag, pages)
	}
	if !o.sawVector(pfVector) {
		o.t.Fatal("the page-fault EQ's vector was not signalled")
	}
}

// mapPages answers with the process's pages for wire pages [first, first+n).
func (o *odpBench) mapPages(first, n int) syscall.Errno {
	o.t.Helper()
	for i := range n {
		binary.LittleEndian.PutUint64(o.at(0x118000+uint64(8*i)), odpRAM+uint64(first+i)*4096)
	}
	a := make([]byte, abi.MapPagesArgsSize)
	m := abi.MapPagesArgs(a)
	m.SetSTag(o.stag)
	m.SetVA(odpWire + uint64(first)*4096)
	copy(a[abi.MapPagesList:], pageListBytes(0x118000, uint32(n), 12, 1))
	errno, _ := o.cmd(abi.OpMapPages, a)
	return errno
}

func (o *odpBench) resume(qpn, status uint32) syscall.Errno {
	errno, _ := o.cmd(abi.OpResumeQP, u32s(qpn, status))
	return errno
}

// A WRITE arriving for a page not mapped: the responder's QP RNR-NAKs it and the driver hears
// of it (write, not held); once the page is mapped the WRITE lands there after the RNR timer.
func TestODPResponderFaultThroughTheFunction(t *testing.T) {
	o := newODPBench(t)
	for i := range 100 {
		o.at(srcPage)[i] = byte(i + 1)
	}
	o.post(o.q1, sendWQE{id: 1, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: odpWire + 4096 + 50, rkey: o.stag,
		sges: [][3]uint64{{srcPage, 100, uint64(o.plain)}}})
	o.sim.RunFor(100 * time.Microsecond)
	o.wantFault(abi.FaultWrite, o.q2.qpn, odpWire+4096, 1)
	if got := o.cqes(0x140000, 0); len(got) != 0 {
		t.Fatalf("completed before the page was mapped: %v", got)
	}
	if errno := o.mapPages(1, 1); errno != 0 {
		t.Fatalf("map_pages: %v", errno)
	}
	o.sim.RunFor(5 * time.Millisecond)
	got := o.cqes(0x140000, 0)
	if len(got) != 1 || got[0].WRID != 1 || got[0].Status != emu.WCSuccess {
		t.Fatalf("completions %v", got)
	}
	if !bytes.Equal(o.at(odpRAM + 4096 + 50)[:100], o.at(srcPage)[:100]) {
		t.Fatal("the WRITE did not land in the page mapped")
	}
	if errno := o.resume(o.q2.qpn, 0); errno != syscall.EINVAL {
		t.Fatalf("resume of a QP no fault holds: %v, want EINVAL", errno)
	}
}

// A WRITE gathered from a page not mapped holds its send queue (the entry says held); the
// driver maps the page and resumes the QP, and the WRITE goes. An answer for another QP, a status
// past IBV_WC_GENERAL_ERR or a QP that does not exist changes nothing.
func TestODPRequesterFaultThroughTheFunction(t *testing.T) {
	o := newODPBench(t)
	for i := range 64 {
		o.at(odpRAM + 2*4096)[i] = byte(0x80 + i)
	}
	o.post(o.q1, sendWQE{id: 2, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: srcPage, rkey: o.plain,
		sges: [][3]uint64{{odpWire + 2*4096, 64, uint64(o.stag)}}})
	o.sim.RunFor(100 * time.Microsecond)
	o.wantFault(abi.FaultHeld, o.q1.qpn, odpWire+2*4096, 1)
	held := o.f.qps[o.q1.qpn].emu
	for _, c := range []struct {
		qpn, status uint32
		errno       syscall.Errno
	}{
		{o.q2.qpn, 0, syscall.EINVAL}, // another QP: no fault holds it
		{o.q1.qpn, abi.ResumeMaxStatus + 1, syscall.EINVAL},
		{o.q1.qpn, 0xffffffff, syscall.EINVAL},
		{0xffffff, 0, syscall.ENOENT},
	} {
		if errno := o.resume(c.qpn, c.status); errno != c.errno {
			t.Fatalf("resume qpn 0x%x status %d: %v, want %v", c.qpn, c.status, errno, c.errno)
		}
	}
	if !held.FaultHeld() {
		t.Fatal("a refused answer let the queue go")
	}
	if errno := o.mapPages(2, 1); errno != 0 {
		t.Fatalf("map_pages: %v", errno)
	}
	if errno := o.resume(o.q1.qpn, 0); errno != 0 {
		t.Fatalf("resume: %v", errno)
	}
	o.sim.RunFor(5 * time.Millisecond)
	got := o.cqes(0x140000, 0)
	if len(got) != 1 || got[0].WRID != 2 || got[0].Status != emu.WCSuccess {
		t.Fatalf("completions %v", got)
	}
	if !bytes.Equal(o.at(srcPage)[:64], o.at(odpRAM + 2*4096)[:64]) {
		t.Fatal("the WRITE gathered the wrong bytes")
	}

	// Unmapping returns how many pages went; the next access faults again.
	a := make([]byte, abi.UnmapPagesArgsSize)
	u := abi.UnmapPagesArgs(a)
	u.SetSTag(o.stag)
	u.SetVA(odpWire)
	u.SetLength(odpPages * 4096)
	if n := o.ok(abi.OpUnmapPages, a); n != 1 {
		t.Fatalf("unmap_pages dropped %d pages, want 1", n)
	}
	o.post(o.q1, sendWQE{id: 3, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: srcPage, rkey: o.plain,
		sges: [][3]uint64{{odpWire + 2*4096, 64, uint64(o.stag)}}})
	o.sim.RunFor(100 * time.Microsecond)
	o.wantFault(abi.FaultHeld, o.q1.qpn, odpWire+2*4096, 1)

	// A driver that cannot resolve it fails the work request with its status.
	if errno := o.resume(o.q1.qpn, uint32(emu.WCLocProtErr)); errno != 0 {
		t.Fatalf("resume with an error: %v", errno)
	}
	o.sim.RunFor(time.Millisecond)
	got = o.cqes(0x140000, 1)
	if len(got) != 1 || got[0].WRID != 3 || got[0].Status != emu.WCLocProtErr {
		t.Fatalf("completions %v, want WR 3 with LOC_PROT_ERR", got)
	}
}

// What the commands refuse, and what they refuse to let go of.
func TestODPCommandRefusals(t *testing.T) {
	o := newODPBench(t)
	onDemand := emu.AccessLocalWrite | emu.AccessOnDemand
	before := o.f.regPages
	for _, c := range []struct {
		name  string
		op    uint16
		args  []byte
		errno syscall.Errno
	}{
		{"reg_with_a_page_list", abi.OpRegMR, regMRArgs(o.pdn, onDemand, odpWire, 4096, 0, pageListBytes(srcPage, 1, 12, 0)), syscall.EINVAL},
		{"reg_with_an_offset", abi.OpRegMR, regMRArgs(o.pdn, onDemand, odpWire, 4096, 8, pageListBytes(0, 0, 0, 0)), syscall.EINVAL},
		{"reg_of_no_bytes", abi.OpRegMR, regMRArgs(o.pdn, onDemand, odpWire, 0, 0, pageListBytes(0, 0, 0, 0)), syscall.EINVAL},
		{"reg_implicit_at_an_iova", abi.OpRegMR, regMRArgs(o.pdn, onDemand, 4096, 1<<64-1, 0, pageListBytes(0, 0, 0, 0)), syscall.EINVAL},
		{"rereg", abi.OpReregMR, reregArgs(o.stag, 4, regMRArgs(o.pdn, onDemand, 0, 0, 0, nil)), syscall.EOPNOTSUPP},
		{"map_a_plain_mr", abi.OpMapPages, mapArgs(o.plain, odpWire, pageListBytes(odpRAM, 1, 12, 0)), syscall.EINVAL},
		{"map_outside_the_mr", abi.OpMapPages, mapArgs(o.stag, odpWire+odpPages*4096, pageListBytes(odpRAM, 1, 12, 0)), syscall.EINVAL},
		{"map_2mib_pages", abi.OpMapPages, mapArgs(o.stag, odpWire, pageListBytes(0, 1, 21, 0)), syscall.EINVAL},
		{"map_outside_guest_memory", abi.OpMapPages, mapArgs(o.stag, odpWire, pageListBytes(0x4000_0000, 1, 12, 0)), syscall.EFAULT},
		{"unmap_a_plain_mr", abi.OpUnmapPages, unmapArgs(o.plain, srcPage, 4096), syscall.EINVAL},
		{"destroy_the_page_fault_eq", abi.OpDestroyEQ, u32s(1), syscall.EBUSY},
		{"a_second_page_fault_eq", abi.OpCreateEQ, append(pageListBytes(pfTable, 1, 12, 1), 4, abi.EQPageFault, pfVector, 0), syscall.EBUSY},
	} {
		if errno, _ := o.cmd(c.op, c.args); errno != c.errno {
			t.Errorf("%s: %v, want %v", c.name, errno, c.errno)
		}
	}
	if o.f.regPages != before {
		t.Fatalf("refusals left %d registered pages, there were %d", o.f.regPages, before)
	}

	// Without a page-fault EQ there are no on-demand MRs.
	b := newBench(t)
	b.enable()
	pdn := b.ok(abi.OpAllocPD, nil)
	if errno, _ := b.cmd(abi.OpRegMR, regMRArgs(pdn, onDemand, odpWire, 4096, 0, pageListBytes(0, 0, 0, 0))); errno != syscall.EINVAL {
		t.Fatalf("on-demand MR with no page-fault EQ: %v", errno)
	}
	// Once its MRs are gone the page-fault EQ may go.
	o.ok(abi.OpDeallocSTag, u32s(o.stag))
	o.ok(abi.OpDestroyEQ, u32s(1))
}

func mapArgs(stag uint32, va uint64, pl []byte) []byte {
	a := make([]byte, abi.MapPagesArgsSize)
	abi.MapPagesArgs(a).SetSTag(stag)
	abi.MapPagesArgs(a).SetVA(va)
	copy(a[abi.MapPagesList:], pl)
	return a
}

func unmapArgs(stag uint32, va, n uint64) []byte {
	a := make([]byte, abi.UnmapPagesArgsSize)
	u := abi.UnmapPagesArgs(a)
	u.SetSTag(stag)
	u.SetVA(va)
	u.SetLength(n)
	return a
}

// The implicit MR (iova 0, length 2^64-1) over the guest's whole address space: a WRITE to any
// wire address faults its page in, which the driver gives at any guest page.
func TestODPImplicitMRThroughTheFunction(t *testing.T) {
	o := newODPBench(t)
	o.stag = o.ok(abi.OpRegMR, regMRArgs(o.pdn, emu.AccessLocalWrite|emu.AccessRemoteWrite|emu.AccessOnDemand,
		0, 1<<64-1, 0, pageListBytes(0, 0, 0, 0)))
	for i := range 16 {
		o.at(srcPage)[i] = byte(0xa0 + i)
	}
	const wire = 0x5555_0000_3008
	o.post(o.q1, sendWQE{id: 4, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: wire, rkey: o.stag,
		sges: [][3]uint64{{srcPage, 16, uint64(o.plain)}}})
	o.sim.RunFor(100 * time.Microsecond)
	o.wantFault(abi.FaultWrite, o.q2.qpn, wire&^4095, 1)
	binary.LittleEndian.PutUint64(o.at(0x118000), odpRAM+5*4096)
	a := mapArgs(o.stag, wire&^4095, pageListBytes(0x118000, 1, 12, 1))
	if n := o.ok(abi.OpMapPages, a); n != 1 {
		t.Fatalf("map_pages added %d pages", n)
	}
	o.sim.RunFor(5 * time.Millisecond)
	if got := o.cqes(0x140000, 0); len(got) != 1 || got[0].Status != emu.WCSuccess {
		t.Fatalf("completions %v", got)
	}
	if !bytes.Equal(o.at(odpRAM + 5*4096 + 8)[:16], o.at(srcPage)[:16]) {
		t.Fatal("the WRITE did not land in the page given")
	}
}

// A fault the driver never answers holds its QP's send queue and nothing else: the other QP of
// the pair sends to it meanwhile, and the function answers commands.
func TestODPUnansweredFaultThroughTheFunction(t *testing.T) {
	o := newODPBench(t)
	o.post(o.q1, sendWQE{id: 5, op: emu.WRRDMAWrite, flags: emu.SendSignaled, remote: srcPage, rkey: o.plain,
		sges: [][3]uint64{{odpWire, 64, uint64(o.stag)}}})
	o.sim.RunFor(time.Second)
	o.wantFault(abi.FaultHeld, o.q1.qpn, odpWire, 1)
	if got := o.cqes(0x140000, 0); len(got) != 0 {
		t.Fatalf("completions while held: %v", got)
	}
	for i := range 32 {
		o.at(srcPage + 2048)[i] = byte(i + 7)
	}
	o.postRecv(o.q1, 6, srcPage+1024, 32, o.plain)
	o.post(o.q2, sendWQE{id: 7, op: emu.WRSend, flags: emu.SendSignaled, sges: [][3]uint64{{srcPage + 2048, 32, uint64(o.plain)}}})
	o.sim.RunFor(5 * time.Millisecond)
	got := o.cqes(0x140000, 0)
	if len(got) != 2 {
		t.Fatalf("completions %v, want the SEND's two", got)
	}
	for _, wc := range got {
		if wc.Status != emu.WCSuccess || (wc.WRID != 6 && wc.WRID != 7) {
			t.Fatalf("completions %v", got)
		}
	}
	if !bytes.Equal(o.at(srcPage + 1024)[:32], o.at(srcPage + 2048)[:32]) {
		t.Fatal("the SEND landed wrong")
	}
	o.ok(abi.OpNop, nil)
	if !o.f.qps[o.q1.qpn].emu.FaultHeld() {
		t.Fatal("the queue let go without an answer")
	}
}
