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

func TestLookupQP(t *testing.T) {
	_, dev, pd := lookupDev(t, 1)
	cq, err := dev.CreateCQ(8)
	must(t, err)
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: lookupCaps})
	must(t, err)
	if got, ok := dev.QP(qp.Num()); !ok || got != qp {
		t.Fatalf("QP(0x%x) = %p, %v; want %p", qp.Num(), got, ok, qp)
	}
	for _, n := range append(outOfRange, qp.Num()+1, 1) {
		if got, ok := dev.QP(n); ok {
			t.Fatalf("QP(0x%x) found %p", n, got)
		}
	}
	must(t, qp.Destroy())
	if got, ok := dev.QP(qp.Num()); ok {
		t.Fatalf("destroyed QP 0x%x found: %p", qp.Num(), got)
	}
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
		if got, ok := dev.CQ(cq.Num()); !ok || got != cq {
			t.Fatalf("CQ(%d) = %p, %v; want %p", cq.Num(), got, ok, cq)
		}
	}
	for _, n := range append(outOfRange, 3) {
		if got, ok := dev.CQ(n); ok {
			t.Fatalf("CQ(0x%x) found %p", n, got)
		}
	}
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq1, RecvCQ: cq2, Cap: lookupCaps})
	must(t, err)
	for _, cq := range []*engine.CQ{cq1, cq2} {
		if err := cq.Destroy(); !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("destroying CQ %d used by a QP: %v, want EBUSY", cq.Num(), err)
		}
		if _, ok := dev.CQ(cq.Num()); !ok {
			t.Fatalf("CQ %d not found after a refused destroy", cq.Num())
		}
	}
	must(t, qp.Destroy())
	must(t, cq1.Destroy())
	if got, ok := dev.CQ(cq1.Num()); ok {
		t.Fatalf("destroyed CQ %d found: %p", cq1.Num(), got)
	}
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
		if got, ok := dev.CQ(cq.Num()); !ok || got != cq {
			t.Fatalf("CQ(%#x) = %p, %v; want %p", cq.Num(), got, ok, cq)
		}
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
	if got, ok := dev.SRQ(srq.Num()); !ok || got != srq {
		t.Fatalf("SRQ(%d) = %p, %v; want %p", srq.Num(), got, ok, srq)
	}
	for _, n := range append(outOfRange, 2) {
		if got, ok := dev.SRQ(n); ok {
			t.Fatalf("SRQ(0x%x) found %p", n, got)
		}
	}
	qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: engine.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	must(t, err)
	if err := srq.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("destroying an SRQ a QP uses: %v, want EBUSY", err)
	}
	must(t, qp.Destroy())
	must(t, srq.Destroy())
	if got, ok := dev.SRQ(srq.Num()); ok {
		t.Fatalf("destroyed SRQ %d found: %p", srq.Num(), got)
	}
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
	if got, ok := dev.MR(mr.LKey()); !ok || got != mr {
		t.Fatalf("MR(%#x) = %p, %v; want %p", mr.LKey(), got, ok, mr)
	}
	for _, n := range append(outOfRange, otherKey8(mr.LKey()), mr.LKey()+0x100) {
		if got, ok := dev.MR(n); ok {
			t.Fatalf("MR(%#x) found %p", n, got)
		}
	}
	if got, ok := dev.MW(mr.LKey()); ok {
		t.Fatalf("MW(%#x), an MR's key, found %p", mr.LKey(), got)
	}
	must(t, mr.Dereg())
	if got, ok := dev.MR(mr.LKey()); ok {
		t.Fatalf("deregistered MR %#x found: %p", mr.LKey(), got)
	}
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
		if got, ok := dev.MR(again.LKey()); !ok || got != again {
			t.Fatalf("MR(%#x) = %p, %v; want %p", again.LKey(), got, ok, again)
		}
	}
}

// A fast-register MR is found by the key REG_MR gave it, not by the key it had before.
func TestLookupFastRegMR(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	mr, err := s.pd.AllocFastRegMR(8192)
	must(t, err)
	old := mr.LKey()
	if got, ok := s.dev.MR(old); !ok || got != mr {
		t.Fatalf("MR(%#x) = %p, %v; want %p", old, got, ok, mr)
	}
	newKey := otherKey8(old)
	must(t, s.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRegMR, Flags: engine.SendSignaled,
		Reg: engine.RegInfo{MR: mr, Key: newKey, Buf: make([]byte, 4096), IOVA: 0x9000, Access: engine.AccessLocalWrite}}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 1, Opcode: engine.WCRegMR})
	if got, ok := s.dev.MR(newKey); !ok || got != mr {
		t.Fatalf("MR(%#x) after REG_MR = %p, %v; want %p", newKey, got, ok, mr)
	}
	if got, ok := s.dev.MR(old); ok {
		t.Fatalf("MR(%#x), the key before REG_MR, found %p", old, got)
	}
}

func TestLookupMW(t *testing.T) {
	s := newSolo(t, 1, sim.LinkConfig{}, engine.ConnectOptions{})
	mw, err := s.pd.AllocMW(engine.MWType2)
	must(t, err)
	old := mw.RKey()
	if got, ok := s.dev.MW(old); !ok || got != mw {
		t.Fatalf("MW(%#x) = %p, %v; want %p", old, got, ok, mw)
	}
	if got, ok := s.dev.MR(old); ok {
		t.Fatalf("MR(%#x), a window's key, found %p", old, got)
	}
	for _, n := range append(outOfRange, otherKey8(old), old+0x100) {
		if got, ok := s.dev.MW(n); ok {
			t.Fatalf("MW(%#x) found %p", n, got)
		}
	}
	newKey := otherKey8(old)
	must(t, s.qa.PostSend(engine.SendWR{ID: 7, Opcode: engine.WRBindMW, Flags: engine.SendSignaled, Bind: engine.BindInfo{MW: mw, RKey: newKey, MR: s.mr,
		Addr: s.mr.Addr(), Length: 4096, Access: engine.AccessRemoteWrite}}))
	s.run()
	wantWC(t, poll(s.cq), engine.WC{WRID: 7, Opcode: engine.WCBindMW})
	if got, ok := s.dev.MW(newKey); !ok || got != mw {
		t.Fatalf("MW(%#x) after bind = %p, %v; want %p", newKey, got, ok, mw)
	}
	if got, ok := s.dev.MW(old); ok {
		t.Fatalf("MW(%#x), the key before the bind, found %p", old, got)
	}
	must(t, mw.Dealloc())
	if got, ok := s.dev.MW(newKey); ok {
		t.Fatalf("deallocated MW %#x found: %p", newKey, got)
	}
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
		qps := map[uint32]*engine.QP{}
		cqs := map[uint32]*engine.CQ{}
		srqs := map[uint32]*engine.SRQ{}
		mrs := map[uint32]*engine.MR{}
		mws := map[uint32]*engine.MW{}
		var gone []uint32 // numbers and keys of destroyed objects
		// keep is every QP's CQ, so the CQs the test destroys are free to go.
		keep, err := dev.CreateCQ(4)
		ok(err)
		cqs[keep.Num()] = keep

		choose := func(ks []uint32, label string) (uint32, bool) {
			if len(ks) == 0 {
				return 0, false
			}
			return rapid.SampledFrom(ks).Draw(rt, label), true
		}
		check := func() {
			probe := map[uint32]bool{rapid.Uint32().Draw(rt, "probe"): true}
			for _, n := range append(gone, outOfRange...) {
				probe[n] = true
			}
			for _, ks := range [][]uint32{sortedKeys(qps, 0), sortedKeys(cqs, 0), sortedKeys(srqs, 0)} {
				for _, n := range ks {
					probe[n] = true
				}
			}
			for _, ks := range [][]uint32{sortedKeys(mrs, 0), sortedKeys(mws, 0)} {
				for _, k := range ks {
					probe[k], probe[otherKey8(k)] = true, true
				}
			}
			for _, n := range sortedKeys(probe, 0) {
				if got, found := dev.QP(n); found != (qps[n] != nil) || got != qps[n] {
					rt.Fatalf("QP(%#x) = %p, %v; model %p", n, got, found, qps[n])
				}
				if got, found := dev.CQ(n); found != (cqs[n] != nil) || got != cqs[n] {
					rt.Fatalf("CQ(%#x) = %p, %v; model %p", n, got, found, cqs[n])
				}
				if got, found := dev.SRQ(n); found != (srqs[n] != nil) || got != srqs[n] {
					rt.Fatalf("SRQ(%#x) = %p, %v; model %p", n, got, found, srqs[n])
				}
				if got, found := dev.MR(n); found != (mrs[n] != nil) || got != mrs[n] {
					rt.Fatalf("MR(%#x) = %p, %v; model %p", n, got, found, mrs[n])
				}
				if got, found := dev.MW(n); found != (mws[n] != nil) || got != mws[n] {
					rt.Fatalf("MW(%#x) = %p, %v; model %p", n, got, found, mws[n])
				}
			}
		}

		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				qp, err := pd.CreateQP(engine.QPInitAttr{Type: engine.QPTypeRC, SendCQ: keep, RecvCQ: keep, Cap: lookupCaps})
				ok(err)
				qps[qp.Num()] = qp
			case 1:
				if n, has := choose(sortedKeys(qps, 0), "qp"); has {
					ok(qps[n].Destroy())
					delete(qps, n)
					gone = append(gone, n)
				}
			case 2:
				cq, err := dev.CreateCQ(1)
				ok(err)
				if cqs[cq.Num()] != nil {
					rt.Fatalf("CQ number %d given twice", cq.Num())
				}
				cqs[cq.Num()] = cq
			case 3:
				if n, has := choose(sortedKeys(cqs, keep.Num()), "cq"); has {
					ok(cqs[n].Destroy())
					delete(cqs, n)
					gone = append(gone, n)
				}
			case 4:
				srq, err := pd.CreateSRQ(1, 1)
				ok(err)
				if srqs[srq.Num()] != nil {
					rt.Fatalf("SRQ number %d given twice", srq.Num())
				}
				srqs[srq.Num()] = srq
			case 5:
				if n, has := choose(sortedKeys(srqs, 0), "srq"); has {
					ok(srqs[n].Destroy())
					delete(srqs, n)
					gone = append(gone, n)
				}
			case 6:
				var mr *engine.MR
				var err error
				if rapid.Bool().Draw(rt, "fastreg") {
					mr, err = pd.AllocFastRegMR(4096)
				} else {
					mr, err = pd.RegMR(make([]byte, 16), engine.AccessLocalWrite)
				}
				ok(err)
				mrs[mr.LKey()] = mr
			case 7:
				if k, has := choose(sortedKeys(mrs, 0), "mr"); has {
					ok(mrs[k].Dereg())
					delete(mrs, k)
					gone = append(gone, k)
				}
			case 8:
				mw, err := pd.AllocMW(rapid.SampledFrom([]engine.MWType{engine.MWType1, engine.MWType2, engine.MWType2A}).Draw(rt, "mwtype"))
				ok(err)
				mws[mw.RKey()] = mw
			case 9:
				if k, has := choose(sortedKeys(mws, 0), "mw"); has {
					ok(mws[k].Dealloc())
					delete(mws, k)
					gone = append(gone, k)
				}
			}
			check()
		}
	})
}
