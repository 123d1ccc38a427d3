package engine_test

import (
	"errors"
	"slices"
	"syscall"
	"testing"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/keys"
	"pgregory.net/rapid"
)

// lookupDev is a device on a simulated fabric with a PD.
func lookupDev(t testing.TB, seed uint64) (*sim.Sim, *engine.Device, *engine.PD) {
	t.Helper()
	sm := sim.NewSim()
	fab := sim.NewFabric(sm, seed)
	dev := fab.AddDevice("A", sim.LinkConfig{})
	pd, err := dev.AllocPD()
	must(t, err)
	return sm, dev, pd
}

// outOfRange are numbers no object of any kind has: zero, beyond 24 bits, all ones.
var outOfRange = []uint32{0, 1 << 24, 1<<24 + 0x11, 0x7fff_ffff, 0xffff_ff00, 0xffff_ffff}

var lookupCaps = engine.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}

// lookupFunc is one of the device's lookups by number or key: dev.QP, dev.CQ, dev.MR ...
type lookupFunc[T any] func(uint32) (*T, bool)

// wantFound fails unless lookup finds want under n; what names the lookup in the message.
func wantFound[T any](t testing.TB, what string, lookup lookupFunc[T], n uint32, want *T) {
	t.Helper()
	if got, ok := lookup(n); !ok || got != want {
		t.Fatalf("%s(%#x) = %p, %v; want %p", what, n, got, ok, want)
	}
}

// wantNotFound fails if lookup finds anything under any of ns; what says which lookup and why
// nothing is to be found.
func wantNotFound[T any](t testing.TB, what string, lookup lookupFunc[T], ns ...uint32) {
	t.Helper()
	for _, n := range ns {
		if got, ok := lookup(n); ok {
			t.Fatalf("%s: lookup of %#x found %p", what, n, got)
		}
	}
}

func TestLookupQP(t *testing.T) {
	_, dev, pd := lookupDev(t, 1)
	cq, err := dev.CreateCQ(8)
	must(t, err)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: lookupCaps})
	must(t, err)
	wantFound(t, "QP", dev.QP, qp.Num(), qp)
	wantNotFound(t, "QP", dev.QP, append(outOfRange, qp.Num()+1, 1)...)
	must(t, qp.Destroy())
	wantNotFound(t, "destroyed QP", dev.QP, qp.Num())
}

func TestLookupCQ(t *testing.T) {
	_, dev, pd := lookupDev(t, 1)
	cq1, err := dev.CreateCQ(8)
	must(t, err)
	cq2, err := dev.CreateCQ(8)
	must(t, err)
	if cq1.Num() != 1 || cq2.Num() != 2 {
		t.Fatalf("CQ numbers %d, %d; want 1, 2", cq1.Num(), cq2.Num())
	}
	for _, cq := range []*engine.CQ{cq1, cq2} {
		wantFound(t, "CQ", dev.CQ, cq.Num(), cq)
	}
	wantNotFound(t, "CQ", dev.CQ, append(outOfRange, 3)...)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq1, RecvCQ: cq2, Cap: lookupCaps})
	must(t, err)
	for _, cq := range []*engine.CQ{cq1, cq2} {
		if err := cq.Destroy(); !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("destroying CQ %d used by a QP: %v, want EBUSY", cq.Num(), err)
		}
		wantFound(t, "CQ after a refused destroy", dev.CQ, cq.Num(), cq)
	}
	must(t, qp.Destroy())
	must(t, cq1.Destroy())
	wantNotFound(t, "destroyed CQ", dev.CQ, cq1.Num())
	if err := cq1.Destroy(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("destroying a CQ twice: %v, want EINVAL", err)
	}
	if _, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq1, RecvCQ: cq2, Cap: lookupCaps}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a QP on a destroyed CQ: %v, want EINVAL", err)
	}
	// The freed number is not given again before the rest of the range.
	cq3, err := dev.CreateCQ(8)
	must(t, err)
	if cq3.Num() != 3 {
		t.Fatalf("third CQ numbered %d, want 3", cq3.Num())
	}
	// A CQ of another device is refused too.
	_, other, _ := lookupDev(t, 2)
	ocq, err := other.CreateCQ(8)
	must(t, err)
	if _, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: ocq, RecvCQ: ocq, Cap: lookupCaps}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a QP on another device's CQ: %v, want EINVAL", err)
	}
}

// CQ numbers wrap at 24 bits to 1, skipping the live ones.
func TestLookupCQNumberWrap(t *testing.T) {
	_, dev, _ := lookupDev(t, 1)
	first, err := dev.CreateCQ(1)
	must(t, err)
	dev.SetNextCQNum(engine.MaxNumber)
	last, err := dev.CreateCQ(1)
	must(t, err)
	wrapped, err := dev.CreateCQ(1)
	must(t, err)
	if first.Num() != 1 || last.Num() != engine.MaxNumber || wrapped.Num() != 2 {
		t.Fatalf("numbers %#x %#x %#x; want 1, %#x, 2", first.Num(), last.Num(), wrapped.Num(), engine.MaxNumber)
	}
	for _, cq := range []*engine.CQ{first, last, wrapped} {
		wantFound(t, "CQ", dev.CQ, cq.Num(), cq)
	}
}

func TestLookupSRQ(t *testing.T) {
	_, dev, pd := lookupDev(t, 1)
	cq, err := dev.CreateCQ(8)
	must(t, err)
	srq, err := pd.CreateSRQ(4, 1)
	must(t, err)
	if srq.Num() != 1 {
		t.Fatalf("first SRQ numbered %d, want 1", srq.Num())
	}
	wantFound(t, "SRQ", dev.SRQ, srq.Num(), srq)
	wantNotFound(t, "SRQ", dev.SRQ, append(outOfRange, 2)...)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: engine.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	must(t, err)
	if err := srq.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroying an SRQ a QP uses: %v, want EBUSY", err)
	}
	must(t, qp.Destroy())
	must(t, srq.Destroy())
	wantNotFound(t, "destroyed SRQ", dev.SRQ, srq.Num())
	if err := srq.Destroy(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("destroying an SRQ twice: %v, want EINVAL", err)
	}
	if _, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: engine.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a QP on a destroyed SRQ: %v, want EINVAL", err)
	}
}

// otherKey8 is stag with a different key8.
func otherKey8(stag uint32) uint32 { return uint32(keys.Key(stag).Inc()) }

func TestLookupMR(t *testing.T) {
	_, dev, pd := lookupDev(t, 1)
	mr, err := pd.RegMR(make([]byte, 4096), engine.AccessLocalWrite)
	must(t, err)
	wantFound(t, "MR", dev.MR, mr.LKey(), mr)
	wantNotFound(t, "MR", dev.MR, append(outOfRange, otherKey8(mr.LKey()), mr.LKey()+0x100)...)
	wantNotFound(t, "MW by an MR's key", dev.MW, mr.LKey())
	must(t, mr.Dereg())
	wantNotFound(t, "deregistered MR", dev.MR, mr.LKey())
	// The index comes back with a new key8: the old key does not find the new MR.
	var again *engine.MR
	for range 64 {
		m, err := pd.RegMR(make([]byte, 64), engine.AccessLocalWrite)
		must(t, err)
		if keys.Key(m.LKey()).Index() == keys.Key(mr.LKey()).Index() {
			again = m
			break
		}
	}
	if again != nil {
		if got, ok := dev.MR(mr.LKey()); ok && again.LKey() != mr.LKey() {
			t.Fatalf("old key %#x found the MR now at its index (%#x): %p", mr.LKey(), again.LKey(), got)
		}
		wantFound(t, "MR", dev.MR, again.LKey(), again)
	}
}

// A fast-register MR is found by the key REG_MR gave it, not by the key it had before.
func TestLookupFastRegMR(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	mr, err := s.pd.AllocFastRegMR(8192)
	must(t, err)
	old := mr.LKey()
	wantFound(t, "MR", s.dev.MR, old, mr)
	newKey := otherKey8(old)
	must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRegMR, Flags: engine.SendSignaled,
		Reg: engine.RegInfo{MR: mr, Key: newKey, Buf: make([]byte, 4096), IOVA: 0x9000, Access: engine.AccessLocalWrite}}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 1, Opcode: engine.WCRegMR})
	wantFound(t, "MR after REG_MR", s.dev.MR, newKey, mr)
	wantNotFound(t, "MR by the key before REG_MR", s.dev.MR, old)
}

func TestLookupMW(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	mw, err := s.pd.AllocMW(engine.MWType2)
	must(t, err)
	old := mw.RKey()
	wantFound(t, "MW", s.dev.MW, old, mw)
	wantNotFound(t, "MR by a window's key", s.dev.MR, old)
	wantNotFound(t, "MW", s.dev.MW, append(outOfRange, otherKey8(old), old+0x100)...)
	newKey := otherKey8(old)
	must(t, s.qa.PostSend(engine.SendWR{ID: 7, Opcode: engine.WRBindMW, Flags: engine.SendSignaled, Bind: engine.BindInfo{MW: mw, RKey: newKey, MR: s.mr,
		Addr: s.mr.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 7, Opcode: engine.WCBindMW})
	wantFound(t, "MW after bind", s.dev.MW, newKey, mw)
	wantNotFound(t, "MW by the key before the bind", s.dev.MW, old)
	must(t, mw.Dealloc())
	wantNotFound(t, "deallocated MW", s.dev.MW, newKey)
}

// sortedKeys are m's keys but skip, in order, so that rapid's draws from them repeat.
func sortedKeys[V any](m map[uint32]V, skip uint32) []uint32 {
	out := make([]uint32, 0, len(m))
	for k := range m {
		if k != skip {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// liveSet is the property test's model of the live objects of one kind, by number or key.
type liveSet[T any] struct {
	kind   string
	lookup lookupFunc[T]
	live   map[uint32]*T
}

func newLiveSet[T any](kind string, lookup lookupFunc[T]) *liveSet[T] {
	return &liveSet[T]{kind: kind, lookup: lookup, live: map[uint32]*T{}}
}

// add notes obj as live under n, which must not be taken already.
func (s *liveSet[T]) add(rt *rapid.T, n uint32, obj *T) {
	if s.live[n] != nil {
		rt.Fatalf("%s number %d given twice", s.kind, n)
	}
	s.live[n] = obj
}

// destroyOne destroys a live object drawn by rapid, any but skip, and returns its number; it
// does nothing, and says so, when there is none.
func (s *liveSet[T]) destroyOne(rt *rapid.T, skip uint32, destroy func(*T) error) (uint32, bool) {
	ks := sortedKeys(s.live, skip)
	if len(ks) == 0 {
		return 0, false
	}
	n := rapid.SampledFrom(ks).Draw(rt, s.kind)
	if err := destroy(s.live[n]); err != nil {
		rt.Fatalf("%v", err)
	}
	delete(s.live, n)
	return n, true
}

// agree fails unless the device's lookup of n finds what the model holds there.
func (s *liveSet[T]) agree(rt *rapid.T, n uint32) {
	if got, found := s.lookup(n); found != (s.live[n] != nil) || got != s.live[n] {
		rt.Fatalf("%s(%#x) = %p, %v; model %p", s.kind, n, got, found, s.live[n])
	}
}

// Creating and destroying objects at random, every lookup agrees with a model of what is live,
// for the numbers of live objects, of destroyed ones, the live keys with another key8, numbers
// out of range and arbitrary ones.
func TestLookupProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ok := func(err error) {
			if err != nil {
				rt.Fatalf("%v", err)
			}
		}
		_, dev, pd := lookupDev(t, rapid.Uint64().Draw(rt, "seed"))
		qps := newLiveSet("QP", dev.QP)
		cqs := newLiveSet("CQ", dev.CQ)
		srqs := newLiveSet("SRQ", dev.SRQ)
		mrs := newLiveSet("MR", dev.MR)
		mws := newLiveSet("MW", dev.MW)
		var gone []uint32 // numbers and keys of destroyed objects
		noteGone := func(n uint32, destroyed bool) {
			if destroyed {
				gone = append(gone, n)
			}
		}
		// keep is every QP's CQ, so the CQs the test destroys are free to go.
		keep, err := dev.CreateCQ(4)
		ok(err)
		cqs.add(rt, keep.Num(), keep)

		check := func() {
			probe := map[uint32]bool{rapid.Uint32().Draw(rt, "probe"): true}
			for _, n := range append(gone, outOfRange...) {
				probe[n] = true
			}
			for _, ks := range [][]uint32{sortedKeys(qps.live, 0), sortedKeys(cqs.live, 0), sortedKeys(srqs.live, 0)} {
				for _, n := range ks {
					probe[n] = true
				}
			}
			for _, ks := range [][]uint32{sortedKeys(mrs.live, 0), sortedKeys(mws.live, 0)} {
				for _, k := range ks {
					probe[k], probe[otherKey8(k)] = true, true
				}
			}
			for _, n := range sortedKeys(probe, 0) {
				qps.agree(rt, n)
				cqs.agree(rt, n)
				srqs.agree(rt, n)
				mrs.agree(rt, n)
				mws.agree(rt, n)
			}
		}

		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: keep, RecvCQ: keep, Cap: lookupCaps})
				ok(err)
				qps.add(rt, qp.Num(), qp)
			case 1:
				noteGone(qps.destroyOne(rt, 0, (*engine.QP).Destroy))
			case 2:
				cq, err := dev.CreateCQ(1)
				ok(err)
				cqs.add(rt, cq.Num(), cq)
			case 3:
				noteGone(cqs.destroyOne(rt, keep.Num(), (*engine.CQ).Destroy))
			case 4:
				srq, err := pd.CreateSRQ(1, 1)
				ok(err)
				srqs.add(rt, srq.Num(), srq)
			case 5:
				noteGone(srqs.destroyOne(rt, 0, (*engine.SRQ).Destroy))
			case 6:
				var mr *engine.MR
				var err error
				if rapid.Bool().Draw(rt, "fastreg") {
					mr, err = pd.AllocFastRegMR(4096)
				} else {
					mr, err = pd.RegMR(make([]byte, 16), engine.AccessLocalWrite)
				}
				ok(err)
				mrs.add(rt, mr.LKey(), mr)
			case 7:
				noteGone(mrs.destroyOne(rt, 0, (*engine.MR).Dereg))
			case 8:
				mw, err := pd.AllocMW(rapid.SampledFrom([]engine.MWType{engine.MWType1, engine.MWType2, engine.MWType2A}).Draw(rt, "mwtype"))
				ok(err)
				mws.add(rt, mw.RKey(), mw)
			case 9:
				noteGone(mws.destroyOne(rt, 0, (*engine.MW).Dealloc))
			}
			check()
		}
	})
}

// A message's packets reuse the key lookup of its first while the key space stands, and not a
// packet longer: an MR deregistered in the middle of a 1 MiB WRITE (1,024 packets at MTU 1024)
// stops it there. On the requester's side the next packet's gather fails (LOC_PROT_ERR); on the
// responder's the next packet is refused (REM_ACCESS_ERR at the requester). Either way the
// WRITE's end never lands.
func TestKeptLookupsEndWithTheKeySpace(t *testing.T) {
	for _, tc := range []struct {
		side string
		want engine.WCStatus
	}{
		{"requester", engine.WCLocProtErr},
		{"responder", engine.WCRemAccessErr},
	} {
		t.Run(tc.side, func(t *testing.T) {
			p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
			const n = 1 << 20
			fill(p.bufA[:n], 5)
			must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
			for p.b.Stats().RxFrames < 100 {
				if !p.sim.Step() {
					t.Fatal("the WRITE stopped before 100 packets")
				}
			}
			mr := p.mrA
			if tc.side == "responder" {
				mr = p.mrB
			}
			must(t, mr.Dereg())
			p.run()
			wcs := poll(p.cqA)
			if len(wcs) != 1 || wcs[0].WRID != 1 || wcs[0].Status != tc.want {
				t.Fatalf("completions %+v, want WRID 1 with %v", wcs, tc.want)
			}
			if got := p.b.Stats().RxFrames; got >= n/1024 {
				t.Errorf("B received %d frames: the whole WRITE went on after the deregistration", got)
			}
			if !slices.Equal(p.bufB[n-1024:n], make([]byte, 1024)) {
				t.Error("the WRITE's last packet landed after its MR was deregistered")
			}
		})
	}
}

// A key's reach kept from one message serves the next only while the key space stands: after
// the first WRITE or READ passes, the MR behind a key is deregistered, and the same request
// again fails as if nothing had been kept (LOC_PROT_ERR for the lkey; REM_ACCESS_ERR for the
// rkey, through the single-packet WRITE's lookup, a READ's and a two-packet WRITE's) and moves
// no byte.
func TestKeptReachEndsWithTheKeySpace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     engine.WROpcode
		wc     engine.WCOpcode
		n      int
		remote bool
		want   engine.WCStatus
	}{
		{"lkey of a WRITE", engine.WRRDMAWrite, engine.WCRDMAWrite, 8, false, engine.WCLocProtErr},
		{"rkey of a WRITE", engine.WRRDMAWrite, engine.WCRDMAWrite, 8, true, engine.WCRemAccessErr},
		{"rkey of a two-packet WRITE", engine.WRRDMAWrite, engine.WCRDMAWrite, 1500, true, engine.WCRemAccessErr},
		{"rkey of a READ", engine.WRRDMARead, engine.WCRDMARead, 8, true, engine.WCRemAccessErr},
		{"lkey of a READ", engine.WRRDMARead, engine.WCRDMARead, 8, false, engine.WCLocProtErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, sim.LinkConfig{}, engine.ConnectOptions{MTU: engine.MTU1024})
			post := func(id uint64, off int) {
				must(t, p.qa.PostSend(engine.SendWR{ID: id, Opcode: tc.op, Flags: engine.SendSignaled, SGL: sge(p.mrA, uint64(off), uint32(tc.n)),
					RemoteAddr: p.mrB.Addr() + uint64(off), RKey: p.mrB.RKey()}))
				p.run()
			}
			post(1, 0)
			wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: tc.wc})
			fill(p.bufA, 7)
			fill(p.bufB, 9)
			mr := p.mrA
			if tc.remote {
				mr = p.mrB
			}
			must(t, mr.Dereg())
			post(2, 4096)
			wcs := poll(p.cqA)
			if len(wcs) != 1 || wcs[0].WRID != 2 || wcs[0].Status != tc.want {
				t.Fatalf("completions %+v, want WRID 2 with %v", wcs, tc.want)
			}
			a, b := p.bufA[4096:4096+tc.n], p.bufB[4096:4096+tc.n]
			if slices.Equal(a, b) {
				t.Error("the request after the deregistration moved its bytes")
			}
		})
	}
}
