package engine_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softirdma/softirdma/emu/engine"
	"github.com/softirdma/softirdma/emu/sim"
	"github.com/softirdma/softirdma/keys"
	"github.com/softirdma/softirdma/wire"
)

const allAccess = engine.AccessLocalWrite | engine.AccessRemoteWrite | engine.AccessRemoteRead | engine.AccessRemoteAtomic | engine.AccessMWBind

// guestRAM maps regions of the given sizes at the given addresses and returns their memory.
func guestRAM(t testing.TB, regions ...[2]uint64) (*engine.GuestMemory, [][]byte) {
	t.Helper()
	gm := &engine.GuestMemory{}
	var mems [][]byte
	for _, r := range regions {
		m := make([]byte, r[1])
		must(t, gm.Map(r[0], m))
		mems = append(mems, m)
	}
	return gm, mems
}

// gather reads the bytes a page list registers, in order, straight from the address space.
func gather(t testing.TB, gm *engine.GuestMemory, pl engine.PageList) []byte {
	t.Helper()
	out := make([]byte, 0, pl.Length)
	off, left := pl.Offset, pl.Length
	for _, page := range pl.Pages {
		n := min(pl.PageSize-off, left)
		for _, seg := range gm.Segments(page+off, n, nil) {
			out = append(out, seg...)
		}
		off, left = 0, left-n
	}
	if uint64(len(out)) != pl.Length {
		t.Fatalf("gathered %d bytes, want %d", len(out), pl.Length)
	}
	return out
}

func TestGuestPageListChecks(t *testing.T) {
	p := plainPair(t)
	gm, _ := guestRAM(t, [2]uint64{0x10000, 0x4000}, [2]uint64{0x200000, 0x200000}, [2]uint64{0x30000, 100})
	for _, c := range []struct {
		name  string
		pl    engine.PageList
		errno syscall.Errno
		why   string
	}{
		{"page size not a power of two", engine.PageList{PageSize: 3 << 12, Length: 1, Pages: []uint64{0x10000}}, syscall.EINVAL, "page size"},
		{"page size below 4 KiB", engine.PageList{PageSize: 2048, Length: 1, Pages: []uint64{0x10000}}, syscall.EINVAL, "page size"},
		{"page size above 1 GiB", engine.PageList{PageSize: 1 << 31, Length: 1, Pages: []uint64{0}}, syscall.EINVAL, "page size"},
		{"offset past the first page", engine.PageList{PageSize: 4096, Offset: 4096, Length: 1, Pages: []uint64{0x10000, 0x11000}}, syscall.EINVAL, "offset"},
		{"length 0", engine.PageList{PageSize: 4096, Pages: []uint64{0x10000}}, syscall.EINVAL, "length 0"},
		{"offset+length overflows", engine.PageList{PageSize: 4096, Offset: 1, Length: math.MaxUint64, Pages: []uint64{0x10000}}, syscall.EINVAL, "overflows"},
		{"too few pages", engine.PageList{PageSize: 4096, Offset: 100, Length: 4096, Pages: []uint64{0x10000}}, syscall.EINVAL, "want 2"},
		{"too many pages", engine.PageList{PageSize: 4096, Length: 4096, Pages: []uint64{0x10000, 0x11000}}, syscall.EINVAL, "want 1"},
		{"pages for a length of 2^64-1", engine.PageList{PageSize: 1 << 30, Length: math.MaxUint64, Pages: []uint64{0}}, syscall.EINVAL, "want 17179869184"},
		{"misaligned page", engine.PageList{PageSize: 4096, Length: 8192, Pages: []uint64{0x10000, 0x11008}}, syscall.EINVAL, "page 1 at 0x11008 is not aligned"},
		{"huge page misaligned", engine.PageList{PageSize: 2 << 20, Length: 4096, Pages: []uint64{0x201000}}, syscall.EINVAL, "not aligned"},
		{"page not mapped", engine.PageList{PageSize: 4096, Length: 3 * 4096, Pages: []uint64{0x10000, 0x13000, 0x14000}}, syscall.EFAULT, "page 2 at 0x14000 is not mapped"},
		{"last page past the region", engine.PageList{PageSize: 4096, Offset: 8, Length: 4096, Pages: []uint64{0x13000, 0x14000}}, syscall.EFAULT, "page 1 at 0x14000 is not mapped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.pdB.RegGuestMR(gm, c.pl, 0x1000, allAccess)
			if !errors.Is(err, c.errno) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("got %v, want %v saying %q", err, c.errno, c.why)
			}
		})
	}
	// The last page needs only the bytes registered in it mapped.
	mr, err := p.pdB.RegGuestMR(gm, engine.PageList{PageSize: 4096, Offset: 8, Length: 92, Pages: []uint64{0x30000}}, 0, allAccess)
	must(t, err)
	if mr.Len() != 92 || mr.Addr() != 0 {
		t.Fatalf("MR at 0x%x len %d", mr.Addr(), mr.Len())
	}
	// An address space RevokeRange could not compare is refused.
	var fn funcSpace
	if _, err := p.pdB.RegGuestMR(fn, engine.PageList{PageSize: 4096, Length: 1, Pages: []uint64{0}}, 0, allAccess); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("uncomparable address space: %v", err)
	}
	if _, err := p.pdB.RegImplicitMR(nil, allAccess); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("nil address space: %v", err)
	}
}

// funcSpace is an address space of a type == cannot compare.
type funcSpace func()

func (funcSpace) Mapped(addr, n uint64) bool                     { return true }
func (funcSpace) Segments(addr, n uint64, dst [][]byte) [][]byte { return dst }

// TestGuestMRDataPaths: WRITE, READ and SEND land in and come from the right bytes of scattered,
// out-of-order guest pages, on the responder side and as local SGEs.
func TestGuestMRDataPaths(t *testing.T) {
	p := plainPair(t)
	gmB, _ := guestRAM(t, [2]uint64{0x100000, 0x10000}, [2]uint64{0x800000, 0x10000})
	plB := engine.PageList{PageSize: 4096, Offset: 100, Length: 4*4096 - 100 - 50, Pages: []uint64{0x108000, 0x800000, 0x102000, 0x80f000}}
	mrB, err := p.pdB.RegGuestMR(gmB, plB, 0x5000_0000, allAccess)
	must(t, err)
	gmA, _ := guestRAM(t, [2]uint64{0x40000, 0x20000})
	plA := engine.PageList{PageSize: 8192, Offset: 7000, Length: 3 * 8192, Pages: []uint64{0x5e000, 0x40000, 0x44000, 0x4a000}}
	mrA, err := p.pdA.RegGuestMR(gmA, plA, 0, allAccess|engine.AccessZeroBased)
	must(t, err)
	if mrB.Addr() != 0x5000_0000 || mrB.Len() != plB.Length || mrB.Buf() != nil {
		t.Fatalf("MR at 0x%x len %d", mrB.Addr(), mrB.Len())
	}

	n := uint32(plB.Length)
	fill(p.bufA[:n], 3)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 1<<20, n-1000), RemoteAddr: mrB.Addr() + 1000, RKey: mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: n - 1000})
	if got := gather(t, gmB, plB); !bytes.Equal(got, p.bufA[:n]) {
		t.Fatal("WRITE into guest pages landed wrong")
	}
	if !bytes.Equal(p.bufA[1<<20:1<<20+n-1000], p.bufA[1000:n]) {
		t.Fatal("READ from guest pages returned wrong bytes")
	}

	// A's guest MR as the source of a SEND into B's guest MR, and as the sink of a READ.
	fill(p.bufA[:plA.Length], 0)
	copyIn(t, gmA, plA, []byte(strings.Repeat("guest memory! ", 2000))[:plA.Length])
	must(t, p.qb.PostRecv(engine.RecvWR{ID: 7, SGL: sge(mrB, 200, 9000)}))
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 3, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: 5000, Length: 9000, LKey: mrA.LKey()}}},
		engine.SendWR{ID: 4, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: []engine.SGE{{Addr: 0, Length: 4000, LKey: mrA.LKey()}}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCSend}, engine.WC{WRID: 4, Opcode: engine.WCRDMARead, ByteLen: 4000})
	wantWC(t, poll(p.cqB), engine.WC{WRID: 7, Opcode: engine.WCRecv, ByteLen: 9000})
	a, b := gather(t, gmA, plA), gather(t, gmB, plB)
	if !bytes.Equal(b[200:9200], []byte(strings.Repeat("guest memory! ", 2000))[5000:14000]) {
		t.Fatal("SEND from and into guest pages landed wrong")
	}
	if !bytes.Equal(a[:4000], b[:4000]) {
		t.Fatal("READ into guest pages landed wrong")
	}
}

// copyIn writes src over the bytes a page list registers.
func copyIn(t testing.TB, gm *engine.GuestMemory, pl engine.PageList, src []byte) {
	t.Helper()
	off, left := pl.Offset, pl.Length
	for _, page := range pl.Pages {
		n := min(pl.PageSize-off, left)
		for _, seg := range gm.Segments(page+off, n, nil) {
			src = src[copy(seg, src):]
		}
		off, left = 0, left-n
	}
}

// TestGuestImplicitMR: an implicit on-demand MR reaches any mapped guest address, across
// adjacent regions, and an unmapped one is refused with NAK 0x62, also once unmapped later.
func TestGuestImplicitMR(t *testing.T) {
	p := plainPair(t)
	var pcap bytes.Buffer
	must(t, p.fab.CapturePcap(&pcap))
	gm, mems := guestRAM(t, [2]uint64{0x200000, 0x1000}, [2]uint64{0x201000, 0x3000}, [2]uint64{0x900000, 0x1000})
	mr, err := p.pdB.RegImplicitMR(gm, engine.AccessLocalWrite|engine.AccessRemoteWrite|engine.AccessRemoteRead)
	must(t, err)
	if mr.Addr() != 0 || mr.Len() != math.MaxUint64 {
		t.Fatalf("implicit MR at 0x%x len %d", mr.Addr(), mr.Len())
	}
	fill(p.bufA[:6000], 5)
	must(t, p.qa.PostSend(
		engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 6000), RemoteAddr: 0x200800, RKey: mr.RKey()},
		engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 8192, 6000), RemoteAddr: 0x200800, RKey: mr.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: 6000})
	if !bytes.Equal(append(mems[0][0x800:], mems[1][:6000-0x800]...), p.bufA[:6000]) || !bytes.Equal(p.bufA[8192:8192+6000], p.bufA[:6000]) {
		t.Fatal("WRITE/READ across adjacent regions landed wrong")
	}

	// After the region is unmapped (and revoked, which implicit MRs need nothing of), an access
	// into it is NAKed and its memory stays as it was.
	must(t, gm.Unmap(0x900000, 0x1000))
	if got := p.b.RevokeRange(gm, 0x900000, 0x1000); got != nil {
		t.Fatalf("RevokeRange revoked %d MRs, want none: implicit MRs follow the address space", len(got))
	}
	must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 64), RemoteAddr: 0x900000, RKey: mr.RKey()}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite, Status: engine.WCRemAccessErr})
	if !bytes.Equal(mems[2], make([]byte, 0x1000)) {
		t.Fatal("unmapped region written")
	}
	var naks []wire.Syndrome
	for _, f := range captureOf(t, &pcap) {
		if f.hasAET && f.syn != wire.ACKUnlimited && f.op == wire.RCAcknowledge {
			naks = append(naks, f.syn)
		}
	}
	if len(naks) != 1 || naks[0] != wire.NAKRemoteAccess {
		t.Fatalf("NAKs %v, want one NAK 0x62", naks)
	}
}

// revokeFixture is a pair whose B side has a guest MR over one region (the one revoked) and
// another over a second region (that stays), plus a window bound to the first.
type revokeFixture struct {
	*pair
	gm           *engine.GuestMemory
	victim, keep []byte
	mrV, mrK     *engine.MR
	pcap         bytes.Buffer
}

const (
	victimAt = 0x4000_0000
	keepAt   = 0x8000_0000
	regionSz = 256 << 10
)

func newRevokeFixture(t *testing.T) *revokeFixture {
	f := &revokeFixture{pair: newPair(t, 7, sim.LinkConfig{}, engine.ConnectOptions{})}
	must(t, f.fab.CapturePcap(&f.pcap))
	var mems [][]byte
	f.gm, mems = guestRAM(t, [2]uint64{victimAt, regionSz}, [2]uint64{keepAt, regionSz})
	f.victim, f.keep = mems[0], mems[1]
	var err error
	f.mrV, err = f.pdB.RegGuestMR(f.gm, contiguousPages(victimAt, regionSz), victimAt, allAccess)
	must(t, err)
	f.mrK, err = f.pdB.RegGuestMR(f.gm, contiguousPages(keepAt, regionSz), keepAt, allAccess)
	must(t, err)
	return f
}

func contiguousPages(at, n uint64) engine.PageList {
	pl := engine.PageList{PageSize: 4096, Length: n}
	for a := at; a < at+n; a += 4096 {
		pl.Pages = append(pl.Pages, a)
	}
	return pl
}

// revoke unmaps the victim region and revokes it on B, and returns a copy of it as it was.
func (f *revokeFixture) revoke(t testing.TB) []byte {
	t.Helper()
	must(t, f.gm.Unmap(victimAt, regionSz))
	got := f.b.RevokeRange(f.gm, victimAt+regionSz-4096, 4096) // one page of it suffices
	if len(got) != 1 || got[0] != f.mrV || !f.mrV.Revoked() || f.mrK.Revoked() {
		t.Fatalf("RevokeRange revoked %v, want only the victim MR", got)
	}
	return bytes.Clone(f.victim)
}

// wantOneError asserts completions are successes, then one with status, then flushes.
func wantOneError(t testing.TB, wcs []engine.WC, total int, status engine.WCStatus) (ok int) {
	t.Helper()
	if len(wcs) != total {
		t.Fatalf("%d completions, want %d: %s", len(wcs), total, fmtWC(wcs))
	}
	for ok < len(wcs) && wcs[ok].Status == engine.WCSuccess {
		ok++
	}
	// Requests still in flight when a later one fails at its start (the requester checks a
	// request's local memory before sending it) are flushed ahead of it: completions keep the
	// order of posting.
	bad := ok
	for bad < len(wcs) && wcs[bad].Status == engine.WCWRFlushErr {
		bad++
	}
	if bad == len(wcs) || wcs[bad].Status != status {
		t.Fatalf("completions %s: want successes, flushes of requests in flight, then %s", fmtWC(wcs), status)
	}
	for _, wc := range wcs[bad+1:] {
		if wc.Status != engine.WCWRFlushErr {
			t.Fatalf("after the error: %s, want WR_FLUSH_ERR", fmtWC([]engine.WC{wc}))
		}
	}
	return ok
}

// naksFrom returns the syndromes of the NAKs in a capture.
func naksOf(t testing.TB, pcap *bytes.Buffer) []wire.Syndrome {
	var naks []wire.Syndrome
	for _, f := range captureOf(t, pcap) {
		if f.op == wire.RCAcknowledge && f.hasAET && f.syn != wire.ACKUnlimited {
			naks = append(naks, f.syn)
		}
	}
	return naks
}

// TestRevokeRangeMidWriteStream: a stream of WRITEs into a guest MR whose range is revoked
// mid-stream. The WRITE in flight is NAKed 0x62 and completes REM_ACCESS_ERR, the rest flush,
// the revoked memory is not touched again, and traffic to the other region went through.
func TestRevokeRangeMidWriteStream(t *testing.T) {
	f := newRevokeFixture(t)
	const writes, size = 64, 32 << 10
	var wcs []engine.WC
	for i := range writes {
		fill(f.bufA[i*size:(i+1)*size], byte(i+1))
		target, rkey := uint64(victimAt+(i%8)*size), f.mrV.RKey()
		if i%2 == 1 {
			target, rkey = keepAt+uint64(i%8)*size, f.mrK.RKey()
		}
		must(t, f.qa.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(f.mrA, uint64(i*size), size), RemoteAddr: target, RKey: rkey}))
	}
	f.sim.RunUntil(func() bool { wcs = append(wcs, poll(f.cqA)...); return len(wcs) >= 10 })
	before := f.revoke(t)
	f.run()
	wcs = append(wcs, poll(f.cqA)...)
	ok := wantOneError(t, wcs, writes, engine.WCRemAccessErr)
	if ok < 10 || ok%2 == 1 {
		t.Fatalf("%d WRITEs succeeded; the first failure must be a WRITE to the revoked region after the 10th", ok)
	}
	if !bytes.Equal(f.victim, before) {
		t.Fatal("revoked memory changed after RevokeRange returned")
	}
	if naks := naksOf(t, &f.pcap); len(naks) != 1 || naks[0] != wire.NAKRemoteAccess {
		t.Fatalf("NAKs %v, want one NAK 0x62", naks)
	}
	if len(f.eventsLike(engine.EvNAK, "by revoke_range")) == 0 {
		t.Fatalf("no event says the rkey was revoked by revoke_range")
	}
	// The last successful WRITE to the other region landed.
	last := ok - 1
	if !bytes.Equal(f.keep[(last%8)*size:(last%8+1)*size], f.bufA[last*size:(last+1)*size]) {
		t.Fatal("WRITE to the region that stays mapped landed wrong")
	}
	// The guest can still deregister the revoked MR.
	must(t, f.mrV.Dereg())
}

// TestRevokeRangeMidReadStream: READs whose responses land in a guest MR on the requester side;
// its range is revoked mid-stream. The first READ to meet the revoked MR (its responses
// arriving, or the requester checking its memory before sending it) completes LOC_PROT_ERR,
// the rest flush, and no response byte lands in the revoked memory after RevokeRange returns.
func TestRevokeRangeMidReadStream(t *testing.T) {
	p := newPair(t, 3, sim.LinkConfig{}, engine.ConnectOptions{})
	gm, mems := guestRAM(t, [2]uint64{victimAt, regionSz})
	mr, err := p.pdA.RegGuestMR(gm, contiguousPages(victimAt, regionSz), 0, allAccess|engine.AccessZeroBased)
	must(t, err)
	const reads, size = 48, 32 << 10
	for i := range reads {
		fill(p.bufB[i*size:(i+1)*size], byte(i+1))
		must(t, p.qa.PostSend(engine.SendWR{ID: uint64(i), Opcode: engine.WRRDMARead, Flags: engine.SendSignaled,
			SGL: []engine.SGE{{Addr: uint64(i%8) * size, Length: size, LKey: mr.LKey()}}, RemoteAddr: p.mrB.Addr() + uint64(i*size), RKey: p.mrB.RKey()}))
	}
	var wcs []engine.WC
	p.sim.RunUntil(func() bool { wcs = append(wcs, poll(p.cqA)...); return len(wcs) >= 5 })
	must(t, gm.Unmap(victimAt, regionSz))
	if got := p.a.RevokeRange(gm, victimAt, 1); len(got) != 1 || got[0] != mr {
		t.Fatalf("RevokeRange revoked %v", got)
	}
	before := bytes.Clone(mems[0])
	p.run()
	wcs = append(wcs, poll(p.cqA)...)
	wantOneError(t, wcs, reads, engine.WCLocProtErr)
	if !bytes.Equal(mems[0], before) {
		t.Fatal("READ responses landed in revoked memory")
	}
	var ae *keys.AccessError
	for _, wc := range wcs {
		if wc.Status == engine.WCLocProtErr && (!errors.As(wc.Err, &ae) || ae.Check != keys.CheckState) {
			t.Fatalf("error %v, want the MR's state check", wc.Err)
		}
	}
}

// TestRevokeRangeWindowsAndSends: windows bound to a revoked MR stop granting access (NAK 0x62)
// and a receive posted over it completes LOC_PROT_ERR; revoking another range, another address
// space, or an empty range revokes nothing.
func TestRevokeRangeWindowsAndSends(t *testing.T) {
	f := newRevokeFixture(t)
	mw, err := f.pdB.AllocMW(engine.MWType1)
	must(t, err)
	must(t, f.qb.BindMW(mw, engine.MWBind{ID: 1, MR: f.mrV, Addr: victimAt + 4096, Length: 4096, Access: engine.AccessRemoteWrite}))
	f.run()
	poll(f.cqB)
	other, _ := guestRAM(t, [2]uint64{victimAt, regionSz})
	for _, c := range []struct {
		as         keys.AddressSpace
		start, len uint64
	}{{other, victimAt, regionSz}, {f.gm, victimAt + regionSz, 1 << 20}, {f.gm, victimAt, 0}, {f.gm, 0, victimAt}} {
		if got := f.b.RevokeRange(c.as, c.start, c.len); got != nil {
			t.Fatalf("RevokeRange(%p, 0x%x, %d) revoked %d MRs", c.as, c.start, c.len, len(got))
		}
	}
	// The whole address space from 0: wraps nothing, hits both MRs.
	must(t, f.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(f.mrV, 0, 64)}))
	before := f.revokeAll(t)
	must(t, f.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(f.mrA, 0, 64), RemoteAddr: victimAt + 4096, RKey: mw.RKey()}))
	f.run()
	wantWC(t, poll(f.cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite, Status: engine.WCRemAccessErr})
	info, err := f.b.QueryMW(mw)
	must(t, err)
	if info.Bound {
		t.Fatalf("window still bound: %+v", info)
	}
	if naks := naksOf(t, &f.pcap); len(naks) != 1 || naks[0] != wire.NAKRemoteAccess {
		t.Fatalf("NAKs %v, want one NAK 0x62", naks)
	}
	if !bytes.Equal(f.victim, before) {
		t.Fatal("revoked memory written through the window")
	}

	// A new connection: a SEND into the receive posted over the revoked MR.
	g := newRevokeFixture(t)
	must(t, g.qb.PostRecv(engine.RecvWR{ID: 9, SGL: sge(g.mrV, 0, 64)}))
	before = g.revoke(t)
	must(t, g.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRSend, Flags: engine.SendSignaled, SGL: sge(g.mrA, 0, 64)}))
	g.run()
	wantWC(t, poll(g.cqB), engine.WC{WRID: 9, Opcode: engine.WCRecv, Status: engine.WCLocProtErr})
	if !bytes.Equal(g.victim, before) {
		t.Fatal("SEND landed in revoked memory")
	}
}

// revokeAll revokes every byte of the address space and checks both MRs went.
func (f *revokeFixture) revokeAll(t testing.TB) []byte {
	t.Helper()
	must(t, f.gm.Unmap(victimAt, regionSz))
	got := f.b.RevokeRange(f.gm, 0, math.MaxUint64)
	if len(got) != 2 || got[0] != f.mrV || got[1] != f.mrK {
		t.Fatalf("RevokeRange revoked %v, want both MRs in key order", got)
	}
	return bytes.Clone(f.victim)
}

// TestRevokeRangeConcurrentTraffic revokes from another goroutine while the simulator runs an
// endless WRITE stream into the range (each completion posts the next WRITE), as a device model
// would on a guest's DMA unmap. Nothing writes the range after RevokeRange returns: the copy
// taken then stays equal to the memory, and under -race any later write would be a reported
// race with that copy.
func TestRevokeRangeConcurrentTraffic(t *testing.T) {
	f := newRevokeFixture(t)
	f.fab.OnEvent(nil) // the recorder is not safe for two goroutines
	const size = 16 << 10
	for i := range f.bufA[:64*size] {
		f.bufA[i] = byte(i/size + 1)
	}
	var succeeded atomic.Int64
	var revoked atomic.Bool // after it, the stream stops after at most 64 more WRITEs even if they work
	finished := make(chan []engine.WC)
	go func() {
		var wcs []engine.WC
		next, failed, after := 0, false, 0
		post := func() {
			err := f.qa.PostSend(engine.SendWR{ID: uint64(next), Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(f.mrA, uint64(next%64)*size, size),
				RemoteAddr: victimAt + uint64(next%16)*size, RKey: f.mrV.RKey()})
			if err != nil {
				t.Error(err)
				failed = true
			}
			next++
		}
		for range 16 {
			post()
		}
		for f.sim.Step() {
			for _, wc := range poll(f.cqA) {
				wcs = append(wcs, wc)
				if wc.Status != engine.WCSuccess {
					failed = true
				} else if succeeded.Add(1); !failed && after < 64 {
					if revoked.Load() {
						after++
					}
					post()
				}
			}
		}
		finished <- append(wcs, poll(f.cqA)...)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for succeeded.Load() < 200 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	before := f.revoke(t)
	revoked.Store(true)
	wcs := <-finished
	if !bytes.Equal(f.victim, before) {
		t.Fatal("revoked memory changed after RevokeRange returned")
	}
	ok := wantOneError(t, wcs, len(wcs), engine.WCRemAccessErr)
	if ok < 200 || len(wcs)-ok > 16 {
		t.Fatalf("%d WRITEs succeeded and %d failed; want at least 200, then at most 16 outstanding", ok, len(wcs)-ok)
	}
}

// A REG_MR work request over a guest's page list (a device's kernel-only fast registration):
// the MR takes the pages, a WRITE through its new key lands in them, and RevokeRange takes it
// away as it does a registered MR's.
func TestGuestFastReg(t *testing.T) {
	p := plainPair(t)
	gm, mems := guestRAM(t, [2]uint64{victimAt, regionSz})
	fr, err := p.pdB.AllocFastRegMR(regionSz)
	must(t, err)
	key := fr.LKey()&^0xff | (fr.LKey()+5)&0xff
	// Pages 3 and 1 of the region, out of order, 6000 bytes from offset 100.
	pages := engine.PageList{PageSize: 4096, Offset: 100, Length: 6000, Pages: []uint64{victimAt + 3*4096, victimAt + 4096}}
	must(t, p.qb.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRegMR, Flags: engine.SendSignaled,
		Reg: engine.RegInfo{MR: fr, Key: key, IOVA: 0x9000_0064, Access: engine.AccessLocalWrite | engine.AccessRemoteWrite, Guest: &engine.GuestPages{Space: gm, Pages: pages}}}))
	p.run()
	wantWC(t, poll(p.cqB), engine.WC{WRID: 1, Opcode: engine.WCRegMR})
	if fr.RKey() != key || fr.Addr() != 0x9000_0064 || fr.Len() != 6000 {
		t.Fatalf("MR after REG_MR: key 0x%x addr 0x%x len %d", fr.RKey(), fr.Addr(), fr.Len())
	}
	fill(p.bufA[:6000], 3)
	must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 6000), RemoteAddr: 0x9000_0064, RKey: key}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 2, Opcode: engine.WCRDMAWrite, ByteLen: 6000})
	ram := mems[0]
	if !bytes.Equal(ram[3*4096+100:4*4096], p.bufA[:4096-100]) || !bytes.Equal(ram[4096:4096+6000-(4096-100)], p.bufA[4096-100:6000]) {
		t.Fatal("the WRITE did not land in the pages the REG_MR named")
	}
	must(t, gm.Unmap(victimAt, regionSz))
	if got := p.b.RevokeRange(gm, victimAt, regionSz); len(got) != 1 || got[0] != fr {
		t.Fatalf("RevokeRange revoked %v", got)
	}
	must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 8), RemoteAddr: 0x9000_0064, RKey: key}))
	p.run()
	wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite})
}

// ReregGuest moves a guest MR to other pages: WRITEs land in them under the same key, and
// RevokeRange follows the MR there: unmapping the old pages leaves it alone, unmapping the new
// ones revokes it.
func TestGuestRereg(t *testing.T) {
	f := newRevokeFixture(t)
	moved := engine.PageList{PageSize: 4096, Offset: 8, Length: 5000, Pages: []uint64{keepAt + 4*4096, keepAt + 2*4096}}
	must(t, f.mrV.ReregGuest(keys.ChangeTranslation, nil, f.gm, moved, 0x7000_0008, 0))
	if f.mrV.Addr() != 0x7000_0008 || f.mrV.Len() != 5000 {
		t.Fatalf("after rereg: addr 0x%x len %d", f.mrV.Addr(), f.mrV.Len())
	}
	fill(f.bufA[:5000], 9)
	must(t, f.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(f.mrA, 0, 5000), RemoteAddr: 0x7000_0008, RKey: f.mrV.RKey()}))
	f.run()
	wantWC(t, poll(f.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite, ByteLen: 5000})
	if !bytes.Equal(gather(t, f.gm, moved), f.bufA[:5000]) {
		t.Fatal("the WRITE did not land in the MR's new pages")
	}
	if got := f.b.RevokeRange(f.gm, victimAt, regionSz); len(got) != 0 {
		t.Fatalf("revoking the MR's old pages revoked %v", got)
	}
	// A failed rereg (a page not mapped) leaves the MR where it was.
	bad := engine.PageList{PageSize: 4096, Length: 4096, Pages: []uint64{0x1000}}
	if err := f.mrV.ReregGuest(keys.ChangeTranslation, nil, f.gm, bad, 0x1000, 0); !errors.Is(err, syscall.EFAULT) {
		t.Fatalf("rereg onto unmapped memory: %v", err)
	}
	if got := f.b.RevokeRange(f.gm, keepAt+2*4096, 4096); len(got) != 2 || got[0] != f.mrV || got[1] != f.mrK {
		t.Fatalf("revoking the MR's new pages revoked %v, want it and the other MR of that region", got)
	}
	must(t, f.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(f.mrA, 0, 8), RemoteAddr: 0x7000_0008, RKey: f.mrV.RKey()}))
	f.run()
	wantWC(t, poll(f.cqA), engine.WC{WRID: 2, Status: engine.WCRemAccessErr, Opcode: engine.WCRDMAWrite})
}

// TestRegGuestMRAllocation: a registration keeps the page list and a few regions, so what it
// allocates beyond the list does not grow with the pages: at most 24 bytes a page (today a
// fraction of one) for 64 Ki pages, scattered or repeating, through RegGuestMR, ReregGuest and
// what a REG_MR work request resolves its list with.
func TestRegGuestMRAllocation(t *testing.T) {
	const pages, limit = 64 << 10, 24
	p := plainPair(t)
	for _, c := range []struct {
		name  string
		setup func(testing.TB, int) (*engine.GuestMemory, engine.PageList)
	}{{"scattered", scatteredGuest}, {"repeated", repeatedGuest}} {
		gm, pl := c.setup(t, pages)
		var mr *engine.MR
		reg := minAllocPerPage(pages, 5, func() {
			var err error
			mr, err = p.pdB.RegGuestMR(gm, pl, 0, allAccess)
			must(t, err)
		})
		rereg := minAllocPerPage(pages, 5, func() {
			must(t, mr.ReregGuest(keys.ChangeTranslation, nil, gm, pl, 0x1000, 0))
		})
		must(t, mr.Dereg())
		fastReg := minAllocPerPage(pages, 5, func() {
			if _, err := engine.GuestMemoryOf(gm, &pl); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: %.3f B/page to register, %.3f to rereg, %.3f for REG_MR", c.name, reg, rereg, fastReg)
		if reg > limit || rereg > limit || fastReg > limit {
			t.Errorf("%s: %.1f, %.1f and %.1f bytes a page beyond the page list, want at most %d", c.name, reg, rereg, fastReg, limit)
		}
	}
}

// plainSpace is a GuestMemory seen only as a keys.AddressSpace, without RegionAt: the
// registration's other way, a slice per run of contiguous pages.
type plainSpace struct{ gm *engine.GuestMemory }

func (s *plainSpace) Mapped(addr, n uint64) bool { return s.gm.Mapped(addr, n) }
func (s *plainSpace) Segments(addr, n uint64, dst [][]byte) [][]byte {
	return s.gm.Segments(addr, n, dst)
}

// TestGuestMRAcrossRegions: WRITE and READ through guest MRs whose pages straddle two adjacent
// regions, run on from one region into the next, jump between regions, start and end
// part-way through a page, and repeat, over a GuestMemory and over an address space without
// regions: every byte lands where the page list says.
func TestGuestMRAcrossRegions(t *testing.T) {
	layout := [][2]uint64{{0x10000, 0x2800}, {0x12800, 0x2800}, {0x40000, 0x2000}}
	// The page at 0x12000 straddles the first two regions; 0x11000 to 0x13000 run on.
	pl := engine.PageList{PageSize: 4096, Offset: 300, Length: 6*4096 - 300 - 1000,
		Pages: []uint64{0x11000, 0x12000, 0x13000, 0x41000, 0x10000, 0x14000}}
	repeat := engine.PageList{PageSize: 4096, Length: 3 * 4096, Pages: []uint64{0x41000, 0x10000, 0x41000}}
	for _, plain := range []bool{false, true} {
		p := plainPair(t)
		gmA, _ := guestRAM(t, layout...)
		gmB, _ := guestRAM(t, layout...)
		var asA, asB keys.AddressSpace = gmA, gmB
		if plain {
			asA, asB = &plainSpace{gmA}, &plainSpace{gmB}
		}
		mrA, err := p.pdA.RegGuestMR(asA, pl, 0x100, allAccess)
		must(t, err)
		mrB, err := p.pdB.RegGuestMR(asB, pl, 0x5000_0000, allAccess)
		must(t, err)
		n := uint32(pl.Length)
		fill(p.bufA[:n], 11)
		must(t, p.qa.PostSend(engine.SendWR{ID: 1, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, n), RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}))
		// B's MR, from its second byte, into A's guest MR, and back out of it a byte before
		// the page that straddles the regions.
		must(t, p.qa.PostSend(engine.SendWR{ID: 2, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(mrA, 0, n-1), RemoteAddr: mrB.Addr() + 1, RKey: mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 1, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 2, Opcode: engine.WCRDMARead, ByteLen: n - 1})
		if !bytes.Equal(gather(t, gmB, pl), p.bufA[:n]) {
			t.Fatalf("plain %v: the WRITE landed wrong", plain)
		}
		if !bytes.Equal(gather(t, gmA, pl)[:n-1], p.bufA[1:n]) {
			t.Fatalf("plain %v: the READ landed wrong", plain)
		}
		at := uint64(4096 - 300 + 0x800 - 1) // of the byte before the region boundary in the second page
		must(t, p.qa.PostSend(engine.SendWR{ID: 3, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(mrA, at, 4096), RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 3, Opcode: engine.WCRDMAWrite})
		if !bytes.Equal(p.bufB[:4096], p.bufA[at+1:at+1+4096]) {
			t.Fatalf("plain %v: a WRITE from across the region boundary sent the wrong bytes", plain)
		}

		// A page twice: the later bytes win in it, and a READ gives them back in both places.
		mrR, err := p.pdB.RegGuestMR(asB, repeat, 0x6000_0000, allAccess)
		must(t, err)
		fill(p.bufA[:3*4096], 13)
		must(t, p.qa.PostSend(
			engine.SendWR{ID: 4, Opcode: engine.WRRDMAWrite, Flags: engine.SendSignaled, SGL: sge(p.mrA, 0, 3*4096), RemoteAddr: mrR.Addr(), RKey: mrR.RKey()},
			engine.SendWR{ID: 5, Opcode: engine.WRRDMARead, Flags: engine.SendSignaled, SGL: sge(p.mrA, 1<<20, 3*4096), RemoteAddr: mrR.Addr(), RKey: mrR.RKey()}))
		p.run()
		wantWC(t, poll(p.cqA), engine.WC{WRID: 4, Opcode: engine.WCRDMAWrite}, engine.WC{WRID: 5, Opcode: engine.WCRDMARead, ByteLen: 3 * 4096})
		got, w := p.bufA[1<<20:1<<20+3*4096], p.bufA[:3*4096]
		if !bytes.Equal(got[:4096], w[8192:]) || !bytes.Equal(got[4096:8192], w[4096:8192]) || !bytes.Equal(got[8192:], w[8192:]) {
			t.Fatalf("plain %v: a repeated page holds the wrong bytes", plain)
		}
	}
}

// TestRevokeRangeExact: RevokeRange revokes exactly the MRs with a registered byte in the range:
// a range over the unregistered head of a first page or tail of a last page, or between pages,
// leaves an MR alone; one over its first or last registered byte of any page revokes it.
func TestRevokeRangeExact(t *testing.T) {
	p := plainPair(t)
	gm, _ := guestRAM(t, [2]uint64{0x100000, 0x10000}, [2]uint64{0x200000, 0x10000})
	lists := []engine.PageList{
		{PageSize: 4096, Offset: 1000, Length: 3*4096 - 1000 - 500, Pages: []uint64{0x101000, 0x205000, 0x103000}},
		{PageSize: 8192, Length: 16 << 10, Pages: []uint64{0x108000, 0x10a000}},
		{PageSize: 4096, Offset: 4000, Length: 200, Pages: []uint64{0x20c000, 0x20c000}},
	}
	// The model: each list's registered bytes, page by page.
	var pieces [][]span
	for _, pl := range lists {
		var rs []span
		off, left := pl.Offset, pl.Length
		for _, page := range pl.Pages {
			n := min(pl.PageSize-off, left)
			rs = append(rs, span{page + off, n})
			off, left = 0, left-n
		}
		pieces = append(pieces, rs)
	}
	ranges := [][2]uint64{{0, math.MaxUint64}, {0x100000, 0x20000}, {0x300000, 0x1000}}
	for _, rs := range pieces {
		for _, r := range rs {
			last := r.start + r.n - 1
			ranges = append(ranges, [2]uint64{r.start - 1, 1}, [2]uint64{r.start, 1}, [2]uint64{last, 1}, [2]uint64{last + 1, 1},
				[2]uint64{r.start - 100, 100}, [2]uint64{last + 1, 100}, [2]uint64{r.start - 100, 101}, [2]uint64{last, 100})
		}
	}
	for _, c := range ranges {
		mrs := make([]*engine.MR, len(lists))
		for i, pl := range lists {
			var err error
			mrs[i], err = p.pdB.RegGuestMR(gm, pl, 0, allAccess)
			must(t, err)
		}
		var want []*engine.MR
		for i, rs := range pieces {
			if slices.ContainsFunc(rs, func(r span) bool { return r.overlaps(c[0], c[1]) }) {
				want = append(want, mrs[i])
			}
		}
		if got := p.b.RevokeRange(gm, c[0], c[1]); !slices.Equal(got, want) {
			t.Errorf("RevokeRange(0x%x, %d) revoked %d MRs, want %d", c[0], c[1], len(got), len(want))
		}
		for i, mr := range mrs {
			if mr.Revoked() != slices.Contains(want, mr) {
				t.Errorf("RevokeRange(0x%x, %d): MR %d revoked %v", c[0], c[1], i, mr.Revoked())
			}
			must(t, mr.Dereg())
		}
	}
}

// span is the model's byte range: n bytes from start.
type span struct{ start, n uint64 }

func (r span) overlaps(start, n uint64) bool {
	return r.start <= start+(n-1) && start <= r.start+(r.n-1)
}
