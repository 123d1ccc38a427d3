package engine_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/realtime"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire/neigh"
)

// solo is one device on a simulated fabric with two RC QPs on it, connected to each other, and
// one registered buffer: both ends of the connection on one device, as rdma-core's tests put
// them on rxe.
type solo struct {
	t      testing.TB
	sim    *sim.Sim
	fab    *sim.Fabric
	dev    *engine.Device
	pd     *engine.PD
	cq     *engine.CQ
	qa, qb *engine.QP
	buf    []byte
	mr     *engine.MR
	events []engine.Event
}

func newSolo(t testing.TB, seed uint64, link sim.LinkConfig, o engine.ConnectOptions) *solo {
	t.Helper()
	s := &solo{t: t, sim: sim.NewSim()}
	s.fab = sim.NewFabric(s.sim, seed)
	s.fab.OnEvent(func(e engine.Event) { s.events = append(s.events, e) })
	s.dev = s.fab.AddDevice("A", link)
	var err error
	s.pd, err = s.dev.AllocPD()
	must(t, err)
	s.cq, err = s.dev.CreateCQ(4096)
	must(t, err)
	caps := engine.QPCap{MaxSendWR: 512, MaxRecvWR: 512, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	s.qa, err = s.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq, Cap: caps})
	must(t, err)
	s.qb, err = s.pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq, Cap: caps})
	must(t, err)
	must(t, engine.ConnectRC(s.qa, s.qb, o))
	s.buf = make([]byte, 4<<20)
	all := engine.AccessLocalWrite | engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessRemoteAtomic | engine.AccessMWBind
	s.mr, err = s.pd.RegMR(s.buf, all)
	must(t, err)
	return s
}

func (s *solo) run() {
	s.t.Helper()
	if n := s.sim.RunUntilIdle(5_000_000); n == 5_000_000 {
		s.t.Fatalf("simulation still busy after %d events", n)
	}
}

// noLink asserts that nothing the device sent reached its link and that every frame it sent
// came back to it.
func (s *solo) noLink() {
	s.t.Helper()
	if ls := s.fab.LinkStats(s.dev); ls != (sim.LinkStats{}) {
		s.t.Fatalf("loopback traffic reached the link: %+v", ls)
	}
	st := s.dev.Stats()
	if st.TxFrames == 0 || st.Loopback != st.TxFrames || st.RxFrames != st.TxFrames {
		s.t.Fatalf("sent %d frames, looped back %d, received %d", st.TxFrames, st.Loopback, st.RxFrames)
	}
}

// byCQ splits one CQ's completions by QP.
func byQP(wcs []engine.WC, qpn uint32) []engine.WC {
	var out []engine.WC
	for _, w := range wcs {
		if w.QPNum == qpn {
			out = append(out, w)
		}
	}
	return out
}

func TestLoopbackRCOperations(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	src, dst := s.buf[:1<<20], s.buf[1<<20:2<<20]
	fill(src[:16384], 3)

	// SEND/RECV, one packet and five.
	must(t, s.qb.PostRecv(engine.RecvWR{ID: 100, SGL: sge(s.mr, 1<<20, 8192)}, engine.RecvWR{ID: 101, SGL: sge(s.mr, 1<<20+8192, 8192)}))
	must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 64)},
		engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 5000)}))
	s.run()
	wcs := poll(s.cq)
	wantWC(t, byQP(wcs, s.qa.Num()), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCSend})
	wantWC(t, byQP(wcs, s.qb.Num()), engine.WC{WRID: 100, Opcode: engine.WCRecv, ByteLen: 64}, engine.WC{WRID: 101, Opcode: engine.WCRecv, ByteLen: 5000})
	if !bytes.Equal(dst[:64], src[:64]) || !bytes.Equal(dst[8192:8192+5000], src[:5000]) {
		t.Fatal("SEND data differs")
	}

	// RDMA WRITE from B's side into A's region of the same MR, then READ it back.
	fill(src[20000:30000], 11)
	must(t, s.qb.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(s.mr, 20000, 10000),
		RemoteAddr: s.mr.Addr() + 1<<20 + 100000, RKey: s.mr.RKey()}))
	must(t, s.qb.PostSend(engine.SendWR{ID: 4, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(s.mr, 3<<20, 10000),
		RemoteAddr: s.mr.Addr() + 1<<20 + 100000, RKey: s.mr.RKey()}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 4, Opcode: engine.WCRDMARead, ByteLen: 10000})
	if !bytes.Equal(dst[100000:110000], src[20000:30000]) || !bytes.Equal(s.buf[3<<20:3<<20+10000], src[20000:30000]) {
		t.Fatal("WRITE/READ data differs")
	}

	// Atomics.
	binary.LittleEndian.PutUint64(dst[200000:], 40)
	must(t, s.qa.PostSend(engine.SendWR{ID: 5, Opcode: engine.WRAtomicFetchAndAdd, Flags: engine.SendSignaled, SGL: sge(s.mr, 300000, 8),
		RemoteAddr: s.mr.Addr() + 1<<20 + 200000, RKey: s.mr.RKey(), CompareAdd: 2}))
	must(t, s.qa.PostSend(engine.SendWR{ID: 6, Opcode: engine.WRAtomicCmpAndSwp, Flags: engine.SendSignaled, SGL: sge(s.mr, 300008, 8),
		RemoteAddr: s.mr.Addr() + 1<<20 + 200000, RKey: s.mr.RKey(), CompareAdd: 42, Swap: 7}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 5, Opcode: engine.WCFetchAdd}, engine.WC{WRID: 6, Opcode: engine.WCCompSwap})
	if got := le64(dst[200000:]); got != 7 {
		t.Fatalf("target word %d, want 7", got)
	}
	if a, b := le64(src[300000:]), le64(src[300008:]); a != 40 || b != 42 {
		t.Fatalf("atomic results %d %d, want 40 42", a, b)
	}

	// A READ of 1 MiB: 1,024 response packets, all looped back.
	fill(src, 17)
	clear(dst)
	must(t, s.qb.PostSend(engine.SendWR{ID: 7, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(s.mr, 1<<20, 1<<20),
		RemoteAddr: s.mr.Addr(), RKey: s.mr.RKey()}))
	before := s.dev.Stats().Loopback
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 7, Opcode: engine.WCRDMARead, ByteLen: 1 << 20})
	if !bytes.Equal(dst, src) {
		t.Fatal("1 MiB READ data differs")
	}
	if n := s.dev.Stats().Loopback - before; n != 1+1024 {
		t.Fatalf("1 MiB READ looped back %d frames, want 1 request and 1024 responses", n)
	}
	if st := s.dev.Stats(); st.Retransmits != 0 || st.RxDropped != 0 || st.SeqNAKsSent != 0 || st.DuplicatesSeen != 0 {
		t.Fatalf("loopback is lossless and in order, but %+v", st)
	}
	s.noLink()
}

// SEND_WITH_INV between two QPs of one device invalidates a window of that device.
func TestLoopbackSendWithInvWindow(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	mw, err := s.pd.AllocMW(engine.MWType2)
	must(t, err)
	must(t, s.qb.PostSend(engine.SendWR{ID: 7, Opcode: engine.WRBindMW, Flags: engine.SendSignaled, Bind: engine.BindInfo{MW: mw, RKey: uint32(keys.Key(mw.RKey()).Inc()), MR: s.mr,
		Addr: s.mr.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 7, Opcode: engine.WCBindMW})
	rkey := mw.RKey()
	// The window works before.
	must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(s.mr, 8192, 8), RemoteAddr: s.mr.Addr(), RKey: rkey}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})

	must(t, s.qb.PostRecv(engine.RecvWR{ID: 8, SGL: sge(s.mr, 16384, 64)}))
	must(t, s.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSendWithInv, Flags: engine.SendSignaled, SGL: sge(s.mr, 8192, 32), Imm: rkey}))
	s.run()
	wcs := poll(s.cq)
	wantWC(t, byQP(wcs, s.qa.Num()), engine.WC{WRID: 2, Opcode: engine.WCSend})
	wantWC(t, byQP(wcs, s.qb.Num()), engine.WC{WRID: 8, Opcode: engine.WCRecv, ByteLen: 32, Flags: engine.WCWithInv, Imm: rkey})
	info, err := s.dev.QueryMW(mw)
	must(t, err)
	if info.Bound {
		t.Fatalf("window still valid after SEND_WITH_INV: %+v", info)
	}
	// And refuses access after.
	must(t, s.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, SGL: sge(s.mr, 8192, 8), RemoteAddr: s.mr.Addr(), RKey: rkey}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 3, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite})
	s.noLink()
}

// A SEND with no receive posted is met with RNR NAKs, looped back like everything else; the
// requester retries until a receive turns up (rnr_retry 7), or gives up (rnr_retry 1).
func TestLoopbackRNR(t *testing.T) {
	t.Run("retry_until_receive", func(t *testing.T) {
		s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
		fill(s.buf[:64], 5)
		must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 64)}))
		s.sim.RunFor(3 * time.Millisecond) // 0.64 ms RNR timer: a few RNR NAKs
		if n := s.dev.Stats().RNRNAKsSent; n < 2 {
			t.Fatalf("%d RNR NAKs in 3 ms, want several", n)
		}
		if wcs := poll(s.cq); len(wcs) != 0 {
			t.Fatalf("completions before a receive was posted: %s", fmtWC(wcs))
		}
		must(t, s.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(s.mr, 4096, 64)}))
		s.run()
		wcs := poll(s.cq)
		wantWC(t, byQP(wcs, s.qa.Num()), engine.WC{WRID: 1, Opcode: engine.WCSend})
		wantWC(t, byQP(wcs, s.qb.Num()), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 64})
		if !bytes.Equal(s.buf[4096:4096+64], s.buf[:64]) {
			t.Fatal("SEND data differs")
		}
		s.noLink()
	})
	t.Run("retry_exceeded", func(t *testing.T) {
		s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{RNRRetry: 1, NoDefaults: true, MTU: engine.MTU1024, Timeout: 14, RetryCnt: 7, MinRNRTimer: 1, MaxRdAtomic: 1})
		must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 8)}))
		s.run()
		wcs := poll(s.cq)
		wantWC(t, byQP(wcs, s.qa.Num()), engine.WC{WRID: 1, Status: engine.WCRNRRetryExcErr, Opcode: engine.WCSend})
		if n := s.dev.Stats().RNRNAKsSent; n != 2 {
			t.Fatalf("%d RNR NAKs, want 2 (the first try and one retry)", n)
		}
		s.noLink()
	})
}

// A QP connected to itself (the same QPN at both ends) by ConnectRC(qp, qp), which walks it
// through INIT, RTR and RTS once, writes to and reads from its own device's memory, as on rxe.
func TestLoopbackSelfConnectedQP(t *testing.T) {
	sm := sim.NewSim()
	fab := sim.NewFabric(sm, 7)
	dev := fab.AddDevice("A", sim.LinkConfig{})
	pd, err := dev.AllocPD()
	must(t, err)
	cq, err := dev.CreateCQ(64)
	must(t, err)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: engine.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, engine.ConnectRC(qp, qp, engine.ConnectOptions{PSNA: 0x123456, PSNB: 7}))
	a := qp.Query()
	if a.State != engine.QPSRTS || a.DestQPN != qp.Num() || a.SQPSN != 0x123456 || a.RQPSN != 0x123456 || a.AH.DGID != dev.IP() {
		t.Fatalf("self-connected QP: state %s dest 0x%x sq_psn %#x rq_psn %#x dgid %s", a.State, a.DestQPN, a.SQPSN, a.RQPSN, a.AH.DGID)
	}
	buf := make([]byte, 1<<16)
	mr, err := pd.RegMR(buf, engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessRemoteRead|engine.AccessRemoteAtomic)
	must(t, err)
	fill(buf[:5000], 9)
	must(t, qp.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mr, 0, 5000), RemoteAddr: mr.Addr() + 8192, RKey: mr.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(mr, 16384, 5000), RemoteAddr: mr.Addr() + 8192, RKey: mr.RKey()}))
	sm.RunUntilIdle(100000)
	wantWC(t, poll(cq), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: 5000})
	if !bytes.Equal(buf[8192:8192+5000], buf[:5000]) || !bytes.Equal(buf[16384:16384+5000], buf[:5000]) {
		t.Fatal("self WRITE/READ data differs")
	}
	if dev.Stats().Loopback == 0 || dev.Stats().Retransmits != 0 {
		t.Fatalf("loopback %d frames, %d retransmits", dev.Stats().Loopback, dev.Stats().Retransmits)
	}
	if ls := fab.LinkStats(dev); ls != (sim.LinkStats{}) {
		t.Fatalf("loopback traffic reached the link: %+v", ls)
	}
}

// The same seed gives the same event trace under loopback, and the fabric's pcap holds no
// loopback frame (tcpdump on rxe's netdev does not see its loopback either): only the header.
// The link's loss does not apply to loopback either: a link losing every frame loses none.
func TestLoopbackDeterministicNoPcap(t *testing.T) {
	trace := func(seed uint64) (string, int) {
		s := newSolo(t, seed, sim.LinkConfig{Loss: 1, Corrupt: 1}, engine.ConnectOptions{})
		s.fab.AddFault(sim.Fault{Action: sim.FaultDrop})
		var pcap bytes.Buffer
		must(t, s.fab.CapturePcap(&pcap))
		fill(s.buf[:1<<20], byte(seed))
		must(t, s.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(s.mr, 2<<20, 8192)}))
		must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 3000)},
			engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(s.mr, 3<<20, 100000), RemoteAddr: s.mr.Addr(), RKey: s.mr.RKey()},
			engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 20000), RemoteAddr: s.mr.Addr() + 1<<20, RKey: s.mr.RKey()}))
		s.run()
		wcs := poll(s.cq)
		wantWC(t, byQP(wcs, s.qa.Num()), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: 100000}, engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite})
		wantWC(t, byQP(wcs, s.qb.Num()), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 3000})
		s.noLink()
		var b bytes.Buffer
		for _, e := range s.events {
			fmt.Fprintf(&b, "%v %s %d %d %d %s\n", e.T, e.Device, e.QP, e.Kind, e.PSN, e.Msg)
		}
		fmt.Fprintf(&b, "steps %d now %v\n", s.sim.Steps(), s.sim.Now())
		return b.String(), pcap.Len()
	}
	a, pa := trace(42)
	b, _ := trace(42)
	if a != b {
		t.Fatal("the same seed gave two traces")
	}
	if len(a) < 1000 {
		t.Fatalf("trace too short to mean anything:\n%s", a)
	}
	if pa != 24 {
		t.Fatalf("pcap of %d bytes, want the 24-byte header alone", pa)
	}
}

// A device whose peer is itself on another device's link still uses the link, and the two
// kinds of traffic mix: A talks to B over the link and to itself over loopback at once.
func TestLoopbackBesideLink(t *testing.T) {
	p := newPair(t, 3, sim.LinkConfig{}, engine.ConnectOptions{})
	caps := engine.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	q1, _ := connectedRC(t, rcEnd{pd: p.pdA, cq: p.cqA, cap: caps}, rcEnd{pd: p.pdA, cq: p.cqA, cap: caps}, engine.ConnectOptions{})
	fill(p.bufA[:8192], 1)
	must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8192), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	must(t, q1.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8192), RemoteAddr: p.mrA.Addr() + 65536, RKey: p.mrA.RKey()}))
	p.run()
	wcs := poll(p.cqA)
	wantWC(t, byQP(wcs, p.qa.Num()), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite})
	wantWC(t, byQP(wcs, q1.Num()), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite})
	if !bytes.Equal(p.bufB[:8192], p.bufA[:8192]) || !bytes.Equal(p.bufA[65536:65536+8192], p.bufA[:8192]) {
		t.Fatal("data differs")
	}
	// 8 WRITE packets to B and 8 to itself; the ACKs coalesce, so count only the requests.
	if ls := p.fab.LinkStats(p.a); ls.TxFrames != 8 {
		t.Fatalf("A put %d frames on its link, want the 8 WRITE packets to B", ls.TxFrames)
	}
	if p.a.Stats().Loopback < 9 {
		t.Fatalf("A looped back %d frames, want the 8 WRITE packets and an ACK", p.a.Stats().Loopback)
	}
}

// countLink is a wire.Link that counts what is sent on it and receives nothing.
type countLink struct {
	mu     sync.Mutex
	sent   int
	closed chan struct{}
	once   sync.Once
}

func (l *countLink) SendBatch(frames [][]byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent += len(frames)
	return len(frames), nil
}

func (l *countLink) RecvBatch(bufs [][]byte, sizes []int) (int, error) {
	<-l.closed
	return 0, errors.New("closed")
}

func (l *countLink) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// loopHost is a real-time host on a link that counts what reaches it, started with cfg (its
// Link set here), with a PD and a CQ of its device's; the host closes when the test ends.
func loopHost(t *testing.T, cfg realtime.HostConfig) (*engine.Device, *engine.PD, *engine.CQ, *countLink) {
	t.Helper()
	link := &countLink{closed: make(chan struct{})}
	cfg.Link = link
	h, err := realtime.NewHost(cfg)
	must(t, err)
	go h.Run()
	t.Cleanup(func() { h.Close() })
	dev := h.Device()
	pd, err := dev.AllocPD()
	must(t, err)
	cq, err := dev.CreateCQ(256)
	must(t, err)
	return dev, pd, cq, link
}

// pollFor polls cq until it has given n completions, or 10 s have passed.
func pollFor(cq *engine.CQ, n int) []engine.WC {
	var wcs []engine.WC
	deadline := time.Now().Add(10 * time.Second)
	for len(wcs) < n && time.Now().Before(deadline) {
		wcs = append(wcs, poll(cq)...)
		time.Sleep(time.Millisecond)
	}
	return wcs
}

// nothingSent fails the test if any frame reached the link.
func (l *countLink) nothingSent(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	sent := l.sent
	l.mu.Unlock()
	if sent != 0 {
		t.Fatalf("%d frames reached the link", sent)
	}
}

// In real time, on a Host, loopback works the same way: delivered by the wall clock's timers
// in order, never on the link, never in the host's pcap, and both of the device's addresses
// (its IPv4 one and its IPv6 link-local one) loop back without neighbour resolution.
func TestLoopbackHost(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 0x1}
	var pcap bytes.Buffer
	dev, pd, cq, link := loopHost(t, realtime.HostConfig{Name: "A", MAC: mac, IP: netip.MustParseAddr("192.0.2.1"),
		IPs: []netip.Addr{neigh.LinkLocal(mac)}, Rand: mrand.NewPCG(1, 1), Pcap: &pcap})
	for i, addr := range []netip.Addr{dev.IP(), neigh.LinkLocal(mac)} {
		// A buffer of its own per round: a READ request sent again after its completion (the
		// ACK timer under a busy machine) is answered from memory the next round must not touch.
		buf := make([]byte, 2<<20)
		mr, err := pd.RegMR(buf, engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessRemoteRead|engine.AccessRemoteAtomic)
		must(t, err)
		caps := engine.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		qa, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
		must(t, err)
		qb, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
		must(t, err)
		start := time.Now()
		connect(t, qa, qb, addr, addr)
		if d := time.Since(start); d > time.Second {
			t.Fatalf("connecting to itself took %v: it waited for neighbour resolution", d)
		}
		fill(buf[:1<<20], byte(i))
		must(t, qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(mr, 1<<20, 4096)}))
		must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(mr, 0, 3000)}))
		must(t, qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(mr, 1<<20+8192, 256<<10), RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
		wcs := pollFor(cq, 3)
		wantWC(t, byQP(wcs, qa.Num()), engine.WC{WRID: 1, Opcode: engine.WCSend}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: 256 << 10})
		wantWC(t, byQP(wcs, qb.Num()), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 3000})
		if !bytes.Equal(buf[1<<20:1<<20+3000], buf[:3000]) || !bytes.Equal(buf[1<<20+8192:1<<20+8192+256<<10], buf[:256<<10]) {
			t.Fatalf("%s: data differs", addr)
		}
	}
	link.nothingSent(t)
	if pcap.Len() != 24 {
		t.Fatalf("host pcap of %d bytes, want the 24-byte header alone", pcap.Len())
	}
}

// TestLoopbackTap: OnLoopback sees every frame the device sends to itself, a RoCEv2 frame
// whole, as the loopback hands it back: what a capture of two programs on one device holds.
func TestLoopbackTap(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	var seen, roce int
	s.dev.OnLoopback(func(f []byte) {
		seen++
		if len(f) > 38 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && binary.BigEndian.Uint16(f[36:]) == 4791 {
			roce++
		}
	})
	must(t, s.qb.PostRecv(engine.RecvWR{ID: 1, SGL: sge(s.mr, 1<<20, 8192)}))
	must(t, s.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(s.mr, 0, 5000)}))
	s.run()
	if st := s.dev.Stats(); seen == 0 || uint64(seen) != st.Loopback || roce != seen {
		t.Fatalf("the tap saw %d frames (%d RoCEv2 over IPv4), the device looped back %d", seen, roce, st.Loopback)
	}
	s.dev.OnLoopback(nil)
	must(t, s.qb.PostRecv(engine.RecvWR{ID: 3, SGL: sge(s.mr, 1<<20, 8192)}))
	must(t, s.qa.PostSend(engine.SendWR{ID: 4, Opcode: engine.WRSend, SGL: sge(s.mr, 0, 64)}))
	before := seen
	s.run()
	if seen != before {
		t.Fatalf("a removed tap saw %d more frames", seen-before)
	}
}

// A device answers on each of its addresses and on its prefixes (Linux's lo answers for all of
// 127.0.0.0/8): two QPs on it connected through any such address reach each other, each
// sending from the address it sends to (the one its peer expects the frames from), and nothing
// reaches the link.
func TestLoopbackOwnAddressesAndPrefixes(t *testing.T) {
	_, pd, cq, link := loopHost(t, realtime.HostConfig{Name: "A", MAC: [6]byte{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("127.0.0.1"),
		IPs:      []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.IPv6Loopback(), netip.MustParseAddr("fd00::2")},
		Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Rand: mrand.NewPCG(1, 1)})
	buf := make([]byte, 64<<10)
	mr, err := pd.RegMR(buf, engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessRemoteRead)
	must(t, err)
	for i, s := range []string{"127.0.0.2", "127.200.1.9", "192.0.2.2", "::1", "fd00::2", "127.0.0.1"} {
		addr := netip.MustParseAddr(s)
		caps := engine.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
		qa, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
		must(t, err)
		qb, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: caps})
		must(t, err)
		connect(t, qa, qb, addr, addr)
		fill(buf[:1024], byte(i+1))
		must(t, qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(mr, 32<<10, 4096)}))
		must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(mr, 0, 1024)}))
		wcs := pollFor(cq, 2)
		wantWC(t, byQP(wcs, qa.Num()), engine.WC{WRID: 1, Opcode: engine.WCSend})
		wantWC(t, byQP(wcs, qb.Num()), engine.WC{WRID: 9, Opcode: engine.WCRecv, ByteLen: 1024})
		if !bytes.Equal(buf[32<<10:32<<10+1024], buf[:1024]) {
			t.Fatalf("%s: data differs", addr)
		}
	}
	link.nothingSent(t)
}
