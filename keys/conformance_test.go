package keys

import (
	"bytes"
	"math"
	"syscall"
	"testing"
	"time"
)

// onSpace runs check as subtest name on a fresh key space.
func onSpace(t *testing.T, name string, check func(t *testing.T, s *Space)) {
	t.Helper()
	t.Run(name, func(t *testing.T) { check(t, newSpace(t)) })
}

// TestConformance holds the checks of the semantics reference (§9) that the key space decides
// on its own. The QP-, completion- and wire-level halves of these checks, and the checks that
// need the engine, are listed in docs/conformance.md.
func TestConformance(t *testing.T) {
	onSpace(t, "K1_reg_mr_flags", func(t *testing.T, s *Space) {
		mem := Contiguous(make([]byte, 64))
		for _, c := range []struct {
			access Access
			errno  syscall.Errno
		}{
			{RemoteWrite, syscall.EINVAL},
			{RemoteAtomic, syscall.EINVAL},
			{RemoteWrite | RemoteRead, syscall.EINVAL},
			{1 << 15, syscall.EOPNOTSUPP}, // an undefined bit
			{HugeTLB, syscall.EOPNOTSUPP}, // HUGETLB without ON_DEMAND
		} {
			_, err := s.RegMR(MRSpec{PD: pdA, Mem: mem, Access: c.access})
			wantErrno(t, err, c.errno)
		}
		if mrs, _ := s.Counts(); mrs != 0 {
			t.Fatalf("%d MRs live after failed registrations", mrs)
		}
		// What is accepted: LOCAL_WRITE with the remote rights, ON_DEMAND (with HUGETLB as a
		// hint), ZERO_BASED, and optional flags, which are ignored.
		for _, a := range []Access{0, LocalWrite | RemoteWrite, LocalWrite | RemoteAtomic | RemoteRead | MWBind,
			OnDemand | HugeTLB, ZeroBased | RemoteRead, RemoteRead | RelaxedOrdering | 1<<25,
			FlushGlobal | RemoteWrite | LocalWrite, FlushPersistent, FlushGlobal | FlushPersistent} {
			if _, err := s.RegMR(MRSpec{PD: pdA, Mem: mem, Access: a}); err != nil {
				t.Errorf("RegMR(%s): %v", a, err)
			}
		}
	})

	onSpace(t, "K3_index_never_enters_mw_range", func(t *testing.T, s *Space) {
		w := allocMW(t, s, pdA, MWType1)
		var k Key
		for i := range 70000 {
			k, _ = reg(t, s, pdA, 8, 0x1000, LocalWrite|RemoteWrite)
			if k.IsMW() || k.Index() == 0 {
				t.Fatalf("registration %d got key %s outside the MR range", i, k)
			}
			if i%2 == 0 {
				if err := s.DeregMR(k, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite})
		if !w.IsMW() {
			t.Fatalf("window key %s is not in the MW range", w)
		}
		if _, err := s.QueryMW(w); err != nil {
			t.Fatal(err)
		}
	})

	onSpace(t, "K4_key8_plus_one", func(t *testing.T, s *Space) {
		k, _ := reg(t, s, pdA, 4096, 0x10000, LocalWrite|RemoteWrite)
		e := remoteFails(t, s, RemoteAccess{Key: k.Inc(), PD: pdA, VA: 0x10000, Len: 8, Rights: RemoteWrite}, CheckKey)
		if Key(e.Have) != k {
			t.Fatalf("error names current key %s, want %s", Key(e.Have), k)
		}
	})

	onSpace(t, "K5_range_without_wrap", func(t *testing.T, s *Space) {
		const va = 0x7000_0000_0000
		k, _ := reg(t, s, pdA, 4096, va, LocalWrite|RemoteWrite)
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: va + 4096 - 8, Len: 8, Rights: RemoteWrite})
		for _, c := range []struct{ va, n uint64 }{
			{va + 4096 - 4, 8},
			{math.MaxUint64 - 3, 8},
			{math.MaxUint64, 1},
			{va, math.MaxUint64},
			{va + 8, math.MaxUint64 - 4},
			{va - 1, 8},
			{0, 8},
		} {
			e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: c.va, Len: c.n, Rights: RemoteWrite}, CheckRange)
			if e.Lo != va || e.Hi != va+4096 {
				t.Fatalf("bounds [0x%x, 0x%x), want [0x%x, 0x%x)", e.Lo, e.Hi, va, va+4096)
			}
		}
		// An MR at the top of the address space: its end is 2^64 exactly.
		top, _ := reg(t, s, pdA, 4096, math.MaxUint64-4095, LocalWrite|RemoteWrite)
		remoteOK(t, s, RemoteAccess{Key: top, PD: pdA, VA: math.MaxUint64 - 7, Len: 8, Rights: RemoteWrite})
		remoteFails(t, s, RemoteAccess{Key: top, PD: pdA, VA: math.MaxUint64 - 3, Len: 8, Rights: RemoteWrite}, CheckRange)
		_, err := s.RegMR(MRSpec{PD: pdA, Mem: Contiguous(make([]byte, 4096)), IOVA: math.MaxUint64 - 4094})
		wantErrno(t, err, syscall.EINVAL)
	})

	onSpace(t, "K7_zero_length_not_checked", func(t *testing.T, s *Space) {
		for _, r := range []Access{RemoteRead, RemoteWrite} {
			sp, err := s.Remote(RemoteAccess{Key: 0xdeadbeef, PD: pdA, QP: qp1, VA: 0x1234, Len: 0, Rights: r})
			if err != nil || sp.Len() != 0 || len(sp.Segments(nil)) != 0 {
				t.Fatalf("zero-length %s: span %d bytes, err %v", r, sp.Len(), err)
			}
		}
		if _, err := s.Local(LocalAccess{Key: 0xdeadbeef, PD: pdA, Len: 0, Rights: LocalWrite}); err != nil {
			t.Fatal(err)
		}
	})

	onSpace(t, "K8_pd_and_rights", func(t *testing.T, s *Space) {
		k, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|RemoteWrite)
		e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdB, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckPD)
		if PD(e.Have) != pdA || PD(e.Want) != pdB {
			t.Fatalf("PDs in error: have %d want %d", e.Have, e.Want)
		}
		lw, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite)
		remoteFails(t, s, RemoteAccess{Key: lw, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckRights)
	})

	onSpace(t, "K11_atomic_without_right", func(t *testing.T, s *Space) {
		k, _ := reg(t, s, pdA, 64, 0x1000, LocalWrite|RemoteWrite|RemoteRead)
		e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteAtomic}, CheckRights)
		if Access(e.Want) != RemoteAtomic {
			t.Fatalf("wanted rights %s", Access(e.Want))
		}
	})

	onSpace(t, "K13_bad_lkey_is_loc_prot_err", func(t *testing.T, s *Space) {
		k, _ := reg(t, s, pdA, 64, 0x1000, LocalWrite)
		if _, err := s.Local(LocalAccess{Key: k, PD: pdA, VA: 0x1000, Len: 64}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Local(LocalAccess{Key: k.Inc(), PD: pdA, VA: 0x1000, Len: 64})
		wantAccess(t, err, CheckKey, StatusLocProtErr, SyndromeNone)
		// A window's rkey is not an lkey.
		w := allocMW(t, s, pdA, MWType1)
		_, err = s.Local(LocalAccess{Key: w, PD: pdA, VA: 0, Len: 8})
		wantAccess(t, err, CheckKind, StatusLocProtErr, SyndromeNone)
	})

	onSpace(t, "K14_receive_mr_moved_to_another_pd", func(t *testing.T, s *Space) {
		k, _ := reg(t, s, pdA, 64, 0x1000, LocalWrite)
		if err := s.ReregMR(k, ChangePD, MRSpec{PD: pdB}); err != nil {
			t.Fatal(err)
		}
		// The receive WQE's SGE now fails its PD check; the engine turns this into NAK 0x63.
		_, err := s.Local(LocalAccess{Key: k, PD: pdA, VA: 0x1000, Len: 64, Rights: LocalWrite})
		wantAccess(t, err, CheckPD, StatusLocProtErr, SyndromeNone)
		if err := s.ReregMR(k, ChangePD, MRSpec{PD: pdA}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Local(LocalAccess{Key: k, PD: pdA, VA: 0x1000, Len: 64, Rights: LocalWrite}); err != nil {
			t.Fatal(err)
		}
	})

	onSpace(t, "K15_rereg_drops_atomic", func(t *testing.T, s *Space) {
		k, _ := reg(t, s, pdA, 64, 0x1000, LocalWrite|RemoteAtomic)
		at := RemoteAccess{Key: k, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteAtomic}
		remoteOK(t, s, at)
		if err := s.ReregMR(k, ChangeAccess, MRSpec{Access: LocalWrite}); err != nil {
			t.Fatal(err)
		}
		remoteFails(t, s, at, CheckRights)
		if err := s.ReregMR(k, ChangeAccess, MRSpec{Access: LocalWrite | RemoteAtomic}); err != nil {
			t.Fatal(err)
		}
		remoteOK(t, s, at)
	})

	onSpace(t, "K16_dereg_with_window_bound", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind|RemoteWrite)
		w := allocMW(t, s, pdA, MWType1)
		bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		wantErrno(t, s.DeregMR(mr, 0), syscall.EBUSY)
		remoteOK(t, s, RemoteAccess{Key: mr, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite})
		if err := s.DeallocMW(w.Inc(), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.DeregMR(mr, 0); err != nil {
			t.Fatal(err)
		}
	})

	onSpace(t, "W1_alloc_mw_type_3", func(t *testing.T, s *Space) {
		for _, typ := range []MWType{0, 3, 0xff} {
			_, err := s.AllocMW(pdA, typ)
			wantErrno(t, err, syscall.EINVAL)
		}
	})

	onSpace(t, "W2_type1_bind_rotates_key8", func(t *testing.T, s *Space) {
		mr, buf := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		copy(buf[100:], "window")
		w := allocMW(t, s, pdA, MWType1)
		nk := bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite | RemoteRead})
		if nk != w.Inc() || nk.Index() != w.Index() {
			t.Fatalf("new rkey %s, want %s", nk, w.Inc())
		}
		got := remoteOK(t, s, RemoteAccess{Key: nk, PD: pdA, VA: 0x1000 + 100, Len: 6, Rights: RemoteRead})
		if string(got) != "window" {
			t.Fatalf("read %q", got)
		}
		remoteFails(t, s, RemoteAccess{Key: w, PD: pdA, VA: 0x1000, Len: 6, Rights: RemoteRead}, CheckKey)
		// key8 wraps; the index stays.
		k := nk
		for range 300 {
			k = bind(t, s, Bind{MW: k, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 8, Access: RemoteRead})
		}
		if k != nk.WithKey8(nk.Key8()+44) { // 300 mod 256
			t.Fatalf("after 300 binds key %s", k)
		}
	})

	onSpace(t, "W3_mr_without_mw_bind", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|RemoteWrite)
		for _, typ := range []MWType{MWType1, MWType2, MWType2A} {
			w := allocMW(t, s, pdA, typ)
			_, err := s.BindMW(Bind{MW: w, Key8: 7, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 64, Access: RemoteRead})
			wantAccess(t, err, CheckMWBind, StatusMWBindErr, SyndromeNone)
			info, _ := s.QueryMW(w)
			if info.Key != w || info.Bound {
				t.Fatalf("%s window changed by a failed bind: %+v", typ, info)
			}
		}
	})

	onSpace(t, "W4_remote_write_needs_local_write", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, MWBind|RemoteRead)
		w := allocMW(t, s, pdA, MWType1)
		for _, a := range []Access{RemoteWrite, RemoteAtomic} {
			_, err := s.BindMW(Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 64, Access: a})
			wantAccess(t, err, CheckLocalWrite, StatusMWBindErr, SyndromeNone)
		}
		bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 64, Access: RemoteRead})
	})

	onSpace(t, "W5_window_rights_not_capped_by_mr", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType1)
		nk := bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteRead | RemoteWrite | RemoteAtomic})
		remoteOK(t, s, RemoteAccess{Key: nk, PD: pdA, VA: 0x1000, Len: 4096, Rights: RemoteRead})
		remoteOK(t, s, RemoteAccess{Key: nk, PD: pdA, VA: 0x1008, Len: 8, Rights: RemoteAtomic})
		// The MR's own rkey still has no remote rights.
		remoteFails(t, s, RemoteAccess{Key: mr, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteRead}, CheckRights)
	})

	onSpace(t, "W6_window_outside_mr", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		for _, typ := range []MWType{MWType1, MWType2} {
			w := allocMW(t, s, pdA, typ)
			_, err := s.BindMW(Bind{MW: w, Key8: 1, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000 + 2048, Len: 4096, Access: RemoteRead})
			e := wantAccess(t, err, CheckRange, StatusMWBindErr, SyndromeNone)
			if e.Lo != 0x1000 || e.Hi != 0x2000 {
				t.Fatalf("bounds [0x%x,0x%x)", e.Lo, e.Hi)
			}
			_, err = s.BindMW(Bind{MW: w, Key8: 1, QP: qp1, PD: pdA, MR: mr, Addr: math.MaxUint64 - 10, Len: 20, Access: RemoteRead})
			wantAccess(t, err, CheckRange, StatusMWBindErr, SyndromeNone)
		}
	})

	onSpace(t, "W7_type1_zero_length_bind_invalidates", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType1)
		k1 := bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		k2 := bind(t, s, Bind{MW: k1, QP: qp1, PD: pdA, Len: 0, At: time.Minute})
		if k2 != k1.Inc() {
			t.Fatalf("zero-length bind gave %s, want %s", k2, k1.Inc())
		}
		e := remoteFails(t, s, RemoteAccess{Key: k1, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckKey)
		if e.Revoked != (Revocation{Key: k1, Cause: CauseBind, QP: qp1, At: time.Minute}) {
			t.Fatalf("revocation %+v", e.Revoked)
		}
		remoteFails(t, s, RemoteAccess{Key: k2, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckLength)
		// The MR is free of the window.
		if info, _ := s.QueryMR(mr); info.BoundMW != 0 {
			t.Fatalf("MR still has %d windows", info.BoundMW)
		}
	})

	onSpace(t, "W8_local_inv_on_type1", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType1)
		k := bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		err := s.Invalidate(Invalidate{Key: k, QP: qp1})
		wantAccess(t, err, CheckKind, StatusLocQPOpErr, SyndromeNone)
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite})
	})

	onSpace(t, "W9_bind_verb_prechecks", func(t *testing.T, s *Space) {
		mrA, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		mrB, _ := reg(t, s, pdB, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType1)
		zb := Bind{MW: w, QP: qp1, PD: pdA, MR: mrA, Addr: 0, Len: 64, Access: RemoteRead | ZeroBased}
		wantErrno(t, s.CheckBindVerb(zb), syscall.EINVAL)
		other := Bind{MW: w, QP: qp1, PD: pdA, MR: mrB, Addr: 0x1000, Len: 64, Access: RemoteRead}
		wantErrno(t, s.CheckBindVerb(other), syscall.EPERM)
		// What the device answers when the same binds reach it anyway.
		_, err := s.BindMW(zb)
		wantAccess(t, err, CheckZeroBased, StatusMWBindErr, SyndromeNone)
		_, err = s.BindMW(other)
		wantAccess(t, err, CheckPD, StatusMWBindErr, SyndromeNone)
		if err := s.CheckBindVerb(Bind{MW: w, QP: qp1, PD: pdA, MR: mrA, Addr: 0x1000, Len: 64, Access: RemoteRead}); err != nil {
			t.Fatal(err)
		}
	})

	onSpace(t, "W11_type2_bind_with_inc_rkey", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType2)
		res, err := s.BindMW(Bind{MW: w, Key8: w.Inc().Key8(), QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		if err != nil || res.Key != w.Inc() || res.SameKey8 {
			t.Fatalf("bind: %+v, %v", res, err)
		}
		remoteOK(t, s, RemoteAccess{Key: res.Key, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite})
		remoteFails(t, s, RemoteAccess{Key: w, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckKey)
	})

	onSpace(t, "W12_type2_bind_errors", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType2)
		k := bind(t, s, Bind{MW: w, Key8: 1, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		_, err := s.BindMW(Bind{MW: k, Key8: 2, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 64, Access: RemoteWrite})
		wantAccess(t, err, CheckState, StatusMWBindErr, SyndromeNone) // (a) o10-37.2.30
		w2 := allocMW(t, s, pdA, MWType2)
		_, err = s.BindMW(Bind{MW: w2, Key8: 2, QP: qp2, PD: pdB, MR: mr, Addr: 0x1000, Len: 64, Access: RemoteWrite})
		wantAccess(t, err, CheckPD, StatusMWBindErr, SyndromeNone) // (b) C10-72
		_, err = s.BindMW(Bind{MW: w2, Key8: 2, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 0, Access: RemoteWrite})
		wantAccess(t, err, CheckLength, StatusMWBindErr, SyndromeNone) // (c) o10-37.2.40
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite})
	})

	onSpace(t, "W15_type2B_other_qp", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		k := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2), Key8: 9, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp2, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckQP)
		if QPN(e.Have) != qp1 || QPN(e.Want) != qp2 {
			t.Fatalf("QPs in error: %+v", e)
		}
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite})
		// 2B also checks the PD; 2A checks only the QP.
		remoteFails(t, s, RemoteAccess{Key: k, PD: pdB, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckPD)
		k2a := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2A), Key8: 9, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		remoteOK(t, s, RemoteAccess{Key: k2a, PD: pdB, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite})
		remoteFails(t, s, RemoteAccess{Key: k2a, PD: pdA, QP: qp2, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckQP)
	})

	onSpace(t, "W16_type2_local_inv_then_rebind", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType2)
		k := bind(t, s, Bind{MW: w, Key8: w.Key8() + 1, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		if err := s.Invalidate(Invalidate{Key: k, QP: qp1, At: 7 * time.Second}); err != nil {
			t.Fatal(err)
		}
		e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckLength)
		if e.Revoked != (Revocation{Key: k, Cause: CauseLocalInv, QP: qp1, At: 7 * time.Second}) {
			t.Fatalf("revocation %+v", e.Revoked)
		}
		if info, _ := s.QueryMR(mr); info.BoundMW != 0 {
			t.Fatal("MR still holds the invalidated window")
		}
		k2 := bind(t, s, Bind{MW: k, Key8: k.Key8() + 1, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		remoteOK(t, s, RemoteAccess{Key: k2, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite})
		remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckKey)
	})

	onSpace(t, "W17_send_with_inv", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		k := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2), Key8: 0x42, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		if err := s.Invalidate(Invalidate{Key: k, QP: qp1, Remote: true}); err != nil {
			t.Fatal(err)
		}
		e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckLength)
		if e.Revoked.Cause != CauseSendWithInv || !bytes.Contains([]byte(e.Error()), []byte("SEND_WITH_INV on QP 0x000011")) {
			t.Fatalf("reason %q", e.Error())
		}
	})

	onSpace(t, "W18_send_with_inv_bad_rkey", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		free := allocMW(t, s, pdA, MWType2)
		for _, c := range []struct {
			key   Key
			check Check
		}{
			{0xdeadbeef, CheckIndex}, // unknown
			{0x00ffff01, CheckIndex}, // unknown MW index
			{free, CheckState},       // not bound
			{free.Inc(), CheckKey},   // wrong key8
			{mr, CheckKind},          // a reg_mr MR
		} {
			err := s.Invalidate(Invalidate{Key: c.key, QP: qp1, Remote: true})
			wantAccess(t, err, c.check, StatusRemInvReqErr, SyndromeInvalidReq)
		}
	})

	onSpace(t, "W19_dealloc_bound_type2", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		k := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2), Key8: 3, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite})
		wantErrno(t, s.DeregMR(mr, 0), syscall.EBUSY)
		if err := s.DeallocMW(k, 0); err != nil {
			t.Fatal(err)
		}
		e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckIndex)
		if e.Revoked.Cause != CauseDealloc {
			t.Fatalf("revocation %+v", e.Revoked)
		}
		if err := s.DeregMR(mr, 0); err != nil {
			t.Fatal(err)
		}
	})

	onSpace(t, "W20_type2_local_write_only", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		k := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType2), Key8: 3, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 4096, Access: LocalWrite})
		remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x1000, Len: 8, Rights: RemoteWrite}, CheckRights)
	})

	onSpace(t, "W21_window_bounds", func(t *testing.T, s *Space) {
		mr, buf := reg(t, s, pdA, 8192, 0x10000, LocalWrite|MWBind)
		copy(buf[4096:], "inside")
		for _, typ := range []MWType{MWType1, MWType2} {
			w := allocMW(t, s, pdA, typ)
			k := bind(t, s, Bind{MW: w, Key8: 5, QP: qp1, PD: pdA, MR: mr, Addr: 0x10000 + 4096, Len: 4096, Access: RemoteWrite | RemoteRead})
			e := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x10000, Len: 8, Rights: RemoteWrite}, CheckRange)
			if e.Lo != 0x11000 || e.Hi != 0x12000 {
				t.Fatalf("window bounds [0x%x,0x%x)", e.Lo, e.Hi)
			}
			remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x11000 - 4, Len: 8, Rights: RemoteWrite}, CheckRange)
			remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x12000 - 4, Len: 8, Rights: RemoteWrite}, CheckRange)
			if got := remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x11000, Len: 6, Rights: RemoteRead}); string(got) != "inside" {
				t.Fatalf("read %q", got)
			}
		}
	})

	onSpace(t, "W22_local_inv_on_user_mr", func(t *testing.T, s *Space) {
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|RemoteWrite)
		wantAccess(t, s.Invalidate(Invalidate{Key: mr, QP: qp1}), CheckKind, StatusLocQPOpErr, SyndromeNone)
		remoteOK(t, s, RemoteAccess{Key: mr, PD: pdA, VA: 0x1000, Len: 8, Rights: RemoteWrite})
	})
}
