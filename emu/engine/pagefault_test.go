package engine_test

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
)

// odpBase is where an on-demand MR's wire pages start in these tests: a process's address.
const odpBase = 0x7f00_0000_0000

// odpDriver is a driver answering page faults as a guest kernel's does with hmm_range_fault:
// wire page i of the MR is the process's page, which lies at guest page pageOf(i) of a 64 KiB
// region at 0x100000, in reverse order so that a wrong translation shows. It answers every fault
// at once unless paused, and resumes a held send queue.
type odpDriver struct {
	t      *testing.T
	dev    *engine.Device
	gm     *engine.GuestMemory
	ram    []byte
	mr     *engine.MR
	faults []engine.PageFault
	paused bool
	status engine.WCStatus // the answer to a held queue
}

const odpPages = 16

func pageOf(i uint64) uint64 { return 0x100000 + (odpPages-1-i)*4096 }

func newODPDriver(t *testing.T, dev *engine.Device, pd *engine.PD, access engine.Access) *odpDriver {
	t.Helper()
	gm, mems := guestRAM(t, [2]uint64{0x100000, odpPages * 4096})
	mr, err := pd.RegOnDemandMR(gm, odpBase, odpPages*4096, access)
	must(t, err)
	o := &odpDriver{t: t, dev: dev, gm: gm, ram: mems[0], mr: mr}
	dev.OnPageFault(func(f engine.PageFault) {
		o.faults = append(o.faults, f)
		if !o.paused {
			o.answer(f)
		}
	})
	return o
}

// answer maps the fault's pages and resumes the queue it holds.
func (o *odpDriver) answer(f engine.PageFault) {
	var addrs []uint64
	for va := f.VA; va < f.VA+f.Len; va += 4096 {
		addrs = append(addrs, pageOf((va-odpBase)/4096))
	}
	if o.status == engine.WCSuccess {
		_, err := o.mr.MapPages(f.VA, addrs)
		must(o.t, err)
	}
	if f.Held {
		qp, ok := o.dev.QP(f.QPN)
		if !ok {
			o.t.Fatalf("fault for QP 0x%x, which is gone", f.QPN)
		}
		must(o.t, qp.ResumePageFault(o.status))
	}
}

// bytesAt are n bytes of the MR's wire addresses from va, read through the driver's pages.
func (o *odpDriver) bytesAt(va uint64, n int) []byte {
	out := make([]byte, 0, n)
	for len(out) < n {
		page := pageOf((va-odpBase)/4096) - 0x100000
		off := va % 4096
		k := min(uint64(n-len(out)), 4096-off)
		out = append(out, o.ram[page+off:page+off+k]...)
		va += k
	}
	return out
}

// setBytes writes b at the MR's wire address va through the driver's pages.
func (o *odpDriver) setBytes(va uint64, b []byte) {
	for len(b) > 0 {
		page := pageOf((va-odpBase)/4096) - 0x100000
		off := va % 4096
		k := copy(o.ram[page+off:page+4096], b)
		b, va = b[k:], va+uint64(k)
	}
}

func (o *odpDriver) wantFaults(want ...engine.PageFault) {
	o.t.Helper()
	if len(o.faults) != len(want) {
		o.t.Fatalf("faults %v, want %v", o.faults, want)
	}
	for i := range want {
		if o.faults[i] != want[i] {
			o.t.Fatalf("fault %d: %v, want %v", i, o.faults[i], want[i])
		}
	}
}

// rnrNAKs counts the RNR NAKs on the wire, each with the timer it names.
func rnrNAKs(t *testing.T, pcap *bytes.Buffer) (n int, timers []uint8) {
	for _, f := range captureOf(t, pcap) {
		if f.hasAET && f.syn.Type() == wire.SyndromeRNR {
			n++
			timers = append(timers, f.syn.Value())
		}
	}
	return n, timers
}

// A request arriving for pages of an on-demand MR the responder has not mapped gets an RNR NAK
// naming the QP's min_rnr_timer, and its driver hears of the fault; the request comes again after
// the timer and succeeds, its bytes where the driver's pages are.
func TestODPResponderFaultIsRNRNAK(t *testing.T) {
	cases := []struct {
		name  string
		wr    func(p *pair, rkey uint32) engine.SendWR
		fault engine.PageFault
		check func(t *testing.T, p *pair, o *odpDriver)
	}{
		{"write_3_packets_from_page_1", func(p *pair, rkey uint32) engine.SendWR {
			return engine.SendWR{Opcode: engine.WRRDMAWrite, SGL: sge(p.mrA, 0, 3000), RemoteAddr: odpBase + 4090, RKey: rkey}
		}, engine.PageFault{VA: odpBase, Len: 2 * 4096, Write: true}, func(t *testing.T, p *pair, o *odpDriver) {
			if !bytes.Equal(o.bytesAt(odpBase+4090, 3000), p.bufA[:3000]) {
				t.Fatal("WRITE landed wrong")
			}
		}},
		{"read", func(p *pair, rkey uint32) engine.SendWR {
			return engine.SendWR{Opcode: engine.WRRDMARead, SGL: sge(p.mrA, 8192, 5000), RemoteAddr: odpBase + 3*4096 + 100, RKey: rkey}
		}, engine.PageFault{VA: odpBase + 3*4096, Len: 2 * 4096}, func(t *testing.T, p *pair, o *odpDriver) {
			if !bytes.Equal(o.bytesAt(odpBase+3*4096+100, 5000), p.bufA[8192:8192+5000]) {
				t.Fatal("READ brought the wrong bytes")
			}
		}},
		{"fetch_add", func(p *pair, rkey uint32) engine.SendWR {
			return engine.SendWR{Opcode: engine.WRAtomicFetchAndAdd, SGL: sge(p.mrA, 16384, 8), RemoteAddr: odpBase + 9*4096 + 8, RKey: rkey, CompareAdd: 5}
		}, engine.PageFault{VA: odpBase + 9*4096, Len: 4096, Write: true}, func(t *testing.T, p *pair, o *odpDriver) {
			if got := le64(o.bytesAt(odpBase+9*4096+8, 8)); got != 0x1111+5 {
				t.Fatalf("atomic left 0x%x", got)
			}
			if got := le64(p.bufA[16384:]); got != 0x1111 {
				t.Fatalf("atomic returned 0x%x", got)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := plainPair(t)
			var pcap bytes.Buffer
			must(t, p.fab.CapturePcap(&pcap))
			o := newODPDriver(t, p.b, p.pdB, allAccess)
			fill(p.bufA[:3000], 9)
			fill(o.ram, 3)
			o.setBytes(odpBase+9*4096+8, []byte{0x11, 0x11, 0, 0, 0, 0, 0, 0})
			wr := c.wr(p, o.mr.RKey())
			wr.ID, wr.Flags = 1, engine.SendSignaled
			must(t, p.qa.PostSend(wr))
			p.run()
			wcs := poll(p.cqA)
			if len(wcs) != 1 || wcs[0].Status != engine.WCSuccess {
				t.Fatalf("completions %s", fmtWC(wcs))
			}
			c.fault.QPN, c.fault.Key = p.qb.Num(), o.mr.RKey()
			o.wantFaults(c.fault)
			if n, timers := rnrNAKs(t, &pcap); n != 1 || timers[0] != 12 {
				t.Fatalf("%d RNR NAKs with timers %v, want one with 12", n, timers)
			}
			c.check(t, p, o)
			if st := p.b.Stats(); st.PageFaults != 1 || st.RNRNAKsSent != 1 {
				t.Fatalf("stats: %d page faults, %d RNR NAKs", st.PageFaults, st.RNRNAKsSent)
			}
		})
	}
}

// A SEND whose receive buffer lies in pages not mapped is RNR NAKed and lands once they are.
func TestODPReceiveBufferFault(t *testing.T) {
	p := plainPair(t)
	o := newODPDriver(t, p.b, p.pdB, allAccess)
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 7, SGL: []engine.SGE{{Addr: odpBase + 5*4096 - 10, Length: 2000, LKey: o.mr.LKey()}}}))
	fill(p.bufA[:1500], 4)
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 1500)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 7, Opcode: engine.WCRecv, ByteLen: 1500, SrcQP: p.qa.Num()})
	o.wantFaults(engine.PageFault{QPN: p.qb.Num(), Key: o.mr.LKey(), VA: odpBase + 4*4096, Len: 2 * 4096, Write: true})
	if !bytes.Equal(o.bytesAt(odpBase+5*4096-10, 1500), p.bufA[:1500]) {
		t.Fatal("SEND landed wrong")
	}
}

// A work request gathering from pages not mapped holds its send queue before the packet that
// needs them; the driver's ResumePageFault lets it go on. A READ whose responses would land in
// pages not mapped holds before its request leaves.
func TestODPRequesterFaultHoldsSendQueue(t *testing.T) {
	p := plainPair(t)
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	o := newODPDriver(t, p.a, p.pdA, allAccess)
	o.paused = true
	fill(o.ram, 6)
	// Pages 0 and 1 mapped already: the WRITE's first packets leave, the third waits.
	_, err := o.mr.MapPages(odpBase, []uint64{pageOf(0), pageOf(1)})
	must(t, err)
	lk := o.mr.LKey()
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: odpBase + 100, Length: 3 * 4096, LKey: lk}},
			RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: odpBase + 10*4096, Length: 64, LKey: lk}},
			RemoteAddr: p.mrB.Addr() + 65536, RKey: p.mrB.RKey()}))
	p.run()
	if got := poll(p.cqA); len(got) != 0 {
		t.Fatalf("completions while held: %s", fmtWC(got))
	}
	if !p.qa.FaultHeld() {
		t.Fatal("send queue not held")
	}
	// MTU 1024: 8 packets of the 12 came from the two pages mapped (bytes 100 to 8291).
	sent := 0
	for _, f := range captureOf(t, &pcap) {
		if f.src == p.a.IP().String() && !f.hasAET {
			sent++
		}
	}
	if sent != 7 {
		t.Fatalf("%d request packets before the hold, want 7 (bytes 100 to 7267)", sent)
	}
	o.wantFaults(engine.PageFault{QPN: p.qa.Num(), Key: lk, VA: odpBase + 2*4096, Len: 2 * 4096, Held: true})

	o.paused = false
	o.answer(o.faults[0])
	p.run()
	fill(p.bufB[65536:65536+64], 1)
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: 64})
	if !bytes.Equal(p.bufB[:3*4096], o.bytesAt(odpBase+100, 3*4096)) {
		t.Fatal("WRITE gathered wrong bytes")
	}
	o.wantFaults(engine.PageFault{QPN: p.qa.Num(), Key: lk, VA: odpBase + 2*4096, Len: 2 * 4096, Held: true},
		engine.PageFault{QPN: p.qa.Num(), Key: lk, VA: odpBase + 10*4096, Len: 4096, Write: true, Held: true})
	if !bytes.Equal(o.bytesAt(odpBase+10*4096, 64), make([]byte, 64)) {
		t.Fatal("READ landed wrong")
	}
	if err := p.qa.ResumePageFault(engine.WCSuccess); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("resume with no fault held: %v", err)
	}
}

// A driver that cannot resolve a fault answers with a status: the work request completes with it
// and the QP goes to ERR; the rest of the queue is flushed.
func TestODPRequesterFaultFails(t *testing.T) {
	p := plainPair(t)
	o := newODPDriver(t, p.a, p.pdA, allAccess)
	o.status = engine.WCLocProtErr
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: odpBase, Length: 64, LKey: o.mr.LKey()}}},
		engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8)}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCSend, Status: engine.WCLocProtErr},
		engine.WC{WRID: 2, Opcode: engine.WCSend, Status: engine.WCWRFlushErr})
	if p.qa.State() != engine.QPSErr {
		t.Fatalf("QP %s, want ERR", p.qa.State())
	}
	if o.mr.MappedPages() != 0 {
		t.Fatal("pages mapped by a driver that refused")
	}

	// A queue that went to ERR while held was flushed: an answer after that completes nothing.
	p = plainPair(t)
	o = newODPDriver(t, p.a, p.pdA, allAccess)
	o.paused = true
	must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: odpBase, Length: 64, LKey: o.mr.LKey()}}}))
	p.run()
	toErr(t, p.qa)
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCSend, Status: engine.WCWRFlushErr})
	must(t, p.qa.ResumePageFault(engine.WCLocProtErr))
	p.run()
	if got := poll(p.cqA); len(got) != 0 {
		t.Fatalf("an answer after the flush completed %s", fmtWC(got))
	}
}

// UnmapPages takes pages back (an MMU notifier's invalidation): the next access faults again.
// RevokeRange over guest memory an on-demand MR has pages in unmaps those pages, the MR stays.
func TestODPUnmapFaultsAgain(t *testing.T) {
	p := plainPair(t)
	o := newODPDriver(t, p.b, p.pdB, allAccess)
	write := func(id uint64, page uint64) {
		must(t, p.qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 16),
			RemoteAddr: odpBase + page*4096, RKey: o.mr.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: id, Opcode: engine.WCRDMAWrite})
	}
	write(1, 2)
	write(2, 2)
	if len(o.faults) != 1 || o.mr.MappedPages() != 1 {
		t.Fatalf("%d faults, %d pages mapped", len(o.faults), o.mr.MappedPages())
	}
	if n, err := o.mr.UnmapPages(odpBase, odpPages*4096); n != 1 || err != nil {
		t.Fatalf("UnmapPages: %d, %v", n, err)
	}
	write(3, 2)
	if len(o.faults) != 2 {
		t.Fatalf("%d faults after the unmap, want 2", len(o.faults))
	}
	if hit := p.b.RevokeRange(o.gm, pageOf(2), 4096); len(hit) != 0 {
		t.Fatalf("RevokeRange revoked %d MRs; on-demand MRs lose pages, not themselves", len(hit))
	}
	if o.mr.MappedPages() != 0 {
		t.Fatal("RevokeRange left the page mapped")
	}
	write(4, 2)
	if len(o.faults) != 3 || o.mr.Revoked() {
		t.Fatalf("%d faults, revoked %v", len(o.faults), o.mr.Revoked())
	}
}

// A datagram whose receive lies in pages not mapped is dropped and the receive stays: the next
// datagram, after the driver mapped them, lands in it.
func TestODPDatagramReceiveFault(t *testing.T) {
	dn, a, b := twoDgNodes(t)
	o := newODPDriver(t, b.dev, b.pd, engine.AccessLocalWrite)
	must(t, b.qp.PostRecv(engine.RecvWR{ID: 9, SGL: []engine.SGE{{Addr: odpBase + 4096, Length: 1024, LKey: o.mr.LKey()}}}))
	ah := a.ah(t, b.dev.IP())
	fill(a.buf[:100], 2)
	a.send(t, 1, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 100)
	dn.run()
	if got := poll(b.cq); len(got) != 0 {
		t.Fatalf("receive completed: %s", fmtWC(got))
	}
	o.wantFaults(engine.PageFault{QPN: b.qp.Num(), Key: o.mr.LKey(), VA: odpBase + 4096, Len: 4096, Write: true})
	a.send(t, 2, engine.WRSend, ah, b.qp.Num(), testQKey, 0, 100)
	dn.run()
	got := poll(b.cq)
	if len(got) != 1 || got[0].WRID != 9 || got[0].Status != engine.WCSuccess || got[0].ByteLen != engine.GRHLen+100 {
		t.Fatalf("receive: %s", fmtWC(got))
	}
	if !bytes.Equal(o.bytesAt(odpBase+4096+engine.GRHLen, 100), a.buf[:100]) {
		t.Fatal("datagram landed wrong")
	}
}

// Pages an invalidation took are not touched after UnmapPages returns: on wall clocks, with
// WRITEs landing all the while, a page is unmapped, poisoned and replaced by another over and
// over (a kernel migrating it); every page let go keeps its poison to the end, and every WRITE
// completes.
func TestODPUnmapThenNoAccessUnderTraffic(t *testing.T) {
	w := carriedRC(t)
	const pagesUsed = 40
	gm, mems := guestRAM(t, [2]uint64{0x100000, pagesUsed * 4096})
	ram := mems[0]
	mr, err := w.pdB.RegOnDemandMR(gm, odpBase, 4096, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, err)
	var mu sync.Mutex
	current := 0 // the page the process's page is in now
	dev := w.pdB.Device()
	dev.OnPageFault(func(f engine.PageFault) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := mr.MapPages(odpBase, []uint64{0x100000 + uint64(current)*4096}); err != nil {
			t.Errorf("map: %v", err)
		}
	})
	src := make([]byte, 256)
	mrA, err := w.pdA.RegMR(src, engine.AccessLocalWrite)
	must(t, err)

	landed := make(chan struct{}, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := w.qa.PostSend(engine.SendWR{ID: id, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled,
				SGL: sge(mrA, 0, 256), RemoteAddr: odpBase + 1024, RKey: mr.RKey()}); err != nil {
				t.Errorf("post: %v", err)
				return
			}
			waitCQ(w.cqA, time.Now().Add(20*time.Second))
			if wcs := poll(w.cqA); len(wcs) != 1 || wcs[0].Status != engine.WCSuccess {
				t.Errorf("WRITE %d: %s", id, fmtWC(wcs))
				return
			}
			select {
			case landed <- struct{}{}:
			default:
			}
		}
	})
	for i := 0; i < pagesUsed-1; i++ {
		select {
		case <-landed:
		case <-time.After(20 * time.Second):
			t.Fatalf("no WRITE landed after %d migrations", i)
		}
		mu.Lock()
		old := current
		if _, err := mr.UnmapPages(odpBase, 4096); err != nil {
			t.Fatal(err)
		}
		// The page is the kernel's again: anything the device wrote now would show.
		for j := range 4096 {
			ram[old*4096+j] = 0xee
		}
		current++
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	for p := range pagesUsed - 1 {
		for j, b := range ram[p*4096 : p*4096+4096] {
			if b != 0xee {
				t.Fatalf("page %d byte %d is 0x%02x after it was let go", p, j, b)
			}
		}
	}
}

// A driver that never answers costs the QPs whose work faulted, not the device: a peer whose
// request keeps meeting RNR NAKs ends in RNR_RETRY_EXC_ERR once its rnr_retry is spent, a send
// queue held stays held, and another connection between the same devices carries on.
func TestODPUnansweredFaultCostsOnlyItsQPs(t *testing.T) {
	p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MinRNRTimer: 1, RNRRetry: 3, NoDefaults: true,
		MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7, MaxRdAtomic: 4, Access: engine.AccessRemoteWrite | engine.AccessRemoteRead})
	o := newODPDriver(t, p.b, p.pdB, allAccess)
	o.paused = true
	caps := engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	q2a, q2b := connectedRC(t, rcEnd{pd: p.pdA, cq: p.cqA, cap: caps}, rcEnd{pd: p.pdB, cq: p.cqB, cap: caps}, engine.ConnectOptions{})
	// B's WRITE from pages never mapped holds q2b; A's WRITE into them meets RNR NAKs.
	odpSrc := engine.SGE{Addr: odpBase, Length: 64, LKey: o.mr.LKey()}
	must(t, q2b.PostSend(engine.SendWR{ID: 20, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: []engine.SGE{odpSrc},
		RemoteAddr: p.mrA.Addr(), RKey: p.mrA.RKey()}))
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64),
		RemoteAddr: odpBase, RKey: o.mr.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, Status: engine.WCRNRRetryExcErr})
	if got := poll(p.cqB); len(got) != 0 || !q2b.FaultHeld() {
		t.Fatalf("B's held queue: completions %s, held %v", fmtWC(got), q2b.FaultHeld())
	}
	// A third connection between the same two devices carries traffic both ways.
	q3a, q3b := connectedRC(t, rcEnd{pd: p.pdA, cq: p.cqA, cap: caps}, rcEnd{pd: p.pdB, cq: p.cqB, cap: caps}, engine.ConnectOptions{})
	fill(p.bufB[:128], 8)
	fill(p.bufA[8192:8192+128], 9)
	must(t, q3a.PostRecv(engine.RecvWR{ID: 30, SGL: sge(p.mrA, 4096, 128)}))
	must(t, q3b.PostSend(engine.SendWR{ID: 31, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(p.mrB, 0, 128)}))
	must(t, q3a.PostSend(engine.SendWR{ID: 32, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 8192, 128),
		RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 30, Opcode: engine.WCRecv, ByteLen: 128, SrcQP: q3b.Num()},
		engine.WC{WRID: 32, Opcode: engine.WCRDMAWrite})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 31, Opcode: engine.WCSend})
	if !bytes.Equal(p.bufA[4096:4096+128], p.bufB[:128]) || !bytes.Equal(p.bufB[8192:8192+128], p.bufA[8192:8192+128]) {
		t.Fatal("the third connection moved the wrong bytes")
	}
	if !q2b.FaultHeld() || q2a.State() != engine.QPSRTS {
		t.Fatal("the held connection changed")
	}
}

// A QP takes ON_DEMAND in its access flags, as rdma-core's ODP tests give it their MR's flags
// (rxe and mlx5 take them); it grants nothing.
func TestODPAccessFlagOnQP(t *testing.T) {
	p := plainPair(t)
	qp, err := p.pdA.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: p.cqA, RecvCQ: p.cqA,
		Cap: engine.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, qp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: engine.AccessRemoteRead | engine.AccessOnDemand},
		engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags))
	if err := qp.Modify(engine.QPAttr{AccessFlags: engine.AccessZeroBased}, engine.AttrAccessFlags); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ZERO_BASED in a QP's access flags: %v, want EINVAL", err)
	}
}
