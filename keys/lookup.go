package keys

// LocalAccess is an access through an lkey: an SGE of a work request or a receive WQE.
type LocalAccess struct {
	Key Key
	PD  PD // the PD of the QP the WQE belongs to
	VA  uint64
	Len uint64
	// Rights is LocalWrite when the access stores into the memory (a receive buffer, a READ
	// or atomic result) and 0 when it only reads (local read is always allowed).
	Rights Access
}

// RemoteAccess is an access through an rkey: a RETH or AtomicETH arriving on a QP.
type RemoteAccess struct {
	Key    Key
	PD     PD  // the PD of the responder QP
	QP     QPN // the responder QP, for type 2 windows
	VA     uint64
	Len    uint64
	Rights Access // RemoteRead, RemoteWrite or RemoteAtomic
}

// Local checks an lkey access in the order of the reference (§2.2: index, key, PD, rights,
// state, range) and returns where the bytes are. A failure is an *AccessError with
// LOC_PROT_ERR. A zero-length access touches nothing and is not checked.
func (s *Space) Local(a LocalAccess) (Span, error) {
	if a.Len == 0 {
		return Span{}, nil
	}
	sl := s.liveMR(a.Key)
	if sl == nil || sl.key != a.Key {
		return Span{}, s.keyError(OpLocal, a.Key, a.VA, a.Len, sl)
	}
	return s.checkMR(OpLocal, &sl.e, a.Key, a.PD, a.VA, a.Len, a.Rights)
}

// Remote checks an rkey access and returns where the bytes are. An MR is checked as in §2.2 of
// the reference; a window as in §3.4 (key, PD, QP for type 2, length, rights, state), then
// against the window's own range — IBTA's rule, which rxe does not apply (W21) — and then
// against its MR. A failure is an *AccessError with REM_ACCESS_ERR and NAK 0x62. A zero-length
// access touches nothing and is not checked (K7).
func (s *Space) Remote(a RemoteAccess) (Span, error) {
	if a.Len == 0 {
		return Span{}, nil
	}
	if !a.Key.IsMW() {
		sl := s.liveMR(a.Key)
		if sl == nil || sl.key != a.Key {
			return Span{}, s.keyError(OpRemote, a.Key, a.VA, a.Len, sl)
		}
		return s.checkMR(OpRemote, &sl.e, a.Key, a.PD, a.VA, a.Len, a.Rights)
	}
	sl := s.liveMW(a.Key)
	if sl == nil || sl.key != a.Key {
		e := &AccessError{Op: OpRemote, Check: CheckIndex, Status: StatusRemAccessErr, Syndrome: SyndromeRemoteAccess,
			Key: a.Key, VA: a.VA, Len: a.Len, Revoked: s.revokedMW(a.Key)}
		if sl != nil {
			e.Check, e.Have = CheckKey, uint64(sl.key)
		}
		return Span{}, e
	}
	w := &sl.e
	fail := func(c Check, want, have uint64) (Span, error) {
		return Span{}, &AccessError{Op: OpRemote, Check: c, Status: StatusRemAccessErr, Syndrome: SyndromeRemoteAccess,
			Key: a.Key, VA: a.VA, Len: a.Len, Want: want, Have: have, Revoked: sl.revoked}
	}
	if w.typ != MWType2A && w.pd != a.PD {
		return fail(CheckPD, uint64(a.PD), uint64(w.pd))
	}
	if w.typ != MWType1 && w.state == stateValid && w.qp != a.QP {
		return fail(CheckQP, uint64(a.QP), uint64(w.qp))
	}
	if w.length == 0 {
		return fail(CheckLength, 0, 0)
	}
	if a.Rights&^w.access != 0 {
		return fail(CheckRights, uint64(a.Rights), uint64(w.access))
	}
	if w.state != stateValid {
		return fail(CheckState, uint64(stateValid), uint64(w.state))
	}
	// The window's range. A zero-based window takes offsets from its start.
	addr := a.VA
	lo := w.addr
	if w.access&ZeroBased != 0 {
		lo = 0
	}
	if !inRange(a.VA, a.Len, lo, w.length) {
		return Span{}, &AccessError{Op: OpRemote, Check: CheckRange, Status: StatusRemAccessErr, Syndrome: SyndromeRemoteAccess,
			Key: a.Key, VA: a.VA, Len: a.Len, Lo: lo, Hi: endOf(lo, w.length), Detail: "outside the window"}
	}
	if w.access&ZeroBased != 0 {
		addr = w.addr + a.VA // cannot wrap: a.VA+a.Len <= w.length and the window fits in its MR
	}
	mr := s.mrs.get(w.mr)
	// A bound window holds its MR: dereg_mr and invalidation refuse while it is bound, so the
	// MR is live and VALID. Check anyway rather than trust it.
	if mr == nil || !mr.live || mr.e.state != stateValid || !inRange(addr, a.Len, mr.e.iova, mr.e.length) {
		return fail(CheckMR, 0, 0)
	}
	return s.span(OpRemote, &mr.e, a.Key, addr, a.Len, a.Rights)
}

// keyError explains why a key named no live object: no such index, or a key8 that is not (or
// no longer) the current one.
func (s *Space) keyError(op Op, k Key, va, n uint64, sl *slot[mrEntry]) error {
	status, syn := op.outcome()
	e := &AccessError{Op: op, Check: CheckIndex, Status: status, Syndrome: syn, Key: k, VA: va, Len: n}
	switch {
	case k.IsMW():
		e.Check, e.Detail = CheckKind, "an lkey must name an MR; this is a memory window"
	case sl != nil:
		e.Check, e.Have, e.Revoked = CheckKey, uint64(sl.key), s.revokedMR(k)
	default:
		e.Revoked = s.revokedMR(k)
	}
	return e
}

// checkMR runs the checks after the key: PD, rights, state, range.
func (s *Space) checkMR(op Op, mr *mrEntry, k Key, pd PD, va, n uint64, rights Access) (Span, error) {
	status, syn := op.outcome()
	fail := func(c Check, want, have uint64) (Span, error) {
		return Span{}, &AccessError{Op: op, Check: c, Status: status, Syndrome: syn, Key: k, VA: va, Len: n, Want: want, Have: have}
	}
	switch {
	case mr.pd != pd:
		return fail(CheckPD, uint64(pd), uint64(mr.pd))
	case rights&^mr.access != 0:
		return fail(CheckRights, uint64(rights), uint64(mr.access))
	case mr.state != stateValid:
		// A key that is still the MR's current one but FREE was invalidated in place
		// (LOCAL_INV, SEND_WITH_INV of a fast-register MR) or lost its memory (RevokeMRs):
		// the error says which, as for a key that moved on.
		_, err := fail(CheckState, uint64(stateValid), uint64(mr.state))
		err.(*AccessError).Revoked = s.revokedMR(k)
		return Span{}, err
	case !mr.mem.implicit() && !inRange(va, n, mr.iova, mr.length):
		return Span{}, &AccessError{Op: op, Check: CheckRange, Status: status, Syndrome: syn, Key: k, VA: va, Len: n,
			Lo: mr.iova, Hi: endOf(mr.iova, mr.length)}
	}
	return s.span(op, mr, k, va, n, rights)
}

// span turns a checked address range of an MR into a Span. For an implicit on-demand MR it is
// the address space that decides whether the bytes exist; for on-demand paged memory its page
// table, and a page it lacks is a *PageFault (a store when rights include a write).
func (s *Space) span(op Op, mr *mrEntry, k Key, va, n uint64, rights Access) (Span, error) {
	if od := mr.mem.onDemand(); od != nil {
		return s.faultingSpan(op, od, k, va, n, rights&(LocalWrite|RemoteWrite|RemoteAtomic) != 0)
	}
	if mr.mem.implicit() {
		if va > ^uint64(0)-n+1 || !mr.mem.as.Mapped(va, n) {
			status, syn := op.outcome()
			return Span{}, &AccessError{Op: op, Check: CheckUnmapped, Status: status, Syndrome: syn, Key: k, VA: va, Len: n}
		}
		return Span{mem: mr.mem, off: va, n: n}, nil
	}
	return Span{mem: mr.mem, off: va - mr.iova, n: n}, nil
}

// outcome is how a failed lkey or rkey check is reported: a bad SGE is LOC_PROT_ERR (IBTA and
// hardware; rxe says LOC_QP_OP_ERR: K13), a bad rkey is NAK 0x62 and REM_ACCESS_ERR.
func (o Op) outcome() (Status, Syndrome) {
	if o == OpRemote {
		return StatusRemAccessErr, SyndromeRemoteAccess
	}
	return StatusLocProtErr, SyndromeNone
}

// Reach is the range of addresses through key k that an access with the PD, QP and rights of one
// that Local or Remote just passed would pass too: [lo, lo+sp.Len()), the bytes of an access
// at va being sp.Slice(va-lo, n), as long as the key space does not change. For an MR it is the
// registered range, for a window the window's. It lets an engine check the accesses after the
// first against a range instead of looking the key up again. ok is false when the range alone
// does not decide: memory whose pages do (an implicit or on-demand MR), or a key that reaches no
// memory now.
func (s *Space) Reach(k Key) (lo uint64, sp Span, ok bool) {
	plain := func(mr *mrEntry) bool {
		return mr.state == stateValid && mr.length > 0 && !mr.mem.implicit() && mr.mem.onDemand() == nil
	}
	if !k.IsMW() {
		sl := s.liveMR(k)
		if sl == nil || sl.key != k || !plain(&sl.e) {
			return 0, Span{}, false
		}
		return sl.e.iova, Span{mem: sl.e.mem, off: 0, n: sl.e.length}, true
	}
	sl := s.liveMW(k)
	if sl == nil || sl.key != k || sl.e.state != stateValid || sl.e.length == 0 {
		return 0, Span{}, false
	}
	w := &sl.e
	mr := s.mrs.get(w.mr)
	if mr == nil || !mr.live || !plain(&mr.e) || !inRange(w.addr, w.length, mr.e.iova, mr.e.length) {
		return 0, Span{}, false
	}
	if w.access&ZeroBased == 0 {
		lo = w.addr
	}
	return lo, Span{mem: mr.e.mem, off: w.addr - mr.e.iova, n: w.length}, true
}
