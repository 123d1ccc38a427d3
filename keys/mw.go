package keys

import (
	"syscall"
	"time"
)

// supportedMW is every flag a bind accepts for a window (rxe's RXE_ACCESS_SUPPORTED_MW).
const supportedMW = supportedMR | ZeroBased

// AllocMW allocates a memory window (ibv_alloc_mw). A type 1 window starts VALID with length 0,
// bindable and granting nothing; a type 2 window starts FREE.
func (s *Space) AllocMW(pd PD, typ MWType) (Key, error) {
	const verb = "alloc_mw"
	if typ != MWType1 && typ != MWType2 && typ != MWType2A {
		return 0, verbErr(verb, syscall.EINVAL, "no memory window type %d", uint8(typ))
	}
	sl := s.mws.alloc(s.rnd)
	if sl == nil {
		return 0, verbErr(verb, syscall.ENOMEM, "all %d MW indices are in use", s.mws.max)
	}
	st := stateFree
	if typ == MWType1 {
		st = stateValid
	}
	sl.e = mwEntry{typ: typ, state: st, pd: pd}
	return sl.key, nil
}

// DeallocMW frees a window (ibv_dealloc_mw) at time at, unbinding it first; its rkey is dead
// from then on.
func (s *Space) DeallocMW(key Key, at time.Duration) error {
	sl := s.liveMW(key)
	if sl == nil || sl.key != key {
		return verbErr("dealloc_mw", syscall.EINVAL, "no memory window with key %s", key)
	}
	s.unbind(&sl.e)
	s.mws.release(sl, Revocation{Key: key, Cause: CauseDealloc, At: at})
	return nil
}

// unbind drops the window's hold on its MR.
func (s *Space) unbind(w *mwEntry) {
	if w.mr != 0 {
		if mr := s.mrs.get(w.mr); mr != nil && mr.live {
			mr.e.numMW--
		}
	}
	w.mr, w.access, w.addr, w.length, w.qp = 0, 0, 0, 0, 0
}

// Bind is a memory window bind: a BIND_MW work request, or the bind verb for type 1.
type Bind struct {
	MW Key // the window's rkey as the consumer holds it; a stale one fails (B1)
	// Key8 is the consumer's new key8 for a type 2 window (the low byte of ibv_send_wr's
	// bind_mw.rkey). A type 1 bind ignores it: the bind verb always takes key8 + 1.
	Key8 uint8
	QP   QPN // the QP the bind was posted on
	PD   PD  // that QP's PD
	MR   Key // the lkey of the MR to bind to; ignored by a zero-length type 1 bind
	Addr uint64
	Len  uint64
	// Access is the window's rights. They are not capped by the MR's remote rights (C10-73,
	// C10-74 are the only links). ZERO_BASED makes wire addresses offsets into the window.
	Access Access
	At     time.Duration // when the bind runs, recorded with the key a type 1 bind revokes
}

// Bound is a successful bind's result.
type Bound struct {
	Key Key // the window's new rkey
	// SameKey8 warns that a type 2 bind reused the window's previous key8, so the rkey that
	// was invalidated is valid again: almost always a consumer bug.
	SameKey8 bool
}

// CheckBindVerb is the bind verb's own check before it posts a type 1 bind (what rxe's provider
// checks in ibv_bind_mw): EINVAL for a ZERO_BASED bind or an address or length without an MR,
// EPERM when window and MR are in different PDs. The device checks the rest when the bind runs.
func (s *Space) CheckBindVerb(b Bind) error {
	const verb = "bind_mw"
	if b.Access&ZeroBased != 0 {
		return verbErr(verb, syscall.EINVAL, "a type 1 window cannot be ZERO_BASED")
	}
	w := s.liveMW(b.MW)
	if w == nil || w.key != b.MW {
		return verbErr(verb, syscall.EINVAL, "no memory window with key %s", b.MW)
	}
	if w.e.typ != MWType1 {
		return verbErr(verb, syscall.EINVAL, "ibv_bind_mw binds type 1 windows; type 2 is bound by a BIND_MW work request")
	}
	if b.Len == 0 {
		return nil
	}
	mr := s.liveMR(b.MR)
	if mr == nil || mr.key != b.MR {
		if b.Addr != 0 || b.Len != 0 {
			return verbErr(verb, syscall.EINVAL, "no MR with key %s", b.MR)
		}
	} else if mr.e.pd != w.e.pd {
		return verbErr(verb, syscall.EPERM, "window is in PD %d, MR in PD %d", w.e.pd, mr.e.pd)
	}
	return nil
}

// BindMW executes a bind. Every failure completes with MW_BIND_ERR and leaves the window as it
// was. The checks are IBTA's (B1-B12 of the reference), plus one rxe leaves to its provider:
// window and MR must be in the same PD. A window must fit inside its MR whether it is zero-based
// or not.
func (s *Space) BindMW(b Bind) (Bound, error) {
	w, err := s.bindWindow(b)
	if err != nil {
		return Bound{}, err
	}
	var mr *slot[mrEntry]
	if b.Len != 0 {
		if mr, err = s.bindMR(b, w); err != nil {
			return Bound{}, err
		}
	}
	return s.applyBind(b, w, mr), nil
}

// bindFail is a bind's failure at check c.
func bindFail(b Bind, c Check, detail string) error {
	return &AccessError{Op: OpBind, Check: c, Status: StatusMWBindErr, Key: b.MW, VA: b.Addr, Len: b.Len, Detail: detail}
}

// bindWindow finds the window a bind names and checks the bind against it and its type (B1,
// B3-B8).
func (s *Space) bindWindow(b Bind) (*slot[mwEntry], error) {
	w := s.liveMW(b.MW)
	if w == nil {
		return nil, &AccessError{Op: OpBind, Check: CheckIndex, Status: StatusMWBindErr, Key: b.MW, Revoked: s.revokedMW(b.MW)}
	}
	if w.key != b.MW { // B1
		return nil, &AccessError{Op: OpBind, Check: CheckKey, Status: StatusMWBindErr, Key: b.MW, Have: uint64(w.key), Revoked: s.revokedMW(b.MW)}
	}
	if bad := (b.Access &^ optionalRange) &^ supportedMW; bad != 0 { // B3
		return nil, bindFail(b, CheckFlags, "unsupported window rights "+bad.String())
	}
	if w.e.typ == MWType1 {
		if w.e.state != stateValid { // B4
			return nil, bindFail(b, CheckState, "a type 1 window must be VALID")
		}
		if b.Access&ZeroBased != 0 { // B5
			return nil, bindFail(b, CheckZeroBased, "a type 1 window cannot be zero-based (o10-36.2.2)")
		}
		return w, nil
	}
	if w.e.state != stateFree { // B6
		return nil, bindFail(b, CheckState, "a type 2 window must be FREE: invalidate it before binding again (o10-37.2.30)")
	}
	if b.PD != w.e.pd { // B7
		return nil, &AccessError{Op: OpBind, Check: CheckPD, Status: StatusMWBindErr, Key: b.MW, VA: b.Addr, Len: b.Len,
			Want: uint64(b.PD), Have: uint64(w.e.pd), Detail: "the bind's QP must be in the window's PD (C10-72)"}
	}
	if b.Len == 0 { // B8
		return nil, bindFail(b, CheckLength, "a type 2 window cannot be bound with length 0 (o10-37.2.40)")
	}
	return w, nil
}

// bindMR finds the MR a bind of nonzero length names and checks the bind against it (B2,
// B9-B12).
func (s *Space) bindMR(b Bind, w *slot[mwEntry]) (*slot[mrEntry], error) {
	mr := s.liveMR(b.MR)
	switch { // B2
	case mr == nil:
		return nil, bindFail(b, CheckMR, "no MR with key "+b.MR.String())
	case mr.key != b.MR:
		return nil, bindFail(b, CheckMR, "MR key "+b.MR.String()+" is stale, current is "+mr.key.String())
	case mr.e.state != stateValid:
		return nil, bindFail(b, CheckMR, "the MR is not VALID")
	case mr.e.pd != w.e.pd:
		return nil, bindFail(b, CheckPD, "the MR and the window are in different PDs")
	case mr.e.access&ZeroBased != 0: // B9
		return nil, bindFail(b, CheckZeroBased, "cannot bind a window to a zero-based MR")
	case mr.e.access&MWBind == 0: // B10
		return nil, bindFail(b, CheckMWBind, "the MR lacks MW_BIND (C10-73)")
	case b.Access&(RemoteWrite|RemoteAtomic) != 0 && mr.e.access&LocalWrite == 0: // B11
		return nil, bindFail(b, CheckLocalWrite, "remote write or atomic rights need LOCAL_WRITE on the MR (C10-74)")
	case !inRange(b.Addr, b.Len, mr.e.iova, mr.e.length): // B12
		return nil, &AccessError{Op: OpBind, Check: CheckRange, Status: StatusMWBindErr, Key: b.MW, VA: b.Addr, Len: b.Len,
			Lo: mr.e.iova, Hi: endOf(mr.e.iova, mr.e.length), Detail: "the window must lie inside the MR (C10-75)"}
	}
	return mr, nil
}

// applyBind moves the checked window's key on and binds it to mr (nil for a zero-length bind,
// which leaves it bound to nothing).
func (s *Space) applyBind(b Bind, w *slot[mwEntry], mr *slot[mrEntry]) Bound {
	old := w.key
	var res Bound
	if w.e.typ == MWType1 {
		w.key = old.Inc()
		w.revoked = Revocation{Key: old, Cause: CauseBind, QP: b.QP, At: b.At}
	} else {
		w.key = old.WithKey8(b.Key8)
		res.SameKey8 = w.key == old
	}
	s.unbind(&w.e)
	w.e.state = stateValid
	if mr != nil {
		mr.e.numMW++
		w.e.mr, w.e.access, w.e.addr, w.e.length = mr.key.Index(), b.Access, b.Addr, b.Len
		if w.e.typ != MWType1 {
			w.e.qp = b.QP
		}
	}
	res.Key = w.key
	return res
}

// Invalidate is a LOCAL_INV work request or the IETH of an arriving SEND_WITH_INV.
type Invalidate struct {
	Key    Key
	QP     QPN           // the QP that carries the request
	Remote bool          // SEND_WITH_INV rather than LOCAL_INV
	At     time.Duration // when it runs, recorded with the key it revokes
}

// Invalidate makes a type 2 window or a fast-register MR FREE. The key must match exactly. A
// type 1 window (invalidated by a zero-length bind instead), an MR from reg_mr, something
// already FREE, or a fast-register MR with windows bound fail: LOCAL_INV with LOC_QP_OP_ERR,
// SEND_WITH_INV with REM_INV_REQ_ERR and NAK 0x61. Like rxe, and pending a reading of IBTA,
// the invalidating QP's PD and QP number are not compared with the object's.
func (s *Space) Invalidate(inv Invalidate) error {
	op, status, syn, cause := OpLocalInv, StatusLocQPOpErr, SyndromeNone, CauseLocalInv
	if inv.Remote {
		op, status, syn, cause = OpSendWithInv, StatusRemInvReqErr, SyndromeInvalidReq, CauseSendWithInv
	}
	fail := func(c Check, have Key, rev Revocation, detail string) error {
		return &AccessError{Op: op, Check: c, Status: status, Syndrome: syn, Key: inv.Key, Have: uint64(have), Revoked: rev, Detail: detail}
	}
	if inv.Key.IsMW() {
		w := s.liveMW(inv.Key)
		switch {
		case w == nil:
			return fail(CheckIndex, 0, s.revokedMW(inv.Key), "")
		case w.key != inv.Key:
			return fail(CheckKey, w.key, s.revokedMW(inv.Key), "")
		case w.e.typ == MWType1:
			return fail(CheckKind, 0, Revocation{}, "a type 1 window is invalidated by a zero-length bind (o10-37.2.26)")
		case w.e.state != stateValid:
			return fail(CheckState, 0, w.revoked, "the window is not bound")
		}
		s.unbind(&w.e)
		w.e.state = stateFree
		w.revoked = Revocation{Key: w.key, Cause: cause, QP: inv.QP, At: inv.At}
		return nil
	}
	mr := s.liveMR(inv.Key)
	switch {
	case mr == nil:
		return fail(CheckIndex, 0, s.revokedMR(inv.Key), "")
	case mr.key != inv.Key:
		return fail(CheckKey, mr.key, s.revokedMR(inv.Key), "")
	case !mr.e.fastReg:
		return fail(CheckKind, 0, Revocation{}, "only fast-register MRs can be invalidated; reg_mr MRs are deregistered")
	case mr.e.state != stateValid:
		return fail(CheckState, 0, mr.revoked, "the MR is already FREE")
	case mr.e.numMW > 0:
		return fail(CheckBound, 0, Revocation{}, "memory windows are bound to the MR")
	}
	mr.e.state = stateFree
	mr.revoked = Revocation{Key: mr.key, Cause: cause, QP: inv.QP, At: inv.At}
	return nil
}

// MWInfo is what QueryMW reports.
type MWInfo struct {
	Key    Key
	Type   MWType
	PD     PD
	Bound  bool   // VALID with a nonzero length
	MR     Key    // the MR it is bound to
	QP     QPN    // type 2: the QP that bound it
	Addr   uint64 // in the MR's address space
	Len    uint64
	Access Access
}

// QueryMW reports a window's state.
func (s *Space) QueryMW(key Key) (MWInfo, error) {
	sl := s.liveMW(key)
	if sl == nil || sl.key != key {
		return MWInfo{}, verbErr("query_mw", syscall.EINVAL, "no memory window with key %s", key)
	}
	e := &sl.e
	info := MWInfo{Key: sl.key, Type: e.typ, PD: e.pd, Bound: e.state == stateValid && e.length > 0,
		QP: e.qp, Addr: e.addr, Len: e.length, Access: e.access}
	if mr := s.mrs.get(e.mr); e.mr != 0 && mr != nil {
		info.MR = mr.key
	}
	return info, nil
}
