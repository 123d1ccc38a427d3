// Package keys owns the STag space of one softirdma device: memory regions (MRs, including
// fast-register and on-demand ones), memory windows of type 1, 2A and 2B, the 32-bit keys that
// name them, binding with key rotation, invalidation, and the one access check that every local
// (lkey) and remote (rkey) access goes through.
//
// A key is index<<8 | key8. MR and MW indices live in disjoint ranges, so a key alone says which
// table it names and an MR can never be read as an MW. Every reuse of an index and every bind
// gives a new key8, so a revoked key stays revoked until its index comes back with another key8.
//
// The package is pure: no I/O, no clock, no goroutines, no locks. Randomness comes in through
// Config.Rand, and the time of each revocation (kept for error messages) with the call that
// revokes. A Space is not safe for concurrent use; the engine that owns it serialises access.
package keys

import "fmt"

// Key is an STag: an L_Key or R_Key. The index picks the table entry; the low byte (key8) must
// match the entry's current key exactly.
type Key uint32

// Index is the table index the key names (24 bits).
func (k Key) Index() uint32 { return uint32(k) >> 8 }

// Key8 is the variant byte that rotates on reuse and rebinding.
func (k Key) Key8() uint8 { return uint8(k) }

// WithKey8 returns the key with the same index and the given key8.
func (k Key) WithKey8(key8 uint8) Key { return k&^0xff | Key(key8) }

// Inc is ibv_inc_rkey: key8 + 1, wrapping, index unchanged.
func (k Key) Inc() Key { return k.WithKey8(k.Key8() + 1) }

// IsMW says whether the key's index lies in the memory-window range.
func (k Key) IsMW() bool { return k.Index() >= mwIndexBase }

func (k Key) String() string { return fmt.Sprintf("0x%08x", uint32(k)) }

func makeKey(index uint32, key8 uint8) Key { return Key(index<<8 | uint32(key8)) }

// PD identifies a protection domain. keys does not own PDs; it compares them.
type PD uint32

// QPN is a 24-bit queue pair number.
type QPN uint32

// Access holds access flags with the numeric values of libibverbs' enum ibv_access_flags.
type Access uint32

const (
	LocalWrite      Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite     Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	RemoteRead      Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	RemoteAtomic    Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	MWBind          Access = 1 << 4 // IBV_ACCESS_MW_BIND
	ZeroBased       Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	OnDemand        Access = 1 << 6 // IBV_ACCESS_ON_DEMAND
	HugeTLB         Access = 1 << 7 // IBV_ACCESS_HUGETLB
	FlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	FlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT
	// RelaxedOrdering is the first of libibverbs' optional flags (IBV_ACCESS_OPTIONAL_FIRST).
	// Optional flags are hints a device may ignore, so they are accepted and ignored.
	RelaxedOrdering Access = 1 << 20
	optionalRange   Access = (1<<10 - 1) << 20 // IBV_ACCESS_OPTIONAL_RANGE
)

var accessNames = []struct {
	a    Access
	name string
}{
	{LocalWrite, "LOCAL_WRITE"}, {RemoteWrite, "REMOTE_WRITE"}, {RemoteRead, "REMOTE_READ"},
	{RemoteAtomic, "REMOTE_ATOMIC"}, {MWBind, "MW_BIND"}, {ZeroBased, "ZERO_BASED"},
	{OnDemand, "ON_DEMAND"}, {HugeTLB, "HUGETLB"}, {FlushGlobal, "FLUSH_GLOBAL"},
	{FlushPersistent, "FLUSH_PERSISTENT"}, {RelaxedOrdering, "RELAXED_ORDERING"},
}

// String lists the flags by their libibverbs names, "LOCAL_WRITE|REMOTE_READ"; unnamed bits
// are shown in hex.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	s := ""
	for _, n := range accessNames {
		if a&n.a != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
			a &^= n.a
		}
	}
	if a != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("0x%x", uint32(a))
	}
	return s
}

// MWType is a memory window type. MWType1 and MWType2 have libibverbs' values (IBV_MW_TYPE_1,
// IBV_MW_TYPE_2); type 2 behaves as 2B (tied to PD and QP), as in rxe and irdma. MWType2A is
// softirdma's extension: a type 2 window tied to the binding QP only.
type MWType uint8

const (
	MWType1  MWType = 1
	MWType2  MWType = 2
	MWType2B        = MWType2
	MWType2A MWType = 0x2a
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2B"
	case MWType2A:
		return "type 2A"
	}
	return fmt.Sprintf("type %d", uint8(t))
}

// Status is the work completion status a failed check completes with. Only the statuses key
// checks produce are named here, with libibverbs' numbers (enum ibv_wc_status) and the
// reference's assignment of status to check; the engine owns the full enum (emu.WCStatus),
// takes these five from here, and converts one to the other by number.
type Status uint8

const (
	StatusLocQPOpErr   Status = 2  // a failed LOCAL_INV or REG_MR
	StatusLocProtErr   Status = 4  // an SGE whose lkey fails its check
	StatusMWBindErr    Status = 6  // a failed bind
	StatusRemInvReqErr Status = 9  // a SEND_WITH_INV whose invalidation fails
	StatusRemAccessErr Status = 10 // an rkey that fails its check
)

// String is the libibverbs name without the IBV_WC_ prefix.
func (s Status) String() string {
	switch s {
	case StatusLocQPOpErr:
		return "LOC_QP_OP_ERR"
	case StatusLocProtErr:
		return "LOC_PROT_ERR"
	case StatusMWBindErr:
		return "MW_BIND_ERR"
	case StatusRemInvReqErr:
		return "REM_INV_REQ_ERR"
	case StatusRemAccessErr:
		return "REM_ACCESS_ERR"
	}
	return fmt.Sprintf("STATUS_%d", uint8(s))
}

// Syndrome is an AETH syndrome byte. Only the NAK codes an access check can produce are named
// here; the wire package owns the full encoding.
type Syndrome uint8

const (
	SyndromeNone          Syndrome = 0    // no NAK: the failure is reported locally only
	SyndromeInvalidReq    Syndrome = 0x61 // NAK: invalid request
	SyndromeRemoteAccess  Syndrome = 0x62 // NAK: remote access error
	SyndromeRemoteOpError Syndrome = 0x63 // NAK: remote operational error
)

func (s Syndrome) String() string {
	switch s {
	case SyndromeNone:
		return "no NAK"
	case SyndromeInvalidReq:
		return "NAK 0x61 invalid request"
	case SyndromeRemoteAccess:
		return "NAK 0x62 remote access error"
	case SyndromeRemoteOpError:
		return "NAK 0x63 remote operational error"
	}
	return fmt.Sprintf("0x%02x", uint8(s))
}
