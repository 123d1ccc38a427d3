package keys

import (
	"testing"
	"unsafe"
)

// fuzzFixture is a populated space: MRs of every addressing kind, windows of every type (bound,
// unbound, zero-based, invalidated), and keys that were revoked. For each live key it records
// the only bytes a lookup through it may return.
type fuzzFixture struct {
	s       *Space
	allowed map[Key][][]byte
}

func newFuzzFixture(tb testing.TB) *fuzzFixture {
	s := New(Config{Rand: Seeded(7)})
	f := &fuzzFixture{s: s, allowed: map[Key][][]byte{}}
	all := LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind
	regMem := func(pd PD, mem Memory, iova uint64, acc Access, bufs ...[]byte) Key {
		k, err := s.RegMR(MRSpec{PD: pd, Mem: mem, IOVA: iova, Access: acc})
		if err != nil {
			tb.Fatal(err)
		}
		f.allowed[k] = bufs
		return k
	}
	plain := make([]byte, 8192)
	mr := regMem(pdA, Contiguous(plain), 0x10000, all, plain)
	a, b := make([]byte, 100), make([]byte, 3000)
	regMem(pdA, Scatter(a, b), 0x7fff0000, all, a, b)
	zb := make([]byte, 512)
	regMem(pdB, Contiguous(zb), 0, ZeroBased|RemoteRead, zb)
	top := make([]byte, 4096)
	regMem(pdA, Contiguous(top), ^uint64(0)-4095, all, top)
	as := pages{0x10000: make([]byte, 4096), 0x11000: make([]byte, 4096)}
	regMem(pdA, Implicit(as), 0, OnDemand|all, as[0x10000], as[0x11000])
	gone := regMem(pdA, Contiguous(make([]byte, 64)), 0x1000, all)
	if err := s.DeregMR(gone, 0); err != nil {
		tb.Fatal(err)
	}
	delete(f.allowed, gone)

	window := func(typ MWType, qp QPN, addr, n uint64, acc Access) Key {
		w, err := s.AllocMW(pdA, typ)
		if err != nil {
			tb.Fatal(err)
		}
		res, err := s.BindMW(Bind{MW: w, Key8: 0x5a, QP: qp, PD: pdA, MR: mr, Addr: addr, Len: n, Access: acc})
		if err != nil {
			tb.Fatal(err)
		}
		f.allowed[res.Key] = [][]byte{plain[addr-0x10000 : addr-0x10000+n]}
		return res.Key
	}
	window(MWType1, qp1, 0x11000, 4096, RemoteWrite|RemoteRead)
	window(MWType2, qp1, 0x10100, 256, RemoteRead|RemoteAtomic)
	window(MWType2A, qp2, 0x10800, 1024, RemoteWrite|ZeroBased)
	inv := window(MWType2, qp2, 0x10000, 8192, RemoteRead)
	if err := s.Invalidate(Invalidate{Key: inv, QP: qp2, Remote: true}); err != nil {
		tb.Fatal(err)
	}
	delete(f.allowed, inv)
	if _, err := s.AllocMW(pdA, MWType1); err != nil { // unbound type 1
		tb.Fatal(err)
	}
	return f
}

// check asserts that every returned byte lies in what the key may reach.
func (f *fuzzFixture) check(t *testing.T, k Key, n uint64, sp Span) {
	if sp.Len() != n {
		t.Fatalf("span of %d bytes for a %d-byte access", sp.Len(), n)
	}
	var total uint64
	for _, seg := range sp.Segments(nil) {
		total += uint64(len(seg))
		if !within(seg, f.allowed[k]) {
			t.Fatalf("key %s returned memory outside its MR or window", k)
		}
	}
	if total != n {
		t.Fatalf("segments hold %d bytes, want %d", total, n)
	}
}

func within(seg []byte, bufs [][]byte) bool {
	if len(seg) == 0 {
		return true
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(seg)))
	for _, b := range bufs {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if p >= lo && p+uintptr(len(seg)) <= lo+uintptr(len(b)) {
			return true
		}
	}
	return false
}

// FuzzLookup feeds arbitrary (key, va, length, rights, pd, qp) to both lookups: no panic, and
// no byte outside the MR or window the key names.
func FuzzLookup(f *testing.F) {
	fx := newFuzzFixture(f)
	var live []Key
	for k := range fx.allowed {
		live = append(live, k)
	}
	for _, k := range live {
		f.Add(uint32(k), uint64(0x10000), uint64(8), uint32(RemoteRead), uint32(pdA), uint32(qp1))
		f.Add(uint32(k), uint64(0x11000), uint64(4096), uint32(RemoteWrite), uint32(pdA), uint32(qp2))
		f.Add(uint32(k), ^uint64(0)-3, uint64(8), uint32(RemoteAtomic), uint32(pdA), uint32(qp1))
		f.Add(uint32(k), uint64(0x10ff8), ^uint64(0), uint32(LocalWrite), uint32(pdB), uint32(qp2))
	}
	f.Fuzz(func(t *testing.T, key uint32, va, n uint64, rights, pd, qp uint32) {
		k := Key(key)
		sp, err := fx.s.Remote(RemoteAccess{Key: k, PD: PD(pd), QP: QPN(qp), VA: va, Len: n, Rights: Access(rights)})
		if err == nil && n > 0 {
			fx.check(t, k, n, sp)
		}
		sp, err = fx.s.Local(LocalAccess{Key: k, PD: PD(pd), VA: va, Len: n, Rights: Access(rights)})
		if err == nil && n > 0 {
			fx.check(t, k, n, sp)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("error without a reason")
		}
	})
}
