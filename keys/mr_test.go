package keys

import (
	"bytes"
	"math"
	"syscall"
	"testing"
	"time"
)

func TestRegMRIova(t *testing.T) {
	s := newSpace(t)
	buf := []byte("0123456789abcdef")
	// ibv_reg_mr_iova: the byte at wire address X is at addr + (X - hca_va).
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: Contiguous(buf), IOVA: 0xabc000, Access: LocalWrite | RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	if got := remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0xabc00a, Len: 3, Rights: RemoteRead}); string(got) != "abc" {
		t.Fatalf("read %q", got)
	}
	// ZERO_BASED, and hca_va 0, both take wire addresses as offsets.
	for _, spec := range []MRSpec{
		{PD: pdA, Mem: Contiguous(buf), Access: RemoteRead | ZeroBased},
		{PD: pdA, Mem: Contiguous(buf), Access: RemoteRead},
	} {
		k, err := s.RegMR(spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: 4, Len: 2, Rights: RemoteRead}); string(got) != "45" {
			t.Fatalf("read %q", got)
		}
		remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 15, Len: 2, Rights: RemoteRead}, CheckRange)
	}
	_, err = s.RegMR(MRSpec{PD: pdA, Mem: Contiguous(buf), IOVA: 0x1000, Access: ZeroBased})
	wantErrno(t, err, syscall.EINVAL)
	_, err = s.RegMR(MRSpec{PD: pdA, Mem: Contiguous(nil)})
	wantErrno(t, err, syscall.EINVAL)
}

func TestScatterMemory(t *testing.T) {
	s := newSpace(t)
	a, b, c := []byte("hello "), []byte{}, []byte("scattered world")
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: Scatter(a, b, c), IOVA: 0x100, Access: LocalWrite | RemoteRead | RemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.QueryMR(k)
	if info.Length != 21 {
		t.Fatalf("length %d", info.Length)
	}
	sp, err := s.Remote(RemoteAccess{Key: k, PD: pdA, VA: 0x103, Len: 10, Rights: RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	segs := sp.Segments(nil)
	if len(segs) != 2 || string(segs[0]) != "lo " || string(segs[1]) != "scatter" {
		t.Fatalf("segments %q", segs)
	}
	// Appending through a segment cannot spill past the access.
	if cap(segs[0]) != 3 || cap(segs[1]) != 7 {
		t.Fatalf("segment capacities %d %d", cap(segs[0]), cap(segs[1]))
	}
	sp, _ = s.Remote(RemoteAccess{Key: k, PD: pdA, VA: 0x104, Len: 9, Rights: RemoteWrite})
	if n := sp.CopyFrom([]byte("O_WORLD!!")); n != 9 {
		t.Fatalf("copied %d", n)
	}
	if string(a) != "hellO_" || string(c) != "WORLD!!ed world" {
		t.Fatalf("memory %q %q", a, c)
	}
	if got := remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x100, Len: 21, Rights: RemoteRead}); string(got) != "hellO_WORLD!!ed world" {
		t.Fatalf("read %q", got)
	}
	if Scatter().Len() != 0 {
		t.Fatal("empty scatter list has bytes")
	}
}

// pages is an AddressSpace of 4 KiB pages at chosen addresses, like a guest's DMA map.
type pages map[uint64][]byte

func (p pages) Mapped(addr, n uint64) bool {
	last := (addr + (n - 1)) &^ 4095 // keys passes n >= 1 and a range that does not wrap
	for a := addr &^ 4095; ; a += 4096 {
		if _, ok := p[a]; !ok {
			return false
		}
		if a == last {
			return true
		}
	}
}

func (p pages) Segments(addr, n uint64, dst [][]byte) [][]byte {
	for n > 0 {
		pg := p[addr&^4095][addr&4095:]
		if uint64(len(pg)) > n {
			pg = pg[:n]
		}
		dst = append(dst, pg)
		addr += uint64(len(pg))
		n -= uint64(len(pg))
	}
	return dst
}

func TestImplicitODP(t *testing.T) {
	s := newSpace(t)
	as := pages{0x10000: make([]byte, 4096), 0x11000: make([]byte, 4096), 0x7fff_ffff_f000: make([]byte, 4096)}
	for _, bad := range []MRSpec{
		{PD: pdA, Mem: Implicit(as), Access: LocalWrite | RemoteWrite},                        // no ON_DEMAND
		{PD: pdA, Mem: Implicit(as), IOVA: 0x1000, Access: OnDemand | LocalWrite},             // iova
		{PD: pdA, Mem: Implicit(as), Access: OnDemand | ZeroBased | LocalWrite | RemoteWrite}, //
	} {
		_, err := s.RegMR(bad)
		wantErrno(t, err, syscall.EINVAL)
	}
	k, err := s.RegMR(MRSpec{PD: pdA, Mem: Implicit(as), Access: OnDemand | LocalWrite | RemoteWrite | RemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := s.QueryMR(k); info.Length != math.MaxUint64 || info.IOVA != 0 {
		t.Fatalf("implicit MR %+v", info)
	}
	sp, err := s.Remote(RemoteAccess{Key: k, PD: pdA, VA: 0x10ffc, Len: 8, Rights: RemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	sp.CopyFrom([]byte("ABCDEFGH"))
	if !bytes.Equal(as[0x10000][4092:], []byte("ABCD")) || !bytes.Equal(as[0x11000][:4], []byte("EFGH")) {
		t.Fatal("write across pages landed wrong")
	}
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x11ffc, Len: 8, Rights: RemoteWrite}, CheckUnmapped)
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: math.MaxUint64 - 3, Len: 8, Rights: RemoteWrite}, CheckUnmapped)
	_, err = s.Local(LocalAccess{Key: k, PD: pdA, VA: 0x5000, Len: 8, Rights: LocalWrite})
	wantAccess(t, err, CheckUnmapped, StatusLocProtErr, SyndromeNone)
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdB, VA: 0x10000, Len: 8, Rights: RemoteWrite}, CheckPD)
}

func TestFastRegister(t *testing.T) {
	s := newSpace(t)
	k, err := s.AllocFastRegMR(pdA, 8192)
	if err != nil {
		t.Fatal(err)
	}
	mem := Contiguous(make([]byte, 4096))
	// FREE until registered.
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0, Len: 8, Rights: RemoteWrite}, CheckRights)
	_, err = s.Local(LocalAccess{Key: k, PD: pdA, VA: 0, Len: 8})
	wantAccess(t, err, CheckState, StatusLocProtErr, SyndromeNone)

	for _, c := range []struct {
		name  string
		req   FastReg
		check Check
	}{
		{"other_index", FastReg{Key: k + 0x100, PD: pdA, Mem: mem, Access: LocalWrite}, CheckIndex},
		{"other_pd", FastReg{Key: k.Inc(), PD: pdB, Mem: mem, Access: LocalWrite}, CheckPD},
		{"too_long", FastReg{Key: k.Inc(), PD: pdA, Mem: Contiguous(make([]byte, 8193)), Access: LocalWrite}, CheckRange},
		{"remote_write_without_local", FastReg{Key: k.Inc(), PD: pdA, Mem: mem, Access: RemoteWrite}, CheckFlags},
		{"no_memory", FastReg{Key: k.Inc(), PD: pdA, Access: LocalWrite}, CheckRange},
	} {
		wantAccess(t, s.FastReg(c.req), c.check, StatusLocQPOpErr, SyndromeNone)
	}
	nk := k.WithKey8(k.Key8() + 7)
	if err := s.FastReg(FastReg{Key: nk, PD: pdA, Mem: mem, IOVA: 0xf000, Access: LocalWrite | RemoteWrite}); err != nil {
		t.Fatal(err)
	}
	remoteOK(t, s, RemoteAccess{Key: nk, PD: pdA, VA: 0xf000, Len: 4096, Rights: RemoteWrite})
	e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0xf000, Len: 8, Rights: RemoteWrite}, CheckKey)
	if e.Revoked.Cause != CauseFastReg {
		t.Fatalf("revocation %+v", e.Revoked)
	}
	// Registering a VALID fast-register MR again fails: it must be invalidated first.
	wantAccess(t, s.FastReg(FastReg{Key: nk.Inc(), PD: pdA, Mem: mem, Access: LocalWrite}), CheckState, StatusLocQPOpErr, SyndromeNone)
	// A reg_mr MR is not fast-registrable.
	user, _ := reg(t, s, pdA, 64, 0, LocalWrite)
	wantAccess(t, s.FastReg(FastReg{Key: user.Inc(), PD: pdA, Mem: mem, Access: LocalWrite}), CheckKind, StatusLocQPOpErr, SyndromeNone)

	// LOCAL_INV and SEND_WITH_INV invalidate it; the key must match exactly.
	wantAccess(t, s.Invalidate(Invalidate{Key: nk.Inc(), QP: qp1}), CheckKey, StatusLocQPOpErr, SyndromeNone)
	if err := s.Invalidate(Invalidate{Key: nk, QP: qp1, Remote: true, At: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	remoteFails(t, s, RemoteAccess{Key: nk, PD: pdA, VA: 0xf000, Len: 8, Rights: RemoteWrite}, CheckState)
	wantAccess(t, s.Invalidate(Invalidate{Key: nk, QP: qp1}), CheckState, StatusLocQPOpErr, SyndromeNone)
	// And it can be registered again with the same or a new key8. The old key stays recorded
	// as revoked by the invalidation, not by the REG_MR that replaced it afterwards.
	if err := s.FastReg(FastReg{Key: nk.Inc(), PD: pdA, Mem: mem, Access: LocalWrite | RemoteRead, At: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	e = remoteFails(t, s, RemoteAccess{Key: nk, PD: pdA, VA: 0xf000, Len: 8, Rights: RemoteRead}, CheckKey)
	if want := (Revocation{Key: nk, Cause: CauseSendWithInv, QP: qp1, At: 3 * time.Millisecond}); e.Revoked != want {
		t.Fatalf("revocation %+v, want %+v", e.Revoked, want)
	}
	wantErrno(t, s.ReregMR(nk.Inc(), ChangeAccess, MRSpec{}), syscall.EINVAL)
	if err := s.DeregMR(nk.Inc(), 0); err != nil {
		t.Fatal(err)
	}
	_, err = s.AllocFastRegMR(pdA, 0)
	wantErrno(t, err, syscall.EINVAL)
}

func TestRereg(t *testing.T) {
	s := newSpace(t)
	k, old := reg(t, s, pdA, 64, 0x1000, LocalWrite|RemoteRead)
	copy(old, "old")
	fresh := []byte("new memory")
	if err := s.ReregMR(k, ChangeTranslation, MRSpec{Mem: Contiguous(fresh), IOVA: 0x8000}); err != nil {
		t.Fatal(err)
	}
	if got := remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x8000, Len: 3, Rights: RemoteRead}); string(got) != "new" {
		t.Fatalf("read %q", got)
	}
	remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x1000, Len: 3, Rights: RemoteRead}, CheckRange)
	// All-or-nothing: a bad access change leaves the PD change undone too.
	err := s.ReregMR(k, ChangePD|ChangeAccess, MRSpec{PD: pdB, Access: RemoteWrite})
	wantErrno(t, err, syscall.EINVAL)
	if info, _ := s.QueryMR(k); info.PD != pdA || info.Access != LocalWrite|RemoteRead {
		t.Fatalf("failed rereg changed the MR: %+v", info)
	}
	for _, flags := range []ReregFlags{0, 8} {
		wantErrno(t, s.ReregMR(k, flags, MRSpec{}), syscall.EINVAL)
	}
	wantErrno(t, s.ReregMR(k.Inc(), ChangePD, MRSpec{PD: pdB}), syscall.EINVAL)
	wantErrno(t, s.ReregMR(k, ChangeAccess, MRSpec{Access: 1 << 15}), syscall.EOPNOTSUPP)
	// Rereg refuses while a window is bound.
	k2, _ := reg(t, s, pdA, 64, 0x1000, LocalWrite|MWBind)
	bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType1), QP: qp1, PD: pdA, MR: k2, Addr: 0x1000, Len: 64, Access: RemoteRead})
	wantErrno(t, s.ReregMR(k2, ChangeAccess, MRSpec{Access: LocalWrite | MWBind | RemoteRead}), syscall.EBUSY)
}

func TestDeregRevokes(t *testing.T) {
	s := newSpace(t)
	k, _ := reg(t, s, pdA, 64, 0x1000, LocalWrite|RemoteWrite)
	if err := s.DeregMR(k, 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, s.DeregMR(k, 0), syscall.EINVAL)
	e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckIndex)
	if e.Revoked.Cause != CauseDereg {
		t.Fatalf("revocation %+v", e.Revoked)
	}
	if _, err := s.QueryMR(k); err == nil {
		t.Fatal("query of a deregistered MR succeeded")
	}
}

func TestLimits(t *testing.T) {
	s := New(Config{Rand: Seeded(2), MaxMR: 3, MaxMW: 2})
	var keys []Key
	for range 3 {
		k, _ := reg(t, s, pdA, 8, 0, 0)
		keys = append(keys, k)
	}
	_, err := s.RegMR(MRSpec{PD: pdA, Mem: Contiguous(make([]byte, 8))})
	wantErrno(t, err, syscall.ENOMEM)
	_, err = s.AllocFastRegMR(pdA, 8)
	wantErrno(t, err, syscall.ENOMEM)
	allocMW(t, s, pdA, MWType1)
	allocMW(t, s, pdA, MWType2)
	_, err = s.AllocMW(pdA, MWType1)
	wantErrno(t, err, syscall.ENOMEM)
	// A full table reuses a freed index at once, with a new key8.
	if err := s.DeregMR(keys[1], 0); err != nil {
		t.Fatal(err)
	}
	k, _ := reg(t, s, pdA, 8, 0, 0)
	if k.Index() != keys[1].Index() || k == keys[1] {
		t.Fatalf("reuse gave %s after %s", k, keys[1])
	}
}

func TestReuseDelay(t *testing.T) {
	s := newSpace(t)
	first, _ := reg(t, s, pdA, 8, 0, 0)
	if err := s.DeregMR(first, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < reuseDelay; i++ {
		k, _ := reg(t, s, pdA, 8, 0, 0)
		if k.Index() == first.Index() {
			t.Fatalf("index reused after %d registrations", i)
		}
		if err := s.DeregMR(k, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestErrorText(t *testing.T) {
	s := newSpace(t)
	mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
	k := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2), Key8: 0x34, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
	if err := s.Invalidate(Invalidate{Key: k, QP: 0x11, Remote: true, At: 1500 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	k2 := bind(t, s, Bind{MW: k, Key8: 0x35, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
	_, err := s.Remote(RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite})
	want := "remote access with key " + k.String() + " failed check key: current key is " + k2.String() +
		" (key " + k.String() + " was revoked by SEND_WITH_INV on QP 0x000011 at t=1.5ms) -> REM_ACCESS_ERR, NAK 0x62 remote access error"
	if err == nil || err.Error() != want {
		t.Fatalf("reason\n got %v\nwant %s", err, want)
	}
}
