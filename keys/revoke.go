package keys

import "time"

// RevokeMRs takes away the memory of the MRs keyed by mrs because it is about to go away (a
// guest unmapping the pages they were registered over). Each MR keeps its index and key, so a
// stale key cannot meet a new MR, but is FREE, holds no reference to its memory and grants
// nothing until it is deregistered; rereg_mr refuses it. Every window bound to one of them is
// unbound: a type 1 window keeps its key with length 0, a type 2 window becomes FREE. From then
// on an access through any of them fails as any failed access does: LOC_PROT_ERR through an
// lkey, REM_ACCESS_ERR and NAK 0x62 through an rkey; a bind to such an MR fails MW_BIND_ERR.
//
// Keys that name no live MR are skipped. It returns the keys of the windows it unbound, in
// index order.
func (s *Space) RevokeMRs(mrs []Key, at time.Duration) (windows []Key) {
	var revoked map[uint32]bool // MR indices whose windows must be unbound
	bound := 0
	for _, k := range mrs {
		sl := s.liveMR(k)
		if sl == nil || sl.key != k {
			continue
		}
		if sl.e.numMW > 0 {
			if revoked == nil {
				revoked = map[uint32]bool{}
			}
			revoked[k.Index()] = true
			bound += int(sl.e.numMW)
		}
		sl.e.state, sl.e.mem, sl.e.length = stateFree, &noMemory, 0
		sl.revoked = Revocation{Key: k, Cause: CauseUnmap, At: at}
	}
	for pos := uint32(0); bound > 0 && pos < s.mws.size; pos++ {
		w := s.mws.get(s.mws.base + pos)
		if !w.live || w.e.mr == 0 || !revoked[w.e.mr] {
			continue
		}
		s.unbind(&w.e) // drops the MR's numMW
		if w.e.typ != MWType1 {
			w.e.state = stateFree
		}
		w.revoked = Revocation{Key: w.key, Cause: CauseUnmap, At: at}
		windows = append(windows, w.key)
		bound--
	}
	return windows
}
