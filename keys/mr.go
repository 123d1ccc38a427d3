package keys

import (
	"math"
	"syscall"
	"time"
)

// supportedMR is every flag reg_mr accepts. ZERO_BASED is accepted (rxe refuses it for MRs;
// hardware and IBTA allow it). FLUSH_GLOBAL and FLUSH_PERSISTENT are accepted as rxe accepts
// them (it advertises both device capabilities); rxe refuses FLUSH_PERSISTENT over memory that
// is not persistent, a distinction a key space over Go memory does not have.
const supportedMR = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased | OnDemand | HugeTLB |
	FlushGlobal | FlushPersistent

// MRSpec describes memory to register.
type MRSpec struct {
	PD     PD
	Mem    Memory
	IOVA   uint64 // the address of Mem's first byte on the wire (ibv_reg_mr_iova's hca_va); 0 with ZERO_BASED
	Access Access
}

// CheckMRAccess applies reg_mr's flag rules (ib_check_mr_access and the device's support) to a
// registration's access flags: EOPNOTSUPP or EINVAL as reg_mr would say, for a device model
// that must know before it looks at the rest of a registration.
func CheckMRAccess(a Access) error { return checkMRAccess("reg_mr", a) }

// checkMRAccess applies reg_mr's flag rules (ib_check_mr_access and the device's support).
func checkMRAccess(verb string, a Access) error {
	a &^= optionalRange
	if bad := a &^ supportedMR; bad != 0 {
		return verbErr(verb, syscall.EOPNOTSUPP, "access flags %s are not supported", bad)
	}
	if a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0 {
		return verbErr(verb, syscall.EINVAL, "%s needs LOCAL_WRITE", a&(RemoteWrite|RemoteAtomic))
	}
	if a&HugeTLB != 0 && a&OnDemand == 0 {
		return verbErr(verb, syscall.EOPNOTSUPP, "HUGETLB is only a hint for ON_DEMAND registrations")
	}
	return nil
}

// checkTranslation applies reg_mr's address rules to the memory and its wire address.
func checkTranslation(verb string, spec *MRSpec) error {
	n := spec.Mem.Len()
	switch {
	case spec.Mem.implicit():
		if spec.Access&OnDemand == 0 || spec.IOVA != 0 || spec.Access&ZeroBased != 0 {
			return verbErr(verb, syscall.EINVAL, "an implicit MR (addr 0, length SIZE_MAX) needs ON_DEMAND, iova 0 and no ZERO_BASED")
		}
	case spec.Mem.onDemand() != nil && spec.Access&OnDemand == 0:
		return verbErr(verb, syscall.EINVAL, "memory paged on demand needs ON_DEMAND")
	case n == 0:
		return verbErr(verb, syscall.EINVAL, "no memory to register")
	case spec.Access&ZeroBased != 0 && spec.IOVA != 0:
		return verbErr(verb, syscall.EINVAL, "ZERO_BASED with iova 0x%x", spec.IOVA)
	case spec.IOVA > math.MaxUint64-(n-1):
		return verbErr(verb, syscall.EINVAL, "iova 0x%x + length %d wraps", spec.IOVA, n)
	}
	return nil
}

// RegMR registers memory (ibv_reg_mr, ibv_reg_mr_iova, and implicit on-demand MRs with
// Implicit memory) and returns its key: lkey and rkey are the same.
func (s *Space) RegMR(spec MRSpec) (Key, error) {
	const verb = "reg_mr"
	if err := checkMRAccess(verb, spec.Access); err != nil {
		return 0, err
	}
	if err := checkTranslation(verb, &spec); err != nil {
		return 0, err
	}
	sl := s.mrs.alloc(s.rnd)
	if sl == nil {
		return 0, verbErr(verb, syscall.ENOMEM, "all %d MR indices are in use", s.mrs.max)
	}
	sl.e = mrEntry{pd: spec.PD, access: spec.Access, state: stateValid, iova: spec.IOVA, length: spec.Mem.Len(), mem: newMemory(spec.Mem)}
	return sl.key, nil
}

// AllocFastRegMR allocates a fast-register MR (ib_alloc_mr with IB_MR_TYPE_MEM_REG) able to take
// up to maxLen bytes. It starts FREE: a REG_MR work request (FastReg) makes it VALID.
func (s *Space) AllocFastRegMR(pd PD, maxLen uint64) (Key, error) {
	const verb = "alloc_mr"
	if maxLen == 0 {
		return 0, verbErr(verb, syscall.EINVAL, "max length 0")
	}
	sl := s.mrs.alloc(s.rnd)
	if sl == nil {
		return 0, verbErr(verb, syscall.ENOMEM, "all %d MR indices are in use", s.mrs.max)
	}
	sl.e = mrEntry{pd: pd, state: stateFree, fastReg: true, maxLen: maxLen, mem: &noMemory}
	return sl.key, nil
}

// FastReg is a REG_MR work request: it gives a FREE fast-register MR memory, rights and a new
// key8. Key carries the MR's index and the new key8.
type FastReg struct {
	Key    Key
	PD     PD // the PD of the QP the request was posted on
	Mem    Memory
	IOVA   uint64
	Access Access
	At     time.Duration // when it runs, recorded with the key it replaces
}

// FastReg executes a REG_MR work request. Every failure completes with LOC_QP_OP_ERR.
func (s *Space) FastReg(req FastReg) error {
	fail := func(c Check, detail string) error {
		return &AccessError{Op: OpFastReg, Check: c, Status: StatusLocQPOpErr, Key: req.Key, Detail: detail}
	}
	sl := s.liveMR(req.Key)
	switch {
	case sl == nil:
		return fail(CheckIndex, "")
	case !sl.e.fastReg:
		return fail(CheckKind, "only MRs from alloc_mr can be fast-registered")
	case sl.e.state != stateFree:
		return fail(CheckState, "the MR must be FREE (invalidate it first)")
	case sl.e.pd != req.PD:
		return &AccessError{Op: OpFastReg, Check: CheckPD, Status: StatusLocQPOpErr, Key: req.Key, Want: uint64(req.PD), Have: uint64(sl.e.pd)}
	}
	spec := MRSpec{PD: req.PD, Mem: req.Mem, IOVA: req.IOVA, Access: req.Access}
	if err := checkMRAccess("REG_MR", req.Access); err != nil {
		return fail(CheckFlags, err.Error())
	}
	if err := checkTranslation("REG_MR", &spec); err != nil || spec.Mem.implicit() || spec.Mem.onDemand() != nil {
		return fail(CheckRange, "bad translation")
	}
	if n := req.Mem.Len(); n > sl.e.maxLen {
		return &AccessError{Op: OpFastReg, Check: CheckRange, Status: StatusLocQPOpErr, Key: req.Key, VA: req.IOVA, Len: n,
			Lo: req.IOVA, Hi: endOf(req.IOVA, sl.e.maxLen), Detail: "more memory than the MR was allocated for"}
	}
	if sl.key != req.Key {
		// The old key was already revoked by the invalidation that made the MR FREE, unless
		// the MR never had memory; that first revocation is the one worth telling.
		if sl.revoked.Key != sl.key {
			sl.revoked = Revocation{Key: sl.key, Cause: CauseFastReg, At: req.At}
		}
		sl.key = req.Key
	}
	sl.e.access, sl.e.iova, sl.e.length, sl.e.mem, sl.e.state = req.Access, req.IOVA, req.Mem.Len(), newMemory(req.Mem), stateValid
	return nil
}

// ReregFlags are ibv_rereg_mr's flags (enum ibv_rereg_mr_flags).
type ReregFlags uint32

const (
	ChangeTranslation ReregFlags = 1 << 0
	ChangePD          ReregFlags = 1 << 1
	ChangeAccess      ReregFlags = 1 << 2
)

// ReregMR changes an MR's translation, PD or access (ibv_rereg_mr); fields of spec not named by
// flags are ignored. The keys stay the same. It changes all or nothing, and fails with EBUSY while
// windows are bound to the MR.
func (s *Space) ReregMR(key Key, flags ReregFlags, spec MRSpec) error {
	const verb = "rereg_mr"
	sl := s.liveMR(key)
	switch {
	case flags == 0 || flags&^(ChangeTranslation|ChangePD|ChangeAccess) != 0:
		return verbErr(verb, syscall.EINVAL, "flags 0x%x", uint32(flags))
	case sl == nil || sl.key != key:
		return verbErr(verb, syscall.EINVAL, "no MR with key %s", key)
	case sl.e.fastReg:
		return verbErr(verb, syscall.EINVAL, "MR %s is a fast-register MR", key)
	case sl.e.numMW > 0:
		return verbErr(verb, syscall.EBUSY, "%d memory windows are bound to MR %s", sl.e.numMW, key)
	case sl.e.state != stateValid:
		return verbErr(verb, syscall.EINVAL, "MR %s lost its memory to a revocation; deregister it", key)
	}
	next := MRSpec{PD: sl.e.pd, Mem: *sl.e.mem, IOVA: sl.e.iova, Access: sl.e.access}
	if flags&ChangePD != 0 {
		next.PD = spec.PD
	}
	if flags&ChangeAccess != 0 {
		next.Access = spec.Access
	}
	if flags&ChangeTranslation != 0 {
		next.Mem, next.IOVA = spec.Mem, spec.IOVA
	}
	if err := checkMRAccess(verb, next.Access); err != nil {
		return err
	}
	if err := checkTranslation(verb, &next); err != nil {
		return err
	}
	sl.e.pd, sl.e.access, sl.e.mem, sl.e.iova, sl.e.length = next.PD, next.Access, newMemory(next.Mem), next.IOVA, next.Mem.Len()
	return nil
}

// DeregMR deregisters an MR at time at (recorded with the revoked key). It fails with EBUSY
// while memory windows are bound to it (rxe returns EINVAL; the verbs man pages say only that
// it fails) and leaves the MR untouched.
func (s *Space) DeregMR(key Key, at time.Duration) error {
	const verb = "dereg_mr"
	sl := s.liveMR(key)
	switch {
	case sl == nil || sl.key != key:
		return verbErr(verb, syscall.EINVAL, "no MR with key %s", key)
	case sl.e.numMW > 0:
		return verbErr(verb, syscall.EBUSY, "%d memory windows are bound to MR %s", sl.e.numMW, key)
	}
	s.mrs.release(sl, Revocation{Key: key, Cause: CauseDereg, At: at})
	return nil
}

// MRInfo is what QueryMR reports.
type MRInfo struct {
	Key     Key
	PD      PD
	Access  Access
	IOVA    uint64
	Length  uint64
	Valid   bool // false for a fast-register MR that is FREE
	FastReg bool
	BoundMW int
}

// QueryMR reports an MR's attributes.
func (s *Space) QueryMR(key Key) (MRInfo, error) {
	sl := s.liveMR(key)
	if sl == nil || sl.key != key {
		return MRInfo{}, verbErr("query_mr", syscall.EINVAL, "no MR with key %s", key)
	}
	e := &sl.e
	return MRInfo{Key: sl.key, PD: e.pd, Access: e.access, IOVA: e.iova, Length: e.length,
		Valid: e.state == stateValid, FastReg: e.fastReg, BoundMW: int(e.numMW)}, nil
}
