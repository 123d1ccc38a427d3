// Package devscenario is the device's key-space scenario, run by the tests of every transport
// the Go driver has (in process over a vfio-user socketpair, and through QEMU under qtest): the
// driver drives the softirdma function, whose engine stands on a UDP link to a softirdma peer,
// through windows of both types, invalidation from both ends, a dereg refused while a window is
// bound, a READ, an atomic and a SEND into a receive on an SRQ.
package devscenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"

	"github.com/softirdma/softirdma/hw/abi"
	"github.com/softirdma/softirdma/hw/driver"
	"github.com/softirdma/softirdma/wire/decode"
)

// Env is what a transport gives the scenario.
type Env struct {
	Driver *driver.Driver
	// Vector is the MSI-X vector the completion EQ signals; Armed says an event is awaited
	// (clear the signal), Wait waits until it came and says if it did not.
	Vector uint16
	Armed  func()
	Wait   func() error
	// Peer is the softirdma device at the other end of the function's link, at PeerIP; the
	// function is at FunctionIP.
	Peer       *engine.Device
	PeerIP     netip.Addr
	FunctionIP netip.Addr
	// Pcap, if set, gives the capture of the function's link once the scenario ran.
	Pcap func() []byte
	// Step, if set, runs what is due on a simulated clock: the scenario calls it while it
	// waits for the peer.
	Step func()
}

// checkPcap decodes the capture: RoCEv2 frames there, every one well formed with a good ICRC.
func checkPcap(t *testing.T, pcap func() []byte) {
	sum, err := decode.Run(bytes.NewReader(pcap()), io.Discard, decode.Options{})
	if err != nil {
		t.Fatalf("decoding the link's capture: %v", err)
	}
	if sum.RoCEv2 < 20 || sum.ICRCBad != 0 || sum.Malformed != 0 || sum.ICRCOK != sum.RoCEv2 {
		t.Fatalf("the link's capture: %s", sum)
	}
}

// Run runs the scenario. With env.Pcap, the capture of the function's link, it then checks
// every RoCEv2 frame decodes with a good ICRC.
func Run(t *testing.T, env Env) {
	if env.Pcap != nil {
		defer checkPcap(t, env.Pcap)
	}
	s := &scenario{t: t, env: env, d: env.Driver, peerQPs: map[*driver.QP]*engine.QP{}}
	s.checkPort()
	s.setup()
	s.type2Window()
	s.type1Window()
	s.readAndAtomic()
	s.srqReceive()
	s.rereg()
}

// scenario is the run's state: the function's objects, made through the driver, and the peer's.
type scenario struct {
	t   *testing.T
	env Env
	d   *driver.Driver
	// The function's: a completion EQ and CQ, a PD with an MR of 16 KiB, an SRQ, a QP with a
	// receive queue of its own (q) and one on the SRQ (qs).
	eq    *driver.EQ
	cq    *driver.CQ
	pd    uint32
	mr    driver.MR
	srq   *driver.SRQ
	q, qs *driver.QP
	// The peer's: a PD and CQ, an MR of the pattern, and a QP for each of the function's.
	ppd     *engine.PD
	pcq     *engine.CQ
	pmr     *engine.MR
	peerQPs map[*driver.QP]*engine.QP
}

func (s *scenario) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

// checkPort checks the port as the control queue reports it: up, 4096-byte MTUs on a socket
// link, and no GID programmed (the device goes by the address it was given).
func (s *scenario) checkPort() {
	t := s.t
	port, err := s.d.QueryPort()
	s.must(err)
	if port != (driver.Port{State: 4, MaxMTU: 5, ActiveMTU: 5, GIDTableLen: abi.GIDTableLen}) {
		t.Fatalf("QUERY_PORT: %+v", port)
	}
	if _, valid, err := s.d.QueryGID(0); err != nil || valid {
		t.Fatalf("QUERY_GID 0 with no GID programmed: valid %v, %v", valid, err)
	}
}

// setup makes both sides' objects and connects q and qs to peer QPs.
func (s *scenario) setup() {
	d, must := s.d, s.must
	var err error
	s.eq, err = d.CreateEQ(4, abi.EQCompletion, s.env.Vector)
	must(err)
	s.cq, err = d.CreateCQ(6, s.eq)
	must(err)
	s.pd, err = d.AllocPD()
	must(err)
	s.mr, err = d.RegMR(s.pd, 16384, 1|2|4|8|16) // local write, remote write/read/atomic, MW bind
	must(err)
	s.srq, err = d.CreateSRQ(s.pd, 4, 1, 0)
	must(err)
	s.q, err = d.CreateQP(s.pd, s.cq, s.cq, driver.QPCaps{SendLog: 4, RecvLog: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64})
	must(err)
	s.qs, err = d.CreateQPOnSRQ(s.pd, s.cq, s.cq, s.srq, driver.QPCaps{SendLog: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	must(err)

	peer := s.env.Peer
	s.ppd, _ = peer.AllocPD()
	s.pcq, _ = peer.CreateCQ(64)
	s.pmr, err = s.ppd.RegMR(pattern(4096), engine.AccessLocalWrite|engine.AccessRemoteRead|engine.AccessRemoteAtomic)
	must(err)
	s.connect(s.q)
	s.connect(s.qs)
}

// connect makes a fresh peer QP for gq and takes both through INIT, RTR and RTS (again, after an
// error failed both).
func (s *scenario) connect(gq *driver.QP) {
	s.t.Helper()
	pqp, err := s.ppd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: s.pcq, RecvCQ: s.pcq,
		Cap: engine.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	s.must(err)
	s.peerQPs[gq] = pqp
	s.must(gq.Modify(driver.QPAttr{State: 0}, 1))
	ConnectPeer(s.t, gq, pqp, s.env.PeerIP, s.env.FunctionIP, 3)
}

// arm readies the CQ's completion event.
func (s *scenario) arm() {
	s.t.Helper()
	s.env.Armed()
	s.must(s.d.Arm(s.cq, false))
}

// done waits for the completion event the armed CQ sends and returns the completion.
func (s *scenario) done() driver.WC {
	t := s.t
	t.Helper()
	if err := s.env.Wait(); err != nil {
		// Say what the device did: an event lost, or no completion at all.
		ev, _ := s.eq.Poll()
		wcs, _ := s.cq.Poll(8)
		t.Fatalf("no completion event: %v (EQ entries %v, CQEs %+v)", err, ev, wcs)
	}
	ev, err := s.eq.Poll()
	s.must(err)
	if len(ev) == 0 || ev[0].Num != s.cq.Num {
		t.Fatalf("EQ entries %v", ev)
	}
	wcs, err := s.cq.Poll(1)
	s.must(err)
	if len(wcs) != 1 {
		t.Fatal("an event without its completion")
	}
	return wcs[0]
}

// post posts one WR on q with its completion awaited through the event.
func (s *scenario) post(wr driver.SendWR) driver.WC {
	s.t.Helper()
	s.arm()
	s.must(s.q.PostSend(wr))
	wc := s.done()
	if wc.WRID != wr.ID {
		s.t.Fatalf("completion %+v for wr %d", wc, wr.ID)
	}
	return wc
}

// peerWriteAt WRITEs 64 bytes from the peer through rkey at addr and returns the status.
func (s *scenario) peerWriteAt(addr uint64, rkey uint32) engine.WCStatus {
	s.t.Helper()
	s.must(s.peerQPs[s.q].PostSend(engine.SendWR{ID: 7, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled,
		SGL: []engine.SGE{{Addr: s.pmr.Addr(), Length: 64, LKey: s.pmr.LKey()}}, RemoteAddr: addr, RKey: rkey}))
	return WaitPeerStep(s.t, s.pcq, s.env.Step).Status
}

// peerWrite is peerWriteAt the MR's second page.
func (s *scenario) peerWrite(rkey uint32) engine.WCStatus {
	s.t.Helper()
	return s.peerWriteAt(s.mr.Addr+4096, rkey)
}

// bind binds window mw with key over the MR's second page, remote write, by a BIND_MW WQE.
func (s *scenario) bind(mw, key uint32) {
	s.t.Helper()
	w := driver.Bind{MRLKey: s.mr.Key, Addr: s.mr.Addr + 4096, Length: 4096, Access: 2, MWRKey: mw, NewRKey: key}
	if wc := s.post(driver.SendWR{ID: 60, Opcode: driver.WRBindMW, Flags: driver.SendSignaled, Bind: w}); wc.Status != 0 {
		s.t.Fatalf("bind completion %+v", wc)
	}
}

// key8 is key k with its key8 advanced by n.
func key8(k uint32, n uint32) uint32 { return k&^0xff | (k+n)&0xff }

// type2Window: a type 2 window bound by a WQE; the peer writes through it and the bytes are in
// guest RAM. The MR cannot go while it is bound, and it is invalidated from both ends.
func (s *scenario) type2Window() {
	t, d, must := s.t, s.d, s.must
	mw2, err := d.AllocMW(s.pd, abi.STagMWType2B)
	must(err)
	s.bind(mw2, key8(mw2, 1))
	if st := s.peerWrite(key8(mw2, 1)); st != engine.WCSuccess {
		t.Fatalf("WRITE through the bound window: %s", st)
	}
	got := make([]byte, 64)
	must(d.ReadMem(s.mr.Addr+4096, got))
	if string(got) != string(pattern(64)) {
		t.Fatalf("guest RAM after the peer's WRITE: % x", got[:8])
	}
	// The MR cannot be deregistered while a window is bound to it (EBUSY, as the verbs API).
	if err := d.DeallocSTag(s.mr.Key); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("dereg with a window bound: %v", err)
	}
	// LOCAL_INV by the guest: the next WRITE is refused.
	if wc := s.post(driver.SendWR{ID: 61, Opcode: driver.WRLocalInv, Flags: driver.SendSignaled, Imm: key8(mw2, 1)}); wc.Status != 0 {
		t.Fatalf("LOCAL_INV completion %+v", wc)
	}
	if st := s.peerWrite(key8(mw2, 1)); st != engine.WCRemAccessErr {
		t.Fatalf("WRITE after LOCAL_INV: %s, want REM_ACCESS_ERR", st)
	}
	// A rebind with a new key8 works again (the refusal failed both QPs: they start over).
	s.connect(s.q)
	s.bind(mw2, key8(mw2, 2))
	if st := s.peerWrite(key8(mw2, 2)); st != engine.WCSuccess {
		t.Fatalf("WRITE after the rebind: %s", st)
	}
	// SEND_WITH_INV from the peer invalidates it remotely; the guest's receive says which key.
	s.arm()
	must(s.q.PostRecv(70, driver.SGE{Addr: s.mr.Addr, Length: 256, Key: s.mr.Key}))
	must(s.peerQPs[s.q].PostSend(engine.SendWR{ID: 8, Opcode: engine.WRSendWithInv, Imm: key8(mw2, 2),
		SGL: []engine.SGE{{Addr: s.pmr.Addr(), Length: 16, LKey: s.pmr.LKey()}}}))
	if wc := s.done(); wc.WRID != 70 || wc.Status != 0 || wc.Flags&8 == 0 || wc.Imm != key8(mw2, 2) {
		t.Fatalf("receive of SEND_WITH_INV %+v", wc)
	}
	if st := s.peerWrite(key8(mw2, 2)); st != engine.WCRemAccessErr {
		t.Fatalf("WRITE after SEND_WITH_INV: %s, want REM_ACCESS_ERR", st)
	}
}

// type1Window: a type 1 window, bound as the provider binds one: a BIND_MW WQE with key8 + 1.
func (s *scenario) type1Window() {
	s.connect(s.q)
	mw1, err := s.d.AllocMW(s.pd, abi.STagMWType1)
	s.must(err)
	s.bind(mw1, key8(mw1, 1))
	if st := s.peerWrite(key8(mw1, 1)); st != engine.WCSuccess {
		s.t.Fatalf("WRITE through the type 1 window: %s", st)
	}
}

// readAndAtomic: a READ and an atomic from the guest to the peer.
func (s *scenario) readAndAtomic() {
	t, d, must, mr, pmr := s.t, s.d, s.must, s.mr, s.pmr
	if wc := s.post(driver.SendWR{ID: 80, Opcode: driver.WRRDMARead, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: mr.Addr + 8192, Length: 4096, Key: mr.Key}}, RemoteAddr: pmr.Addr(), RKey: pmr.RKey()}); wc.Status != 0 || wc.ByteLen != 4096 {
		t.Fatalf("READ completion %+v", wc)
	}
	back := make([]byte, 4096)
	must(d.ReadMem(mr.Addr+8192, back))
	if string(back) != string(pattern(4096)) {
		t.Fatal("the READ did not bring the peer's bytes")
	}
	// The peer's word before the atomic, from the pattern rather than from its buffer: the
	// peer's engine writes that, and the order the wire gives is one the race detector cannot see.
	before := le64(pattern(72)[64:])
	if wc := s.post(driver.SendWR{ID: 81, Opcode: driver.WRAtomicFetchAndAdd, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: mr.Addr + 12288, Length: 8, Key: mr.Key}}, RemoteAddr: pmr.Addr() + 64, RKey: pmr.RKey(), CompareAdd: 3}); wc.Status != 0 {
		t.Fatalf("atomic completion %+v", wc)
	}
	var orig [8]byte
	must(d.ReadMem(mr.Addr+12288, orig[:]))
	if got := le64(orig[:]); got != before {
		t.Fatalf("fetch-and-add returned 0x%x, the word was 0x%x", got, before)
	}
}

// srqReceive: a SEND from the peer into a receive on the SRQ, taken by the QP on it.
func (s *scenario) srqReceive() {
	s.arm()
	s.must(s.srq.PostRecv(90, driver.SGE{Addr: s.mr.Addr + 12800, Length: 64, Key: s.mr.Key}))
	s.must(s.peerQPs[s.qs].PostSend(engine.SendWR{ID: 9, Opcode: engine.WRSend, SGL: []engine.SGE{{Addr: s.pmr.Addr(), Length: 32, LKey: s.pmr.LKey()}}}))
	if wc := s.done(); wc.WRID != 90 || wc.Status != 0 || wc.ByteLen != 32 || wc.QPNum != s.qs.Num {
		s.t.Fatalf("SRQ receive %+v", wc)
	}
}

// rereg: an MR moved to fresh pages by REREG_MR keeps its key, and the peer's WRITE lands in
// them; with its remote rights taken away the next WRITE is refused.
func (s *scenario) rereg() {
	t, d, must := s.t, s.d, s.must
	mr2, err := d.RegMR(s.pd, 4096, 1|2)
	must(err)
	moved, err := d.ReregMR(mr2, abi.ReregTranslation, s.pd, 8192, 1|2)
	must(err)
	if st := s.peerWriteAt(moved.Addr+4096, moved.Key); st != engine.WCSuccess {
		t.Fatalf("WRITE through the reregistered MR: %s", st)
	}
	got := make([]byte, 64)
	must(d.ReadMem(moved.Addr+4096, got))
	if string(got) != string(pattern(64)) {
		t.Fatalf("the reregistered MR's pages after the peer's WRITE: % x", got[:8])
	}
	_, err = d.ReregMR(moved, abi.ReregAccess, s.pd, 0, 1)
	must(err)
	if st := s.peerWriteAt(moved.Addr+4096, moved.Key); st != engine.WCRemAccessErr {
		t.Fatalf("WRITE after REREG_MR took REMOTE_WRITE away: %s, want REM_ACCESS_ERR", st)
	}
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 |
		uint64(b[6])<<48 | uint64(b[7])<<56
}

// pattern is the peer's buffer as it starts.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i ^ 0x5a)
	}
	return b
}

// ConnectPeer takes the function's QP gq and the peer's pqp through INIT, RTR and RTS to each
// other (the peer at peerIP, the function at fnIP), at path MTU mtu (ibv_mtu), each granting
// the other remote write, read and atomics.
func ConnectPeer(tb testing.TB, gq *driver.QP, pqp *engine.QP, peerIP, fnIP netip.Addr, mtu uint8) {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	must(gq.Modify(driver.QPAttr{State: 1, PortNum: 1, AccessFlags: 2 | 4 | 8}, 1|8|16|32))
	must(gq.Modify(driver.QPAttr{State: 2, PathMTU: mtu, DestQPN: pqp.Num(), MaxDestRdAtomic: 4, MinRNRTimer: engine.DefaultMinRNRTimer, HopLimit: 64,
		DGID: peerIP.As16()}, 1|128|256|1<<20|1<<12|1<<17|1<<15))
	must(gq.Modify(driver.QPAttr{State: 3, Timeout: engine.DefaultTimeout, RetryCnt: engine.DefaultRetryCnt, RNRRetry: engine.DefaultRNRRetry, MaxRdAtomic: 4}, 1|1<<16|1<<9|1<<10|1<<11|1<<13))
	must(pqp.Modify(engine.QPAttr{State: engine.QPSInit, Port: 1, AccessFlags: engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessRemoteAtomic},
		engine.AttrState|engine.AttrPKeyIndex|engine.AttrPort|engine.AttrAccessFlags))
	must(pqp.Modify(engine.QPAttr{State: engine.QPSRTR, AH: engine.AHAttr{DGID: fnIP, HopLimit: 64},
		PathMTU: engine.MTU(mtu), DestQPN: gq.Num, MaxDestRdAtomic: 4, MinRNRTimer: engine.DefaultMinRNRTimer},
		engine.AttrState|engine.AttrAV|engine.AttrPathMTU|engine.AttrDestQPN|engine.AttrRQPSN|engine.AttrMaxDestRdAtomic|engine.AttrMinRNRTimer))
	must(pqp.Modify(engine.QPAttr{State: engine.QPSRTS, Timeout: engine.DefaultTimeout, RetryCnt: engine.DefaultRetryCnt, RNRRetry: engine.DefaultRNRRetry, MaxRdAtomic: 4},
		engine.AttrState|engine.AttrSQPSN|engine.AttrTimeout|engine.AttrRetryCnt|engine.AttrRNRRetry|engine.AttrMaxQPRdAtomic))
}

// WaitPeer polls a peer's CQ, the engine's own, until it has a completion, and returns it.
func WaitPeer(t testing.TB, cq *engine.CQ) engine.WC {
	t.Helper()
	return WaitPeerStep(t, cq, nil)
}

// WaitPeerStep is WaitPeer with step (if not nil) run before each poll: the clock of a
// simulated link.
func WaitPeerStep(t testing.TB, cq *engine.CQ, step func()) engine.WC {
	t.Helper()
	wc := make([]engine.WC, 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if step != nil {
			step()
		}
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer's work request did not complete")
		}
		time.Sleep(time.Millisecond)
	}
}

// LoopbackPair makes, through d, two QPs of the function connected to each other over its
// loopback (the function at ip), a CQ for both, and an MR of 1 MiB; it returns the first QP.
func LoopbackPair(tb testing.TB, d *driver.Driver, ip netip.Addr) (*driver.QP, *driver.CQ, driver.MR) {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	pd, err := d.AllocPD()
	must(err)
	mr, err := d.RegMR(pd, 1<<20, 1|2|4)
	must(err)
	cq, err := d.CreateCQ(8, nil)
	must(err)
	caps := driver.QPCaps{SendLog: 7, RecvLog: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}
	q1, err := d.CreateQP(pd, cq, cq, caps)
	must(err)
	q2, err := d.CreateQP(pd, cq, cq, caps)
	must(err)
	for _, p := range [][2]*driver.QP{{q1, q2}, {q2, q1}} {
		must(p[0].Modify(driver.QPAttr{State: 1, PortNum: 1, AccessFlags: 2 | 4}, 1|8|16|32))
		must(p[0].Modify(driver.QPAttr{State: 2, PathMTU: 5, DestQPN: p[1].Num, MaxDestRdAtomic: 4, MinRNRTimer: engine.DefaultMinRNRTimer, HopLimit: 64,
			DGID: ip.As16()}, 1|128|256|1<<20|1<<12|1<<17|1<<15))
		must(p[0].Modify(driver.QPAttr{State: 3, Timeout: engine.DefaultTimeout, RetryCnt: engine.DefaultRetryCnt, RNRRetry: engine.DefaultRNRRetry, MaxRdAtomic: 4}, 1|1<<16|1<<9|1<<10|1<<11|1<<13))
	}
	return q1, cq, mr
}

// WaitOne polls cq until a completion is there, and fails on an error one.
func WaitOne(tb testing.TB, cq *driver.CQ) { waitN(tb, cq, 1) }

// waitN polls cq until n completions are there, for up to 30 s, and fails on an error one.
func waitN(tb testing.TB, cq *driver.CQ, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for n > 0 {
		wcs, err := cq.Poll(n)
		if err != nil {
			tb.Fatal(err)
		}
		for _, wc := range wcs {
			if wc.Status != 0 {
				tb.Fatalf("completion %+v", wc)
			}
		}
		n -= len(wcs)
		if n > 0 && time.Now().After(deadline) {
			tb.Fatalf("%d completions still missing after 30 s", n)
		}
	}
}

// DoorbellToCompletion is one 8-byte WRITE from q through the driver until its completion is in
// cq: a benchmark's loop body.
func DoorbellToCompletion(tb testing.TB, q *driver.QP, cq *driver.CQ, mr driver.MR) {
	if err := q.PostSend(driver.SendWR{ID: 1, Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
		SGL: []driver.SGE{{Addr: mr.Addr, Length: 8, Key: mr.Key}}, RemoteAddr: mr.Addr + 4096, RKey: mr.Key}); err != nil {
		tb.Fatal(err)
	}
	WaitOne(tb, cq)
}

// WQERate is a WQE-rate benchmark over the loopback pair pair makes (LoopbackPair through some
// transport): one sub-benchmark a batch size, each of whose loops posts a batch of signaled
// 8-byte WRITEs with one doorbell and waits for their completions (writeBatch). It reports
// WQEs/s; ns/op is a batch's.
func WQERate(b *testing.B, pair func(*testing.B) (*driver.QP, *driver.CQ, driver.MR)) {
	// One WQE a doorbell, and more. The batches stay within half of LoopbackPair's send queue
	// (127 WQEs): the function gives a batch's slots back (the send queue's consumer index) only
	// just after writing its completions, so a batch posted as soon as the last one's
	// completions are seen may find that one's slots not yet free.
	for _, n := range []int{1, 16, 32} {
		b.Run(fmt.Sprintf("batch-%d", n), func(b *testing.B) {
			q, cq, mr := pair(b)
			for b.Loop() {
				writeBatch(b, q, cq, mr, n)
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "WQEs/s")
		})
	}
}

// writeBatch is n signaled 8-byte WRITEs from q, written into the send queue and rung with one
// doorbell, until their n completions are in cq.
func writeBatch(tb testing.TB, q *driver.QP, cq *driver.CQ, mr driver.MR, n int) {
	wrs := make([]driver.SendWR, n)
	for i := range wrs {
		off := 8 * uint64(i)
		wrs[i] = driver.SendWR{ID: uint64(i), Opcode: driver.WRRDMAWrite, Flags: driver.SendSignaled,
			SGL: []driver.SGE{{Addr: mr.Addr + off, Length: 8, Key: mr.Key}}, RemoteAddr: mr.Addr + 4096 + off, RKey: mr.Key}
	}
	if err := q.PostSend(wrs...); err != nil {
		tb.Fatal(err)
	}
	waitN(tb, cq, n)
}
