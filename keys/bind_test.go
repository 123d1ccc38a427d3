package keys

import "testing"

// TestBindChecks runs every bind check of the reference (§3.3, B1-B12): each case breaks one
// rule, and the bind must fail with MW_BIND_ERR and that check, and leave window and MR as
// they were.
func TestBindChecks(t *testing.T) {
	type fixture struct {
		s                     *Space
		mr, mrNoBind, mrZB    Key
		mrRO, mrOtherPD, frmr Key
		w1, w2                Key
	}
	setup := func(t *testing.T) fixture {
		s := newSpace(t)
		var f fixture
		f.s = s
		f.mr, _ = reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		f.mrNoBind, _ = reg(t, s, pdA, 4096, 0x1000, LocalWrite|RemoteWrite)
		zb, err := s.RegMR(MRSpec{PD: pdA, Mem: Contiguous(make([]byte, 4096)), Access: LocalWrite | MWBind | ZeroBased})
		if err != nil {
			t.Fatal(err)
		}
		f.mrZB = zb
		f.mrRO, _ = reg(t, s, pdA, 4096, 0x1000, MWBind|RemoteRead)
		f.mrOtherPD, _ = reg(t, s, pdB, 4096, 0x1000, LocalWrite|MWBind)
		f.frmr, err = s.AllocFastRegMR(pdA, 4096)
		if err != nil {
			t.Fatal(err)
		}
		f.w1 = allocMW(t, s, pdA, MWType1)
		f.w2 = allocMW(t, s, pdA, MWType2)
		return f
	}
	ok := func(f fixture, w Key) Bind {
		return Bind{MW: w, Key8: w.Key8() + 1, QP: qp1, PD: pdA, MR: f.mr, Addr: 0x1000, Len: 4096, Access: RemoteWrite | RemoteRead}
	}
	cases := []struct {
		name  string
		check Check
		bind  func(f fixture) Bind
	}{
		{"B1_stale_mw_key", CheckKey, func(f fixture) Bind { b := ok(f, f.w1); b.MW = f.w1.Inc(); return b }},
		{"B1_unknown_mw", CheckIndex, func(f fixture) Bind { b := ok(f, f.w1); b.MW = 0x00ffff00; return b }},
		{"B1_mr_key_as_mw", CheckIndex, func(f fixture) Bind { b := ok(f, f.w1); b.MW = f.mr; return b }},
		{"B2_unknown_mr", CheckMR, func(f fixture) Bind { b := ok(f, f.w1); b.MR = 0x00001200; return b }},
		{"B2_stale_mr_key", CheckMR, func(f fixture) Bind { b := ok(f, f.w2); b.MR = f.mr.Inc(); return b }},
		{"B2_mr_not_valid", CheckMR, func(f fixture) Bind { b := ok(f, f.w2); b.MR = f.frmr; return b }},
		{"B3_unsupported_rights", CheckFlags, func(f fixture) Bind { b := ok(f, f.w1); b.Access |= 1 << 15; return b }},
		{"B5_type1_zero_based", CheckZeroBased, func(f fixture) Bind { b := ok(f, f.w1); b.Access |= ZeroBased; return b }},
		{"B7_type2_qp_in_other_pd", CheckPD, func(f fixture) Bind { b := ok(f, f.w2); b.PD = pdB; return b }},
		{"B8_type2_zero_length", CheckLength, func(f fixture) Bind { b := ok(f, f.w2); b.Len = 0; return b }},
		{"B9_zero_based_mr", CheckZeroBased, func(f fixture) Bind { b := ok(f, f.w2); b.MR, b.Addr = f.mrZB, 0; return b }},
		{"B10_mr_without_mw_bind", CheckMWBind, func(f fixture) Bind { b := ok(f, f.w1); b.MR = f.mrNoBind; return b }},
		{"B11_remote_write_without_local_write", CheckLocalWrite, func(f fixture) Bind { b := ok(f, f.w2); b.MR = f.mrRO; return b }},
		{"B11_remote_atomic_without_local_write", CheckLocalWrite, func(f fixture) Bind {
			b := ok(f, f.w1)
			b.MR, b.Access = f.mrRO, RemoteAtomic
			return b
		}},
		{"B12_before_mr", CheckRange, func(f fixture) Bind { b := ok(f, f.w1); b.Addr = 0xfff; return b }},
		{"B12_past_mr", CheckRange, func(f fixture) Bind { b := ok(f, f.w2); b.Addr = 0x1001; return b }},
		{"B12_wrapping", CheckRange, func(f fixture) Bind { b := ok(f, f.w2); b.Addr, b.Len = 0x1800, ^uint64(0)-0x7ff; return b }},
		{"B12_zero_based_window_past_mr", CheckRange, func(f fixture) Bind {
			b := ok(f, f.w2)
			b.Access |= ZeroBased
			b.Addr, b.Len = 0x1800, 4096
			return b
		}},
		{"mr_in_other_pd", CheckPD, func(f fixture) Bind { b := ok(f, f.w1); b.MR = f.mrOtherPD; return b }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			b := c.bind(f)
			beforeMW, errMW := f.s.QueryMW(b.MW)
			_, err := f.s.BindMW(b)
			wantAccess(t, err, c.check, StatusMWBindErr, SyndromeNone)
			if errMW == nil {
				after, _ := f.s.QueryMW(b.MW)
				if after != beforeMW {
					t.Fatalf("failed bind changed the window: %+v -> %+v", beforeMW, after)
				}
			}
			for _, k := range []Key{f.mr, f.mrNoBind, f.mrRO, f.mrOtherPD} {
				if info, _ := f.s.QueryMR(k); info.BoundMW != 0 {
					t.Fatalf("failed bind left MR %s with %d windows", k, info.BoundMW)
				}
			}
			// The same fixture binds fine with the rule respected.
			if _, err := f.s.BindMW(ok(f, f.w1)); err != nil {
				t.Fatalf("good type 1 bind: %v", err)
			}
			if _, err := f.s.BindMW(ok(f, f.w2)); err != nil {
				t.Fatalf("good type 2 bind: %v", err)
			}
		})
	}

	// B4 and B6 need a window in the wrong state.
	t.Run("B4_type1_must_be_valid", func(t *testing.T) {
		// A type 1 window is VALID from allocation until dealloc, so the only way to break B4
		// is a window that no longer exists; that is B1's failure.
		f := setup(t)
		if err := f.s.DeallocMW(f.w1, 0); err != nil {
			t.Fatal(err)
		}
		_, err := f.s.BindMW(ok(f, f.w1))
		e := wantAccess(t, err, CheckIndex, StatusMWBindErr, SyndromeNone)
		if e.Revoked.Cause != CauseDealloc {
			t.Fatalf("revocation %+v", e.Revoked)
		}
	})
	t.Run("B6_type2_must_be_free", func(t *testing.T) {
		f := setup(t)
		k := bind(t, f.s, ok(f, f.w2))
		b := ok(f, k)
		_, err := f.s.BindMW(b)
		wantAccess(t, err, CheckState, StatusMWBindErr, SyndromeNone)
	})
}

// TestBindSemantics covers what a successful bind does beyond its checks.
func TestBindSemantics(t *testing.T) {
	t.Run("type1_rebind_moves_the_window", func(t *testing.T) {
		s := newSpace(t)
		m1, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		m2, _ := reg(t, s, pdA, 4096, 0x9000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType1)
		k := bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: m1, Addr: 0x1000, Len: 64, Access: RemoteRead})
		k = bind(t, s, Bind{MW: k, QP: qp1, PD: pdA, MR: m2, Addr: 0x9000, Len: 64, Access: RemoteRead})
		i1, _ := s.QueryMR(m1)
		i2, _ := s.QueryMR(m2)
		if i1.BoundMW != 0 || i2.BoundMW != 1 {
			t.Fatalf("bound counts %d %d", i1.BoundMW, i2.BoundMW)
		}
		info, _ := s.QueryMW(k)
		if info.MR != m2 || info.Addr != 0x9000 || info.Len != 64 || !info.Bound || info.QP != 0 {
			t.Fatalf("window %+v", info)
		}
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp2, VA: 0x9000, Len: 64, Rights: RemoteRead})
	})
	t.Run("type2_same_key8_warns", func(t *testing.T) {
		s := newSpace(t)
		mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
		w := allocMW(t, s, pdA, MWType2)
		res, err := s.BindMW(Bind{MW: w, Key8: w.Key8(), QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 64, Access: RemoteRead})
		if err != nil || !res.SameKey8 || res.Key != w {
			t.Fatalf("%+v %v", res, err)
		}
	})
	t.Run("zero_based_window", func(t *testing.T) {
		s := newSpace(t)
		mr, buf := reg(t, s, pdA, 8192, 0x40000, LocalWrite|MWBind)
		copy(buf[0x1000+16:], "zb")
		w := allocMW(t, s, pdA, MWType2)
		k := bind(t, s, Bind{MW: w, Key8: 1, QP: qp1, PD: pdA, MR: mr, Addr: 0x41000, Len: 0x1000, Access: RemoteRead | ZeroBased})
		if got := remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 16, Len: 2, Rights: RemoteRead}); string(got) != "zb" {
			t.Fatalf("read %q", got)
		}
		remoteOK(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0xff8, Len: 8, Rights: RemoteRead})
		remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0xffc, Len: 8, Rights: RemoteRead}, CheckRange)
		remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, QP: qp1, VA: 0x41000, Len: 8, Rights: RemoteRead}, CheckRange)
	})
	t.Run("type1_bind_on_fast_reg_mr", func(t *testing.T) {
		s := newSpace(t)
		fr, err := s.AllocFastRegMR(pdA, 4096)
		if err != nil {
			t.Fatal(err)
		}
		nk := fr.Inc()
		if err := s.FastReg(FastReg{Key: nk, PD: pdA, Mem: Contiguous(make([]byte, 4096)), IOVA: 0x5000, Access: LocalWrite | MWBind}); err != nil {
			t.Fatal(err)
		}
		k := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType1), QP: qp1, PD: pdA, MR: nk, Addr: 0x5000, Len: 4096, Access: RemoteWrite})
		// A fast-register MR with a window bound cannot be invalidated.
		wantAccess(t, s.Invalidate(Invalidate{Key: nk, QP: qp1}), CheckBound, StatusLocQPOpErr, SyndromeNone)
		bind(t, s, Bind{MW: k, QP: qp1, PD: pdA})
		if err := s.Invalidate(Invalidate{Key: nk, QP: qp1}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestKeyAt checks that the key at an index follows binds and REG_MR, and that a freed or
// foreign index names nothing.
func TestKeyAt(t *testing.T) {
	s := newSpace(t)
	mr, _ := reg(t, s, pdA, 4096, 0x1000, LocalWrite|MWBind)
	w := allocMW(t, s, pdA, MWType1)
	w2 := bind(t, s, Bind{MW: w, QP: qp1, PD: pdA, MR: mr, Addr: 0x1000, Len: 64, Access: RemoteRead})
	fr, err := s.AllocFastRegMR(pdA, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.FastReg(FastReg{Key: fr.Inc(), PD: pdA, Mem: Contiguous(make([]byte, 64)), Access: LocalWrite}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		index uint32
		want  Key // 0: nothing lives there
	}{
		{mr.Index(), mr},
		{w.Index(), w2},
		{fr.Index(), fr.Inc()},
		{0, 0},
		{mr.Index() + 100, 0},
		{w.Index() + 100, 0},
		{indexLimit, 0},
		{^uint32(0), 0},
	} {
		got, ok := s.KeyAt(c.index)
		if got != c.want || ok != (c.want != 0) {
			t.Errorf("KeyAt(0x%x) = %s, %v; want %s", c.index, got, ok, c.want)
		}
	}
	if err := s.DeallocMW(w2, 0); err != nil {
		t.Fatal(err)
	}
	if k, ok := s.KeyAt(w.Index()); ok {
		t.Errorf("KeyAt of a deallocated window: %s", k)
	}
}
