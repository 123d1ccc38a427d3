package keys

import (
	"syscall"
	"testing"
	"time"
)

// TestRevokeMRs: an MR whose memory is revoked grants nothing through its lkey, its rkey or the
// windows bound to it, holds no reference to the memory, and can then be deregistered.
func TestRevokeMRs(t *testing.T) {
	s := newSpace(t)
	all := LocalWrite | RemoteWrite | RemoteRead | MWBind
	k, _ := reg(t, s, pdA, 8192, 0x10000, all)
	other, _ := reg(t, s, pdA, 4096, 0x40000, all)
	w1 := allocMW(t, s, pdA, MWType1)
	w2 := allocMW(t, s, pdA, MWType2)
	w1 = bind(t, s, Bind{MW: w1, QP: qp1, PD: pdA, MR: k, Addr: 0x10000, Len: 4096, Access: RemoteWrite})
	w2 = bind(t, s, Bind{MW: w2, Key8: 7, QP: qp1, PD: pdA, MR: k, Addr: 0x11000, Len: 4096, Access: RemoteRead})
	wOther := bind(t, s, Bind{MW: allocMW(t, s, pdA, MWType1), QP: qp1, PD: pdA, MR: other, Addr: 0x40000, Len: 64, Access: RemoteRead})

	got := s.RevokeMRs([]Key{k, 0xdead00}, 5*time.Millisecond) // an unknown key is skipped
	if len(got) != 2 || got[0] != w1 || got[1] != w2 {
		t.Fatalf("revoked windows %v, want [%s %s]", got, w1, w2)
	}

	_, err := s.Local(LocalAccess{Key: k, PD: pdA, VA: 0x10000, Len: 8, Rights: LocalWrite})
	wantAccess(t, err, CheckState, StatusLocProtErr, SyndromeNone)
	ae := remoteFails(t, s, RemoteAccess{Key: k, PD: pdA, VA: 0x10000, Len: 8, Rights: RemoteWrite}, CheckState)
	if ae.Status != StatusRemAccessErr {
		t.Fatal(ae)
	}
	ae = remoteFails(t, s, RemoteAccess{Key: w1, PD: pdA, QP: qp1, VA: 0x10000, Len: 8, Rights: RemoteWrite}, CheckLength)
	if want := (Revocation{Key: w1, Cause: CauseUnmap, At: 5 * time.Millisecond}); ae.Revoked != want {
		t.Fatalf("window error does not say why: %v", ae)
	}
	remoteFails(t, s, RemoteAccess{Key: w2, PD: pdA, QP: qp1, VA: 0x11000, Len: 8, Rights: RemoteRead}, CheckLength)
	if info, _ := s.QueryMW(w2); info.Bound || info.Len != 0 {
		t.Fatalf("type 2 window still bound: %+v", info)
	}
	// The other MR and its window are untouched.
	remoteOK(t, s, RemoteAccess{Key: wOther, PD: pdA, QP: qp1, VA: 0x40000, Len: 64, Rights: RemoteRead})

	if info, _ := s.QueryMR(k); info.Valid || info.Length != 0 || info.BoundMW != 0 {
		t.Fatalf("revoked MR %+v", info)
	}
	if sl := s.liveMR(k); sl.e.mem.Len() != 0 {
		t.Fatal("revoked MR still references its memory")
	}
	if _, err := s.BindMW(Bind{MW: w1, QP: qp1, PD: pdA, MR: k, Addr: 0x10000, Len: 64, Access: RemoteRead}); err == nil {
		t.Fatal("bind to a revoked MR succeeded")
	} else {
		wantAccess(t, err, CheckMR, StatusMWBindErr, SyndromeNone)
	}
	wantErrno(t, s.ReregMR(k, ChangeTranslation, MRSpec{Mem: Contiguous(make([]byte, 64)), IOVA: 0x10000}), syscall.EINVAL)
	if err := s.DeregMR(k, 6*time.Millisecond); err != nil {
		t.Fatalf("dereg of a revoked MR: %v", err)
	}
}
