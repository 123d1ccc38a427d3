package keys

import (
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// sameBytes says whether two spans hold the same bytes of the same memory.
func sameBytes(x, y Span) bool {
	a, b := x.Segments(nil), y.Segments(nil)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) || unsafe.SliceData(a[i]) != unsafe.SliceData(b[i]) {
			return false
		}
	}
	return true
}

// Reach gives the registered range of a plain MR and the range of a bound window, zero-based
// or not, at the bytes a lookup gives; nothing for memory whose pages decide, for an MR a
// fast-register has not given memory, for an unbound window and for a stale key.
func TestReach(t *testing.T) {
	s := newSpace(t)
	mr, buf := reg(t, s, pdA, 0x3000, 0x10000, LocalWrite|RemoteWrite|MWBind)
	w1 := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType1), QP: qp1, PD: pdA, MR: mr, Addr: 0x10800, Len: 0x1000, Access: RemoteWrite})
	w0 := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2B), QP: qp1, PD: pdA, MR: mr, Addr: 0x11000, Len: 0x800, Access: RemoteWrite | ZeroBased})
	unbound := allocMW(t, s, pdA, MWType1)
	odp, err := s.RegMR(MRSpec{PD: pdA, Mem: OnDemandPaged(pages{0x1000: make([]byte, 4096)}, 4096), IOVA: 0x1000, Access: OnDemand | LocalWrite})
	if err != nil {
		t.Fatal(err)
	}
	implicit, err := s.RegMR(MRSpec{PD: pdA, Mem: Implicit(pages{0x1000: make([]byte, 4096)}), Access: OnDemand | LocalWrite})
	if err != nil {
		t.Fatal(err)
	}
	free, err := s.AllocFastRegMR(pdA, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		k      Key
		lo     uint64
		off, n int // the reach's bytes in buf
		ok     bool
	}{
		{"MR", mr, 0x10000, 0, 0x3000, true},
		{"window", w1, 0x10800, 0x800, 0x1000, true},
		{"zero-based window", w0, 0, 0x1000, 0x800, true},
		{"unbound window", unbound, 0, 0, 0, false},
		{"stale key", mr.Inc(), 0, 0, 0, false},
		{"on-demand MR", odp, 0, 0, 0, false},
		{"implicit MR", implicit, 0, 0, 0, false},
		{"fast-register MR without memory", free, 0, 0, 0, false},
	} {
		lo, sp, ok := s.Reach(tc.k)
		if ok != tc.ok {
			t.Fatalf("%s: Reach ok %v, want %v", tc.name, ok, tc.ok)
		}
		if !ok {
			continue
		}
		segs := sp.Segments(nil)
		if lo != tc.lo || len(segs) != 1 || len(segs[0]) != tc.n || unsafe.SliceData(segs[0]) != &buf[tc.off] {
			t.Fatalf("%s: Reach gives [0x%x, +0x%x) at buf offset %d, want [0x%x, +0x%x) at %d", tc.name, lo, sp.Len(),
				uintptr(unsafe.Pointer(unsafe.SliceData(segs[0])))-uintptr(unsafe.Pointer(&buf[0])), tc.lo, tc.n, tc.off)
		}
	}
}

// checkReach checks Reach against a lookup a that passed with span sp: a lies in the key's
// reach at the same bytes, and another access with a's key, PD, QP and rights passes exactly
// when it lies in the reach, at the reach's bytes (for an MR key, as an lkey too).
func (m *propModel) checkReach(t *rapid.T, a RemoteAccess, sp Span) {
	lo, reach, ok := m.s.Reach(a.Key)
	if !ok {
		t.Fatalf("no reach for %s, which passed %+v", a.Key, a) // the model's memory is all plain
	}
	inside := func(va, n uint64) bool { return va >= lo && va-lo <= reach.Len() && n <= reach.Len()-(va-lo) }
	if !inside(a.VA, a.Len) || !sameBytes(reach.Slice(a.VA-lo, a.Len), sp) {
		t.Fatalf("%+v passed at bytes outside its key's reach [0x%x, +0x%x)", a, lo, reach.Len())
	}
	b := a
	b.VA = lo + rapid.Uint64Range(0, reach.Len()+2).Draw(t, "reachOff") - rapid.Uint64Range(0, 2).Draw(t, "reachBack")
	b.Len = rapid.Uint64Range(1, reach.Len()+2).Draw(t, "reachN")
	sb, err := m.s.Remote(b)
	if (err == nil) != inside(b.VA, b.Len) || err == nil && !sameBytes(reach.Slice(b.VA-lo, b.Len), sb) {
		t.Fatalf("%+v: %v, against the reach [0x%x, +0x%x) of %+v", b, err, lo, reach.Len(), a)
	}
	if !a.Key.IsMW() {
		sl, err := m.s.Local(LocalAccess{Key: b.Key, PD: b.PD, VA: b.VA, Len: b.Len})
		if (err == nil) != inside(b.VA, b.Len) || err == nil && !sameBytes(reach.Slice(b.VA-lo, b.Len), sl) {
			t.Fatalf("lkey %+v: %v, against the reach [0x%x, +0x%x)", b, err, lo, reach.Len())
		}
	}
}
