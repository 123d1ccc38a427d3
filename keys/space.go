package keys

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
)

// Config sets up a Space.
type Config struct {
	// Rand chooses every key8 the space makes up. Give a seeded source (rand.NewPCG,
	// rand.NewChaCha8) for runs that repeat; nil gets an unpredictable one.
	Rand rand.Source
	// MaxMR and MaxMW cap the live MRs and MWs; 0 or too large means every index of the range
	// (DefaultMaxMR, DefaultMaxMW).
	MaxMR, MaxMW int
}

// Space is the STag space of one device.
type Space struct {
	rnd rand.Source
	mrs table[mrEntry]
	mws table[mwEntry]
}

type state uint8

const (
	stateFree  state = iota + 1 // allocated, grants nothing (fast-register MR before REG_MR, type 2 window unbound)
	stateValid                  // usable
)

func (s state) String() string {
	switch s {
	case stateFree:
		return "FREE"
	case stateValid:
		return "VALID"
	}
	return "INVALID"
}

type mrEntry struct {
	pd      PD
	access  Access
	state   state
	fastReg bool
	numMW   uint32
	iova    uint64
	length  uint64
	maxLen  uint64 // fast-register MRs: the most memory a REG_MR may give it
	// mem is replaced whole, never written through: a Span taken from it stays what it was
	// while a dereg, a revocation or a REG_MR gives the entry other memory.
	mem *Memory
}

type mwEntry struct {
	typ    MWType
	state  state
	pd     PD
	access Access
	qp     QPN    // type 2: the QP that bound it
	mr     uint32 // index of the MR the window is bound to; 0 when unbound
	addr   uint64 // in the MR's address space
	length uint64
}

// New makes an empty key space.
func New(cfg Config) *Space {
	rnd := cfg.Rand
	if rnd == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:]) // crypto/rand.Read never fails on Linux
		rnd = rand.NewChaCha8(seed)
	}
	maxMR, maxMW := uint32(DefaultMaxMR), uint32(DefaultMaxMW)
	if cfg.MaxMR > 0 && cfg.MaxMR < DefaultMaxMR {
		maxMR = uint32(cfg.MaxMR)
	}
	if cfg.MaxMW > 0 && cfg.MaxMW < DefaultMaxMW {
		maxMW = uint32(cfg.MaxMW)
	}
	return &Space{
		rnd: rnd,
		mrs: newTable[mrEntry](mrIndexBase, maxMR),
		mws: newTable[mwEntry](mwIndexBase, maxMW),
	}
}

// Seeded is a deterministic random source for Config.Rand.
func Seeded(seed uint64) rand.Source {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return rand.NewChaCha8(s)
}

// Counts reports the live MRs and MWs.
func (s *Space) Counts() (mrs, mws int) { return s.mrs.live, s.mws.live }

// liveMR returns the live MR slot the key's index names, whatever its key8.
func (s *Space) liveMR(k Key) *slot[mrEntry] {
	if sl := s.mrs.get(k.Index()); sl != nil && sl.live {
		return sl
	}
	return nil
}

func (s *Space) liveMW(k Key) *slot[mwEntry] {
	if sl := s.mws.get(k.Index()); sl != nil && sl.live {
		return sl
	}
	return nil
}

// KeyAt is the current key of the live MR or window at index, whatever key8 its holder last
// saw; false when nothing lives there. An engine that keeps a handle by index reads the key
// here rather than keeping a copy that a bind or REG_MR would leave stale.
func (s *Space) KeyAt(index uint32) (Key, bool) {
	if index >= indexLimit {
		return 0, false
	}
	k := makeKey(index, 0)
	if k.IsMW() {
		if sl := s.liveMW(k); sl != nil {
			return sl.key, true
		}
	} else if sl := s.liveMR(k); sl != nil {
		return sl.key, true
	}
	return 0, false
}

// revokedMR and revokedMW return how the key was revoked, if it was, for error messages.
func (s *Space) revokedMR(k Key) Revocation {
	if sl := s.mrs.get(k.Index()); sl != nil && sl.revoked.Key == k {
		return sl.revoked
	}
	return Revocation{}
}

func (s *Space) revokedMW(k Key) Revocation {
	if sl := s.mws.get(k.Index()); sl != nil && sl.revoked.Key == k {
		return sl.revoked
	}
	return Revocation{}
}

// inRange says whether [va, va+n) lies inside [base, base+length) without computing either
// end, so no sum can wrap (K5, CVE-2016-8636).
func inRange(va, n, base, length uint64) bool {
	return va >= base && n <= length && va-base <= length-n
}

// endOf is base+length for messages, saturated instead of wrapped.
func endOf(base, length uint64) uint64 {
	if base > ^uint64(0)-length {
		return ^uint64(0)
	}
	return base + length
}
