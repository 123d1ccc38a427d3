package engine_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/wire"
	"github.com/softirdma/softirdma/wire/ethswitch"
	"github.com/softirdma/softirdma/wire/faultplan"
)

// Frames between two devices of one process are checked once: the simulator's fabric hands the
// receiver every frame nothing changed as sealed, and its ICRC is not computed again; a frame a
// fault or the link corrupted comes unsealed, fails the receiver's check (RxBadICRC), and the
// transport sends it again. Every unsealed frame here is a corrupted one: none got through
// unchecked, none was checked twice.
func TestSealedFramesCheckedOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		link     sim.LinkConfig
		fault    *sim.Fault
		wantBadB int // -1: some
	}{
		{name: "clean link", wantBadB: 0},
		{name: "one WRITE corrupted", fault: &sim.Fault{Name: "corrupt", Src: "A", Opcodes: []wire.Opcode{wire.RCWriteMiddle}, Nth: 3, Action: sim.FaultCorrupt}, wantBadB: 1},
		{name: "link corrupting 5%", link: sim.LinkConfig{Corrupt: 0.05}, wantBadB: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 7, tc.link, engine.ConnectOptions{MTU: engine.MTU1024})
			if tc.fault != nil {
				p.fab.AddFault(*tc.fault)
			}
			const n = 256 << 10
			fill(p.bufA[:n], 3)
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			p.run()
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Status: engine.WCSuccess, Opcode: engine.WCRDMAWrite})
			if !bytes.Equal(p.bufA[:n], p.bufB[:n]) {
				t.Fatal("the WRITE's data differs at the responder")
			}
			for _, d := range []*engine.Device{p.a, p.b} {
				s := d.Stats()
				if s.RxFrames == 0 || s.RxSealed+s.RxBadICRC != s.RxFrames {
					t.Errorf("%s: %d frames received, %d sealed, %d with a bad ICRC: every frame is one or the other", d.Name(), s.RxFrames, s.RxSealed, s.RxBadICRC)
				}
			}
			bad := p.b.Stats().RxBadICRC
			if tc.wantBadB >= 0 && bad != uint64(tc.wantBadB) || tc.wantBadB < 0 && bad == 0 {
				t.Errorf("B saw %d frames with a bad ICRC, want %d (-1: some)", bad, tc.wantBadB)
			}
		})
	}
}

// The same over serve's switch (wire/ethswitch) between two wall-clock hosts: what one device
// sends reaches the other sealed, but for the WRITE the fault plan corrupts, which the receiver
// checks, drops and gets again.
func TestSealedFramesOverTheSwitch(t *testing.T) {
	sw := ethswitch.New()
	plan := &faultplan.Live{}
	sw.SetFaults(plan)
	corrupt, err := faultplan.Parse("corrupt from=A opcode=RDMA_WRITE_MIDDLE nth=2")
	must(t, err)
	plan.Add(corrupt)
	ha, hb := hostsOn(t, sw)
	pdA, pdB, cqA, _, qa, qb := qpPair(t, ha.Device(), hb.Device(), 4)
	connect(t, qa, qb, hb.Device().IP(), ha.Device().IP())
	const n = 64 << 10
	bufA, bufB := make([]byte, n), make([]byte, n)
	fill(bufA, 9)
	mrA, _ := pdA.RegMR(bufA, engine.AccessLocalWrite)
	mrB, _ := pdB.RegMR(bufB, engine.AccessLocalWrite|engine.AccessRemoteWrite)
	must(t, qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mrA, 0, n), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
	waitCQ(cqA, time.Now().Add(20*time.Second))
	wantWC(t, poll(cqA), engine.WC{WRID: 1, Status: engine.WCSuccess, Opcode: engine.WCRDMAWrite})
	if !bytes.Equal(bufA, bufB) {
		t.Fatal("the WRITE's data differs at the responder")
	}
	s := hb.Device().Stats()
	if s.RxBadICRC != 1 || s.RxSealed+s.RxBadICRC != s.RxFrames {
		t.Errorf("B: %d frames received, %d sealed, %d with a bad ICRC; want the one corrupted frame checked and caught, every other sealed", s.RxFrames, s.RxSealed, s.RxBadICRC)
	}
}

// batchLink records how a device hands it frames: a SealedBatchLink that lends its own buffers.
type batchLink struct {
	calls []string // "batch N" per SendSealedBatch, "sealed", "buffer", "send" per frame
	psns  []uint32 // the BTH PSNs of the sealed frames, in the order they came
}

func (l *batchLink) Send([]byte) error { l.calls = append(l.calls, "send"); return nil }
func (l *batchLink) Buffer() []byte    { return engine.NewFrameBuffer(engine.MaxFrame) }
func (l *batchLink) SendBuffer(b []byte) {
	if b != nil {
		l.calls = append(l.calls, "buffer")
	}
}
func (l *batchLink) SendSealed([]byte) { l.calls = append(l.calls, "sealed") }
func (l *batchLink) SendSealedBatch(frames [][]byte) {
	l.calls = append(l.calls, fmt.Sprintf("batch %d", len(frames)))
	for _, f := range frames {
		var fr wire.Frame
		var p wire.Parser
		if err := p.Parse(&fr, f); err != nil {
			panic(err)
		}
		l.psns = append(l.psns, fr.BTH.PSN())
	}
}

// udOnLink is a device on a simulator's clock attached to link, with a UD QP and an address
// handle for 192.0.2.2, whose MAC is peerMAC.
func udOnLink(t *testing.T, link engine.Link) (*sim.Sim, *engine.Device, *dgNode, *engine.AH) {
	t.Helper()
	s := sim.NewSim()
	dev := engine.NewDevice(engine.DeviceConfig{Name: "A", Clock: s, MAC: [6]byte{2, 0, 0, 0, 0, 1},
		IP: netip.MustParseAddr("192.0.2.1"), Resolve: func(netip.Addr) ([6]byte, bool) { return peerMAC, true }})
	dev.Attach(link)
	nd := newDgNode(t, dev, engine.QPTypeUD, testQKey)
	return s, dev, nd, nd.ah(t, netip.MustParseAddr("192.0.2.2"))
}

// peerMAC is the MAC udOnLink's device resolves every address to.
var peerMAC = [6]byte{2, 0, 0, 0, 0, 2}

// A link that takes sealed frames in batches (engine.SealedBatchLink) gets the sealed frames of
// one flush in one call, in order, split only where a frame of another kind (a netdev's) stands
// between them, which goes out between the two batches.
func TestSealedFramesGoInBatches(t *testing.T) {
	link := &batchLink{}
	s, dev, nd, ah := udOnLink(t, link)
	for i := range 3 {
		nd.send(t, uint64(i), engine.WRSend, ah, 0x12, testQKey, 0, 16)
	}
	nd.qp.SendPosted() // the three frames queued before the netdev's
	dev.SendFrame(append(peerMAC[:], 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 0, 0))
	for i := range 2 {
		nd.send(t, uint64(3+i), engine.WRSend, ah, 0x12, testQKey, 0, 16)
	}
	s.RunUntilIdle(1000)
	if want := []string{"batch 3", "send", "batch 2"}; !slices.Equal(link.calls, want) {
		t.Fatalf("the link's calls: %q, want %q", link.calls, want)
	}
	if want := []uint32{100, 101, 102, 103, 104}; !slices.Equal(link.psns, want) {
		t.Fatalf("PSNs %v, want %v", link.psns, want)
	}
}

// unsealedLink is a batchLink that seals the engine's frames itself (engine.UnsealedLink): it
// keeps a copy of each frame SendUnsealed hands it.
type unsealedLink struct {
	batchLink
	unsealed [][]byte
}

func (l *unsealedLink) SendUnsealed(b []byte) {
	l.calls = append(l.calls, "unsealed")
	l.unsealed = append(l.unsealed, append([]byte(nil), b...))
}

// A link that seals the engine's frames itself gets a QP's frames with their ICRC left to it, in
// order among the rest, and sealing them (wire.SealFrame) gives frames that pass a receiver's
// check. A frame built for such a link that goes another way, because the device was attached
// to another link before the frame left, is sealed by the engine: the other link's check
// (batchLink parses each frame it takes, ICRC included) passes.
func TestUnsealedFramesLeftToTheLink(t *testing.T) {
	link := &unsealedLink{}
	s, dev, nd, ah := udOnLink(t, link)
	for i := range 2 {
		nd.send(t, uint64(i), engine.WRSend, ah, 0x12, testQKey, 0, 16)
	}
	nd.qp.SendPosted()
	dev.SendFrame(append(peerMAC[:], 2, 0, 0, 0, 0, 1, 0x88, 0xb5, 0, 0))
	nd.send(t, 2, engine.WRSend, ah, 0x12, testQKey, 0, 16)
	s.RunUntilIdle(1000)
	if want := []string{"unsealed", "unsealed", "send", "unsealed"}; !slices.Equal(link.calls, want) {
		t.Fatalf("the link's calls: %q, want %q", link.calls, want)
	}
	for i, b := range link.unsealed {
		must(t, wire.SealFrame(b))
		var f wire.Frame
		var p wire.Parser
		if err := p.Parse(&f, b); err != nil || f.BTH.PSN() != uint32(100+i) {
			t.Fatalf("unsealed frame %d, sealed by the link: %v, PSN %d", i, err, f.BTH.PSN())
		}
	}

	// Built for the unsealing link, sent on one that takes only sealed frames.
	for i := range 3 {
		nd.send(t, uint64(3+i), engine.WRSend, ah, 0x12, testQKey, 0, 16)
	}
	nd.qp.SendPosted()
	sealedOnly := &batchLink{}
	dev.Attach(sealedOnly)
	s.RunUntilIdle(1000)
	if want := []string{"batch 3"}; !slices.Equal(sealedOnly.calls, want) {
		t.Fatalf("the second link's calls: %q, want %q", sealedOnly.calls, want)
	}
	if want := []uint32{103, 104, 105}; !slices.Equal(sealedOnly.psns, want) {
		t.Fatalf("PSNs %v, want %v", sealedOnly.psns, want)
	}
}
