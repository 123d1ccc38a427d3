package engine

import (
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"syscall"

	"github.com/softirdma/softirdma/keys"
)

// Guest memory: MRs a device model registers for a guest, over an address space (the guest's
// RAM as the device sees it, keys.AddressSpace; GuestMemory is one), and their revocation when
// part of that address space goes away.

// Page sizes a PageList may use: 4 KiB pages up to 1 GiB huge pages.
const (
	MinPageSize = 1 << 12
	MaxPageSize = 1 << 30
)

// PageList is memory to register as a guest describes it: the guest-physical address of each
// page, in order, and where the registered bytes begin and how many there are. It comes from
// the guest, so RegGuestMR checks all of it.
//
// A registration keeps Pages itself, not a copy (a copy would double what a large MR costs):
// once RegGuestMR, ReregGuest or a REG_MR work request is given a list, the caller must not
// change its Pages.
type PageList struct {
	PageSize uint64   // a power of two from MinPageSize to MaxPageSize
	Offset   uint64   // of the first registered byte in the first page; below PageSize
	Length   uint64   // registered bytes; at least one
	Pages    []uint64 // PageSize-aligned, exactly as many as Offset+Length bytes need
}

// guestRange is n bytes of an address space from start; n > 0 and start+n-1 does not wrap.
type guestRange struct{ start, n uint64 }

func (r guestRange) overlaps(start, n uint64) bool {
	return r.start <= start+(n-1) && start <= r.start+(r.n-1)
}

// checkSize refuses a page size outside the ones a guest's list may use; keys.CheckPages, which
// keys.Paged runs, checks the rest of the list.
func (pl *PageList) checkSize() error {
	if ps := pl.PageSize; ps < MinPageSize || ps > MaxPageSize || bits.OnesCount64(ps) != 1 {
		return &keys.VerbError{Verb: "reg_mr", Errno: syscall.EINVAL,
			Reason: fmt.Sprintf("page list: page size %d is not a power of two from %d to %d", ps, MinPageSize, MaxPageSize)}
	}
	return nil
}

// pieces calls f with the address range of each page's registered bytes, in order, until f
// returns false. The list is checked.
func (pl *PageList) pieces(f func(r guestRange) bool) {
	off, left := pl.Offset, pl.Length
	for _, page := range pl.Pages {
		// An aligned page ends at or before 2^64, so page+off+k-1 cannot wrap.
		k := min(pl.PageSize-off, left)
		if !f(guestRange{page + off, k}) {
			return
		}
		off, left = 0, left-k
	}
}

// overlaps says whether a registered byte of the checked list lies in [start, start+n); n > 0
// and the range does not wrap. It walks the pages: a list is kept, its ranges are not.
func (pl *PageList) overlaps(start, n uint64) bool {
	hit := false
	pl.pieces(func(r guestRange) bool {
		hit = r.overlaps(start, n)
		return !hit
	})
	return hit
}

// guestMapping is where a guest MR's memory lies in its address space.
type guestMapping struct {
	as       keys.AddressSpace
	implicit bool     // the whole address space; nothing to revoke, see RevokeRange
	onDemand bool     // pages mapped as they fault (RegOnDemandMR): RevokeRange unmaps them
	pages    PageList // for an MR from a page list: checked, and shared with the caller
	revoked  bool
}

// checkSpace refuses a nil address space (a nil pointer of a type that implements it, too:
// its methods would have nothing to look in) and one RevokeRange could not find again: it is
// compared with ==.
func checkSpace(as keys.AddressSpace) error {
	if as == nil {
		return &keys.VerbError{Verb: "reg_mr", Errno: syscall.EINVAL, Reason: "address space <nil> is nil"}
	}
	if v := reflect.ValueOf(as); v.Kind() == reflect.Pointer && v.IsNil() {
		return &keys.VerbError{Verb: "reg_mr", Errno: syscall.EINVAL, Reason: fmt.Sprintf("address space %T is nil", as)}
	}
	if !reflect.TypeOf(as).Comparable() {
		return &keys.VerbError{Verb: "reg_mr", Errno: syscall.EINVAL, Reason: fmt.Sprintf("address space %T is not comparable (use a pointer)", as)}
	}
	return nil
}

// RegGuestMR registers the memory a guest's page list names in the address space as, with
// iova the wire address of its first byte (ibv_reg_mr_iova's; 0 with ZERO_BASED), as a
// device registers a guest's MR. Every registered byte must be mapped in as when it is called
// (EFAULT names the first page that is not); the MR then holds the address space's slices for
// those pages until it is deregistered or RevokeRange takes them away. Its Buf is nil.
//
// The MR keeps pages.Pages, not a copy: the caller must not change it afterwards. Over an
// address space that implements keys.RegionSpace (GuestMemory does) the MR costs a few
// regions beyond that list, whatever the number of pages.
func (pd *PD) RegGuestMR(as keys.AddressSpace, pages PageList, iova uint64, access Access) (*MR, error) {
	if err := pd.check("reg_mr"); err != nil {
		return nil, err
	}
	if err := checkSpace(as); err != nil {
		return nil, err
	}
	if err := pages.checkSize(); err != nil {
		return nil, err
	}
	d := pd.dev
	// Resolved under the tables lock, so a RevokeRange either comes first (and the unmapped
	// pages fail here) or finds this MR.
	defer hold(d, &d.tab).release()
	mem, guest, err := resolveGuest(as, &pages)
	if err != nil {
		return nil, err
	}
	k, err := d.keys.RegMR(keys.MRSpec{PD: pd.handle, Mem: mem, IOVA: iova, Access: access})
	if err != nil {
		return nil, err
	}
	d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("reg_mr %s guest pages %d len %d iova 0x%x %s", k, len(pages.Pages), pages.Length, iova, access)})
	mr := &MR{pd: pd, key: k, addr: iova, length: pages.Length, guest: guest}
	d.mrs = put(d.mrs, k.Index(), mr)
	return mr, nil
}

// ReregGuest is Rereg for a device's MR: with keys.ChangeTranslation the MR takes the memory
// pages names in as, iova the wire address of its first byte, on the terms of RegGuestMR
// (it keeps pages.Pages).
func (mr *MR) ReregGuest(flags keys.ReregFlags, pd *PD, as keys.AddressSpace, pages PageList, iova uint64, access Access) error {
	return mr.rereg(flags, pd, access, func() (translation, error) {
		mem, guest, err := guestMemory(as, &pages)
		if err != nil {
			return translation{}, err
		}
		return translation{mem: mem, iova: iova, guest: guest}, nil
	})
}

// guestMemory checks a guest's page list and resolves it through as (the tables lock held), for
// a REG_MR work request: the MR's memory and what RevokeRange needs to find it. Both keep
// pages.Pages.
func guestMemory(as keys.AddressSpace, pages *PageList) (keys.Memory, *guestMapping, error) {
	if err := checkSpace(as); err != nil {
		return keys.Memory{}, nil, err
	}
	if err := pages.checkSize(); err != nil {
		return keys.Memory{}, nil, err
	}
	return resolveGuest(as, pages)
}

// resolveGuest gives the memory a page list whose page size is checked names in as: keys.Paged
// checks the rest of the list (EINVAL), and every byte must be mapped (EFAULT names the first
// page that is not).
func resolveGuest(as keys.AddressSpace, pages *PageList) (keys.Memory, *guestMapping, error) {
	mem, err := keys.Paged(as, pages.PageSize, pages.Offset, pages.Length, pages.Pages)
	if err != nil {
		return keys.Memory{}, nil, err
	}
	return mem, &guestMapping{as: as, pages: *pages}, nil
}

// RegImplicitMR registers the whole address space as an implicit on-demand MR (ibv_reg_mr with
// addr 0, length SIZE_MAX and ON_DEMAND, which it adds to access): wire addresses are addresses
// of as, each access is resolved through as when it happens, and one to an address as does not
// map fails (LOC_PROT_ERR through the lkey, REM_ACCESS_ERR and NAK 0x62 through the rkey). Its
// Addr is 0, its Len 2^64-1 and its Buf nil.
func (pd *PD) RegImplicitMR(as keys.AddressSpace, access Access) (*MR, error) {
	return pd.regOverSpace(as, keys.Implicit(as), 0, math.MaxUint64, access, guestMapping{as: as, implicit: true}, "implicit")
}

// regOverSpace registers mem, memory reached through the address space as, as an on-demand MR
// of length bytes from iova (ON_DEMAND added to access), where g says how; what describes it in
// the event. RegImplicitMR's and RegOnDemandMR's common path.
func (pd *PD) regOverSpace(as keys.AddressSpace, mem keys.Memory, iova, length uint64, access Access, g guestMapping, what string) (*MR, error) {
	if err := pd.check("reg_mr"); err != nil {
		return nil, err
	}
	if err := checkSpace(as); err != nil {
		return nil, err
	}
	d := pd.dev
	defer hold(d, &d.tab).release()
	access |= AccessOnDemand
	k, err := d.keys.RegMR(keys.MRSpec{PD: pd.handle, Mem: mem, IOVA: iova, Access: access})
	if err != nil {
		return nil, err
	}
	d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("reg_mr %s %s %s", k, what, access)})
	mr := &MR{pd: pd, key: k, addr: iova, length: length, guest: &g}
	if g.onDemand {
		d.onDemand.Store(true)
	}
	d.mrs = put(d.mrs, k.Index(), mr)
	return mr, nil
}

// RevokeRange stops every use of [start, start+length) of the address space as by the device,
// before that memory goes away: each MR registered with RegGuestMR over as that has a byte in
// the range loses its memory (keys.Space.RevokeMRs), and so does every memory window bound to
// one. It returns those MRs, in key order.
//
// A revoked MR keeps its keys and stays allocated, so a guest's later dereg_mr succeeds and a
// stale key never reaches another MR, but it grants nothing: an access through its lkey fails
// LOC_PROT_ERR and through its rkey, or a window that was bound to it, REM_ACCESS_ERR with NAK
// 0x62, exactly as after dereg_mr. A work request in flight over it completes in that error at
// its next packet (the engine looks keys up for every packet), and the QP goes to ERR as with
// any access error; a bind to it fails MW_BIND_ERR; Rereg refuses it. MRs over other ranges
// and address spaces carry on.
//
// Implicit MRs (RegImplicitMR) hold no pages: they resolve every access through as, so they stop
// reaching the range as soon as as stops mapping it. The order that makes the range safe to free
// is therefore: unmap it from as, call RevokeRange (on every device using as), then free it.
//
// After RevokeRange returns, no access of this device touches the range: the engine pins an MR
// with each lookup that finds its memory, until the copy is done, and RevokeRange, once the
// MRs are revoked (and no lookup finds the range through them), waits for the copies in flight
// over them, and over the implicit MRs of as.
func (d *Device) RevokeRange(as keys.AddressSpace, start, length uint64) []*MR {
	if length == 0 || as == nil {
		return nil
	}
	if length-1 > math.MaxUint64-start {
		length = math.MaxUint64 - start + 1 // the range ends at the top of the space at most
	}
	defer d.flush()
	hit, implicit := d.revoke(as, start, length)
	for _, mr := range hit {
		mr.drain()
	}
	for _, mr := range implicit {
		mr.drain()
	}
	return hit
}

// revoke is RevokeRange's change to the key space: it returns the MRs it revoked, in key order,
// and the implicit MRs over as, whose copies under way may touch the range too.
func (d *Device) revoke(as keys.AddressSpace, start, length uint64) (hit, implicit []*MR) {
	d.tab.Lock()
	defer d.tab.Unlock()
	for _, mr := range d.mrs {
		g := mr.guest
		switch {
		case g == nil || g.revoked || g.as != as:
		case g.implicit:
			implicit = append(implicit, mr)
		case g.onDemand:
			// Its pages in the range are unmapped, not the MR revoked: a later access faults
			// and asks its driver again, as after an invalidation.
			if n, _ := d.keys.UnmapBacking(mr.key, start, length); n > 0 {
				implicit = append(implicit, mr)
			}
		case g.pages.overlaps(start, length):
			hit = append(hit, mr)
		}
	}
	if len(hit) == 0 {
		return nil, implicit
	}
	// Map order is random; revoking in key order keeps events and a simulated run repeatable.
	slices.SortFunc(hit, func(a, b *MR) int { return int(a.key.Index()) - int(b.key.Index()) })
	ks := make([]keys.Key, len(hit))
	for i, mr := range hit {
		ks[i] = mr.key
		mr.guest.revoked = true
	}
	windows := d.keys.RevokeMRs(ks, d.clock.Now())
	for _, k := range ks {
		d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("revoke_range [0x%x, +%d) revokes MR %s", start, length, k)})
	}
	for _, k := range windows {
		d.event(Event{Kind: EvKey, Key: uint32(k), Msg: fmt.Sprintf("revoke_range unbinds window %s", k)})
	}
	return hit, implicit
}

// Revoked says whether RevokeRange took the MR's memory away.
func (mr *MR) Revoked() bool {
	d := mr.pd.dev
	defer hold(d, &d.tab).release()
	return mr.guest != nil && mr.guest.revoked
}
