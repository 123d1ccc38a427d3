package engine_test

import (
	"bytes"
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
