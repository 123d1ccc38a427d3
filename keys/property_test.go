package keys

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

// The property tests drive a Space with random sequences of reg, dereg, alloc, bind,
// invalidate and dealloc, keep a small model of what should be live, and check the invariants
// the key space promises after every step:
//   - no two live objects share an index;
//   - a revoked key never validates again (until a type 2 bind deliberately takes the same
//     key8 back, which BindMW flags);
//   - a fresh key for a reused index has a different key8;
//   - dereg never succeeds while windows are bound;
//   - a lookup never returns memory outside the MR, or outside the window for an MW key.

type propMR struct {
	pd    PD
	buf   []byte
	iova  uint64
	acc   Access
	bound int
}

type propMW struct {
	typ  MWType
	pd   PD
	mr   Key // zero when unbound
	addr uint64
	n    uint64
	acc  Access
	qp   QPN
}

type propModel struct {
	s       *Space
	mrs     map[Key]*propMR
	mws     map[Key]*propMW
	revoked map[Key]bool
	lastKey map[uint32]Key // the last key each index carried
}

func newPropModel(seed uint64) *propModel {
	return &propModel{
		s:       New(Config{Rand: Seeded(seed), MaxMR: 64, MaxMW: 32}),
		mrs:     map[Key]*propMR{},
		mws:     map[Key]*propMW{},
		revoked: map[Key]bool{},
		lastKey: map[uint32]Key{},
	}
}

func (m *propModel) fresh(t *rapid.T, k Key) {
	if prev, ok := m.lastKey[k.Index()]; ok && prev.Key8() == k.Key8() {
		t.Fatalf("index 0x%x reused with the same key8: %s", k.Index(), k)
	}
	m.lastKey[k.Index()] = k
	delete(m.revoked, k)
}

func (m *propModel) revoke(k Key) { m.revoked[k] = true }

func pick[V any](t *rapid.T, label string, mp map[Key]V) (Key, V, bool) {
	var zero V
	if len(mp) == 0 {
		return 0, zero, false
	}
	keys := make([]Key, 0, len(mp))
	for k := range mp {
		keys = append(keys, k)
	}
	// Map order is random; sort for a reproducible draw.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	k := rapid.SampledFrom(keys).Draw(t, label)
	return k, mp[k], true
}

// The draws lean towards what succeeds (one PD, MW_BIND rights, one QP) so that long runs of
// binds and lookups through live windows happen often; the rest still covers the refusals.
var propAccess = rapid.SampledFrom([]Access{0, LocalWrite, LocalWrite | RemoteWrite, RemoteRead, RemoteWrite,
	LocalWrite | MWBind, MWBind | RemoteRead, LocalWrite | MWBind | RemoteWrite | RemoteRead | RemoteAtomic,
	LocalWrite | MWBind | RemoteWrite | RemoteRead | RemoteAtomic, LocalWrite | MWBind | RemoteRead})

var propPD = rapid.SampledFrom([]PD{pdA, pdA, pdA, pdB})
var propQP = rapid.SampledFrom([]QPN{qp1, qp1, qp1, qp2})

func (m *propModel) reg(t *rapid.T) {
	n := rapid.IntRange(1, 512).Draw(t, "len")
	iova := rapid.SampledFrom([]uint64{0, 0x1000, 1 << 40, ^uint64(0) - 511}).Draw(t, "iova")
	acc := propAccess.Draw(t, "access")
	pd := propPD.Draw(t, "pd")
	buf := make([]byte, n)
	k, err := m.s.RegMR(MRSpec{PD: pd, Mem: Contiguous(buf), IOVA: iova, Access: acc})
	if err != nil {
		if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("RegMR: unexpected %v", err)
		}
		return
	}
	if k.IsMW() {
		t.Fatalf("MR key %s in the MW range", k)
	}
	m.fresh(t, k)
	m.mrs[k] = &propMR{pd: pd, buf: buf, iova: iova, acc: acc}
}

func (m *propModel) dereg(t *rapid.T) {
	k, mr, ok := pick(t, "mr", m.mrs)
	if !ok {
		return
	}
	err := m.s.DeregMR(k, 0)
	switch {
	case mr.bound > 0 && err == nil:
		t.Fatalf("dereg of %s succeeded with %d windows bound", k, mr.bound)
	case mr.bound > 0:
		return
	case err != nil:
		t.Fatalf("dereg of %s: %v", k, err)
	}
	delete(m.mrs, k)
	m.revoke(k)
}

func (m *propModel) alloc(t *rapid.T) {
	typ := rapid.SampledFrom([]MWType{MWType1, MWType2, MWType2A}).Draw(t, "type")
	pd := propPD.Draw(t, "pd")
	k, err := m.s.AllocMW(pd, typ)
	if err != nil {
		if !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("AllocMW: %v", err)
		}
		return
	}
	if !k.IsMW() {
		t.Fatalf("MW key %s outside the MW range", k)
	}
	m.fresh(t, k)
	m.mws[k] = &propMW{typ: typ, pd: pd}
}

func (m *propModel) unbind(w *propMW) {
	if w.mr != 0 {
		m.mrs[w.mr].bound--
	}
	w.mr, w.n, w.addr, w.acc, w.qp = 0, 0, 0, 0, 0
}

func (m *propModel) bind(t *rapid.T) {
	k, w, ok := pick(t, "mw", m.mws)
	if !ok {
		return
	}
	b := Bind{MW: k, Key8: rapid.Uint8().Draw(t, "key8"), QP: propQP.Draw(t, "qp"), PD: propPD.Draw(t, "qpPD"),
		Access: rapid.SampledFrom([]Access{RemoteRead, RemoteWrite, RemoteWrite | RemoteRead | RemoteAtomic, LocalWrite, RemoteRead | ZeroBased}).Draw(t, "mwAccess")}
	mk, mr, haveMR := pick(t, "mr", m.mrs)
	if haveMR && rapid.IntRange(0, 9).Draw(t, "lenZero") > 0 {
		b.MR = mk
		off := rapid.Uint64Range(0, uint64(len(mr.buf))).Draw(t, "off")
		b.Addr = mr.iova + off
		b.Len = rapid.Uint64Range(0, uint64(len(mr.buf))-off+1).Draw(t, "n")
	}
	res, err := m.s.BindMW(b)
	if err != nil {
		var ae *AccessError
		if !errors.As(err, &ae) || ae.Status != StatusMWBindErr {
			t.Fatalf("bind failed without MW_BIND_ERR: %v", err)
		}
		return
	}
	// What a successful bind implies.
	if w.typ != MWType1 && (w.mr != 0 || b.Len == 0 || b.PD != w.pd) {
		t.Fatalf("type 2 bind accepted: bound=%v len=%d pd=%d/%d", w.mr != 0, b.Len, b.PD, w.pd)
	}
	if b.Len > 0 {
		if mr.acc&MWBind == 0 || mr.pd != w.pd || b.Addr < mr.iova || b.Addr-mr.iova+b.Len > uint64(len(mr.buf)) {
			t.Fatalf("bind accepted onto MR %+v: %+v", mr, b)
		}
		if b.Access&(RemoteWrite|RemoteAtomic) != 0 && mr.acc&LocalWrite == 0 {
			t.Fatal("C10-74 not enforced")
		}
	}
	delete(m.mws, k)
	if w.typ == MWType1 {
		if res.Key != k.Inc() {
			t.Fatalf("type 1 bind gave %s, want %s", res.Key, k.Inc())
		}
		m.revoke(k)
	} else if res.Key != k.WithKey8(b.Key8) || res.SameKey8 != (b.Key8 == k.Key8()) {
		t.Fatalf("type 2 bind gave %+v for key8 0x%02x", res, b.Key8)
	}
	delete(m.revoked, res.Key) // a type 2 consumer may take an old key8 back; BindMW warned
	m.lastKey[res.Key.Index()] = res.Key
	m.unbind(w)
	if b.Len > 0 {
		w.mr, w.addr, w.n, w.acc = b.MR, b.Addr, b.Len, b.Access
		mr.bound++
		if w.typ != MWType1 {
			w.qp = b.QP
		}
	}
	m.mws[res.Key] = w
}

func (m *propModel) invalidate(t *rapid.T) {
	k, w, ok := pick(t, "mw", m.mws)
	if !ok {
		return
	}
	err := m.s.Invalidate(Invalidate{Key: k, QP: propQP.Draw(t, "qp"), Remote: rapid.Bool().Draw(t, "remote")})
	canInvalidate := w.typ != MWType1 && w.mr != 0
	if canInvalidate != (err == nil) {
		t.Fatalf("invalidate %s (%s, bound %v): %v", k, w.typ, w.mr != 0, err)
	}
	if err == nil {
		m.unbind(w)
		m.revoke(k) // the window keeps its key, but the key grants nothing until a new bind
	}
}

func (m *propModel) dealloc(t *rapid.T) {
	k, w, ok := pick(t, "mw", m.mws)
	if !ok {
		return
	}
	if err := m.s.DeallocMW(k, 0); err != nil {
		t.Fatalf("dealloc %s: %v", k, err)
	}
	m.unbind(w)
	delete(m.mws, k)
	m.revoke(k)
}

func (m *propModel) lookup(t *rapid.T) {
	var k Key
	switch rapid.IntRange(0, 4).Draw(t, "keyFrom") {
	case 0:
		k, _, _ = pick(t, "mr", m.mrs)
	case 1, 4:
		k, _, _ = pick(t, "mw", m.mws)
	case 2:
		k, _, _ = pick(t, "revoked", m.revoked)
	default:
		k = Key(rapid.Uint32().Draw(t, "key"))
	}
	a := RemoteAccess{Key: k, PD: propPD.Draw(t, "pd"), QP: propQP.Draw(t, "qp"),
		Rights: rapid.SampledFrom([]Access{RemoteRead, RemoteWrite, RemoteAtomic}).Draw(t, "rights")}
	base := uint64(0)
	if mr, ok := m.mrs[k]; ok {
		base = mr.iova
	} else if w, ok := m.mws[k]; ok && w.acc&ZeroBased == 0 {
		base = w.addr
	}
	a.VA = base + rapid.Uint64Range(0, 600).Draw(t, "off") - rapid.Uint64Range(0, 2).Draw(t, "back")
	a.Len = rapid.Uint64Range(1, 600).Draw(t, "n")
	if w, ok := m.mws[k]; ok && w.mr != 0 && rapid.Bool().Draw(t, "nearMR") {
		// Aim at the window's MR around the window: inside the MR, maybe outside the window.
		mr := m.mrs[w.mr]
		a.VA = mr.iova + rapid.Uint64Range(0, uint64(len(mr.buf))-1).Draw(t, "mrOff")
		a.Len = rapid.Uint64Range(1, uint64(len(mr.buf))).Draw(t, "mrN")
		if w.acc&ZeroBased != 0 {
			a.VA -= mr.iova
		}
	}
	sp, err := m.s.Remote(a)
	if err != nil {
		return
	}
	if m.revoked[k] {
		t.Fatalf("revoked key %s validated", k)
	}
	// Where the bytes must be.
	var mr *propMR
	var mrOff uint64
	if mr0, ok := m.mrs[k]; ok {
		mr = mr0
		if a.VA < mr.iova || a.VA-mr.iova+a.Len > uint64(len(mr.buf)) || mr.pd != a.PD || mr.acc&a.Rights != a.Rights {
			t.Fatalf("MR lookup %+v passed for %+v", a, mr)
		}
		mrOff = a.VA - mr.iova
	} else if w, ok := m.mws[k]; ok {
		lo := w.addr
		if w.acc&ZeroBased != 0 {
			lo = 0
		}
		if w.mr == 0 || a.VA < lo || a.VA-lo+a.Len > w.n || w.acc&a.Rights != a.Rights {
			t.Fatalf("window lookup %+v passed for %+v", a, w)
		}
		if w.typ != MWType1 && w.qp != a.QP || w.typ != MWType2A && w.pd != a.PD {
			t.Fatalf("window lookup %+v passed for %+v (QP/PD)", a, w)
		}
		mr = m.mrs[w.mr]
		mrOff = w.addr - mr.iova + (a.VA - lo)
	} else {
		t.Fatalf("unknown key %s validated", k)
	}
	segs := sp.Segments(nil)
	if len(segs) != 1 || uint64(len(segs[0])) != a.Len ||
		unsafe.SliceData(segs[0]) != unsafe.SliceData(mr.buf[mrOff:]) {
		t.Fatalf("lookup %+v returned memory outside [%d, +%d) of its MR", a, mrOff, a.Len)
	}
	m.checkReach(t, a, sp)
}

func (m *propModel) check(t *rapid.T) {
	seen := map[uint32]Key{}
	for k := range m.mrs {
		seen[k.Index()] = k
	}
	for k := range m.mws {
		if other, dup := seen[k.Index()]; dup {
			t.Fatalf("keys %s and %s share an index", k, other)
		}
		seen[k.Index()] = k
	}
	if len(seen) != len(m.mrs)+len(m.mws) {
		t.Fatal("two live MRs share an index")
	}
	if mrs, mws := m.s.Counts(); mrs != len(m.mrs) || mws != len(m.mws) {
		t.Fatalf("space has %d MRs %d MWs, model %d %d", mrs, mws, len(m.mrs), len(m.mws))
	}
	for k, mr := range m.mrs {
		info, err := m.s.QueryMR(k)
		if err != nil || info.BoundMW != mr.bound {
			t.Fatalf("MR %s: %+v %v, model bound %d", k, info, err, mr.bound)
		}
	}
	// A revoked key fails on its key, or (an invalidated type 2 window keeps its key) on the
	// window being unbound; neither depends on the address, so any address will do.
	for k := range m.revoked {
		for _, pd := range []PD{pdA, pdB} {
			for _, qp := range []QPN{qp1, qp2} {
				if _, err := m.s.Remote(RemoteAccess{Key: k, PD: pd, QP: qp, VA: 0, Len: 1, Rights: RemoteRead}); err == nil {
					t.Fatalf("revoked key %s validated", k)
				}
			}
		}
	}
}

func TestPropertyKeySpace(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newPropModel(rapid.Uint64().Draw(t, "seed"))
		t.Repeat(map[string]func(*rapid.T){
			"reg":        m.reg,
			"dereg":      m.dereg,
			"alloc":      m.alloc,
			"bind":       m.bind,
			"invalidate": m.invalidate,
			"dealloc":    m.dealloc,
			"lookup":     m.lookup,
			"":           m.check,
		})
	})
}
