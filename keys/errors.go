package keys

import (
	"fmt"
	"syscall"
	"time"

	"github.com/softirdma/softirdma/internal/names"
)

// VerbError is a failed verb (reg_mr, alloc_mw, dereg_mr ...): an errno with the reason.
// errors.Is(err, syscall.EINVAL) and friends work on it.
type VerbError struct {
	Verb   string
	Errno  syscall.Errno
	Reason string
}

func (e *VerbError) Error() string { return e.Verb + ": " + e.Errno.Error() + ": " + e.Reason }
func (e *VerbError) Unwrap() error { return e.Errno }

func verbErr(verb string, errno syscall.Errno, format string, args ...any) error {
	return &VerbError{Verb: verb, Errno: errno, Reason: fmt.Sprintf(format, args...)}
}

// Op is the kind of key use that failed an access check.
type Op uint8

const (
	OpLocal       Op = iota + 1 // an SGE naming an lkey
	OpRemote                    // a RETH or AtomicETH naming an rkey
	OpBind                      // a memory window bind
	OpLocalInv                  // a LOCAL_INV work request
	OpSendWithInv               // the IETH of an arriving SEND_WITH_INV
	OpFastReg                   // a REG_MR (fast-register) work request
)

var opNames = [...]string{"", "local access", "remote access", "bind", "LOCAL_INV", "SEND_WITH_INV", "REG_MR"}

func (o Op) String() string { return names.In(opNames[:], o, "op %d") }

// Check names the rule an access broke, in the order the checks run.
type Check uint8

const (
	CheckIndex      Check = iota + 1 // no live object has the key's index
	CheckKind                        // the key names the wrong kind of object (an MW as an lkey, a plain MR for invalidation)
	CheckKey                         // the index is live but its key8 differs
	CheckPD                          // protection domains differ
	CheckQP                          // a type 2 window is bound to another QP
	CheckLength                      // the window is unbound (length 0)
	CheckRights                      // a needed access right is missing
	CheckState                       // the object is not in the state the operation needs
	CheckRange                       // the access reaches outside the MR or window
	CheckUnmapped                    // an on-demand MR's address is not backed by memory
	CheckFlags                       // the operation asks for flags the object or device does not support
	CheckZeroBased                   // a zero-based window or MR where that is not allowed
	CheckMWBind                      // the MR lacks MW_BIND (C10-73)
	CheckLocalWrite                  // remote write or atomic rights over an MR without LOCAL_WRITE (C10-74)
	CheckBound                       // windows are still bound
	CheckMR                          // a bind names no usable MR
)

var checkNames = [...]string{"", "index", "kind", "key", "pd", "qp", "length", "rights", "state",
	"range", "unmapped", "flags", "zero-based", "mw-bind", "local-write", "bound", "mr"}

func (c Check) String() string { return names.In(checkNames[:], c, "check %d") }

// Cause says how a key stopped being valid.
type Cause uint8

const (
	CauseNone        Cause = iota
	CauseDereg             // dereg_mr
	CauseDealloc           // dealloc_mw
	CauseBind              // a type 1 bind rotated the key (a zero-length bind unbinds too)
	CauseLocalInv          // LOCAL_INV
	CauseSendWithInv       // an arriving SEND_WITH_INV
	CauseFastReg           // REG_MR gave the fast-register MR a new key8
	CauseUnmap             // the memory under the MR went away (RevokeMRs)
)

var causeNames = [...]string{"", "dereg_mr", "dealloc_mw", "a type 1 bind", "LOCAL_INV", "SEND_WITH_INV", "REG_MR", "revoke_range"}

func (c Cause) String() string { return names.In(causeNames[:], c, "cause %d") }

// Revocation records how a key was revoked: which key, by what, on which QP (for LOCAL_INV,
// SEND_WITH_INV and binds), and when. The space keeps the last one of each index, beside the
// entry, so its memory is bounded by the tables; an access through an older key of the index
// gets no record.
type Revocation struct {
	Key   Key
	Cause Cause
	QP    QPN
	// At is when, on the clock of whoever called the revoking operation: the space has no
	// clock, so each revoking call carries the time.
	At time.Duration
}

// AccessError is a failed access check. It carries what the engine needs to report it: the
// completion status, the NAK syndrome (SyndromeNone for failures reported only locally), and a
// reason a person can read.
type AccessError struct {
	Op       Op
	Check    Check
	Status   Status
	Syndrome Syndrome
	Key      Key
	VA, Len  uint64 // the access, or the bind's range

	// What the failed check compared, when it compared something: the bounds for CheckRange,
	// the PDs, QPs, rights or states for the others.
	Lo, Hi     uint64
	Want, Have uint64

	// Revoked is set when the key was valid once and was revoked.
	Revoked Revocation

	// Detail names the rule for checks that need more than their name.
	Detail string
}

func (e *AccessError) Error() string {
	s := fmt.Sprintf("%s with key %s failed check %s", e.Op, e.Key, e.Check)
	switch e.Check {
	case CheckIndex:
		s += fmt.Sprintf(": no object with index 0x%06x", e.Key.Index())
	case CheckKey:
		s += fmt.Sprintf(": current key is %s", Key(e.Have))
	case CheckPD:
		s += fmt.Sprintf(": object is in PD %d, access from PD %d", e.Have, e.Want)
	case CheckQP:
		s += fmt.Sprintf(": window is bound to QP 0x%06x, access on QP 0x%06x", e.Have, e.Want)
	case CheckLength:
		s += ": the window is not bound"
	case CheckRights:
		s += fmt.Sprintf(": needs %s, has %s", Access(e.Want), Access(e.Have))
	case CheckRange:
		s += fmt.Sprintf(": [0x%x, +%d) is outside [0x%x, 0x%x)", e.VA, e.Len, e.Lo, e.Hi)
	case CheckUnmapped:
		s += fmt.Sprintf(": [0x%x, +%d) is not mapped", e.VA, e.Len)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Revoked.Cause != CauseNone && e.Revoked.Key == e.Key {
		s += fmt.Sprintf(" (key %s was revoked by %s", e.Key, e.Revoked.Cause)
		if e.Revoked.QP != 0 {
			s += fmt.Sprintf(" on QP 0x%06x", e.Revoked.QP)
		}
		s += fmt.Sprintf(" at t=%v)", e.Revoked.At)
	}
	return s + fmt.Sprintf(" -> %s, %s", e.Status, e.Syndrome)
}
