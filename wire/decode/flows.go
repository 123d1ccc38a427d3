package decode

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/softirdma/softirdma/wire"
)

// An RC connection joins two queue pairs, (A, qa) and (B, qb). Every frame from A to B carries qb
// as its destination QP, requests and acknowledgements alike, and every frame from B to A carries
// qa; the BTH never names the sender's QP. So the decoder first keeps one Direction per (source,
// destination, destination QP), then pairs the two directions of a connection:
//   - by the UDP source port, when the peers are rxe: rxe derives it from both QP numbers, so
//     both directions carry the same port and it matches their two destination QPs;
//   - otherwise when a response (ACK, READ response, atomic ACK) on one direction carries a PSN that
//     only one candidate reverse direction has sent a request with;
//   - otherwise when only one reverse direction between the two addresses is unpaired.
// Responses only update the requester's state (outstanding READs and atomics, RNR waits) once the
// directions are paired.

// Direction is the traffic one side of an RC connection sends: its requests, and the responses
// it returns for the other side's requests.
type Direction struct {
	Src     netip.Addr `json:"src"`
	Dst     netip.Addr `json:"dst"`
	DestQP  uint32     `json:"dest_qp"`
	SrcPort uint16     `json:"sport"`

	Packets   int `json:"packets"`
	Bytes     int `json:"bytes"`
	Requests  int `json:"requests"`
	Responses int `json:"responses"`
	// Messages counts request messages: the last or only packet of a SEND or WRITE, each READ
	// request, each atomic, FLUSH and ATOMIC_WRITE.
	Messages int `json:"messages"`
	// FirstPSN and LastPSN bound the request PSNs sent (LastPSN is the furthest, with wrap).
	FirstPSN uint32 `json:"first_psn"`
	LastPSN  uint32 `json:"last_psn"`
	// Retransmits are requests whose PSN was not beyond the furthest already sent: go-back-N
	// resends after a NAK or timeout, and duplicates.
	Retransmits int `json:"retransmits"`
	// Gaps are requests that skipped PSNs the sender should have used; MissingPSNs is how many.
	Gaps        int `json:"gaps"`
	MissingPSNs int `json:"missing_psns"`
	// DupACKs are ACKs that acknowledge nothing new: the responder re-ACKing a duplicate.
	DupACKs int `json:"dup_acks"`
	// Restarts are PSN jumps larger than any send window (psnWindow): a new QP reusing the
	// number, or a reset QP. PSN tracking starts over at each.
	Restarts int `json:"restarts"`
	// NAKs this side sent as responder, by kind (NAK_PSN_SEQ_ERR, NAK_INV_REQ, ..., RNR).
	NAKs map[string]int `json:"naks,omitempty"`
	// RNRWaitAdvertised is the sum of the RNR timers this side's RNR NAKs asked for;
	// RNRWaitObserved is how long the other side actually waited before resending.
	RNRWaitAdvertised time.Duration `json:"rnr_wait_advertised_ns"`
	RNRWaitObserved   time.Duration `json:"rnr_wait_observed_ns"`
	// OutstandingReads and OutstandingAtomics are this side's requests still unanswered at the end.
	OutstandingReads   int `json:"outstanding_reads"`
	OutstandingAtomics int `json:"outstanding_atomics"`
	ICRCBad            int `json:"icrc_bad"`
	// RKeys are the remote keys this side's requests used, in order of first use.
	RKeys []*RKeyUse `json:"rkeys,omitempty"`

	started  bool
	expMin   uint32 // the next new request PSN is expected in [expMin, expMax]
	expMax   uint32
	lastAck  uint32
	lastMSN  uint32
	hasAck   bool
	reads    []uint32 // PSNs of READ requests without their last response yet
	atomics  []uint32
	rnr      map[uint32]time.Time // PSN -> when the peer RNR-NAKed it
	rkeys    map[uint32]*RKeyUse
	peer     *Direction
	conn     *Conn
	reqPSNs  psnSet
	lastSeen time.Time
}

// RKeyUse is one remote key and when requests used it.
type RKeyUse struct {
	RKey  uint32    `json:"rkey"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	Uses  int       `json:"uses"`
	Ops   []string  `json:"ops"`
}

// Conn is one RC connection: one direction, or both once paired.
type Conn struct {
	A *Direction `json:"a"`
	B *Direction `json:"b,omitempty"`
}

// Flows accumulates RC connection statistics frame by frame.
type Flows struct {
	dirs  map[dirKey]*Direction
	conns []*Conn
	// mtu is the path MTU learned from FIRST and MIDDLE packets (which carry exactly one MTU);
	// 0 until one is seen. It tells how many PSNs a READ request uses.
	mtu int
}

type dirKey struct {
	src, dst netip.Addr
	qp       uint32
}

// NewFlows returns an empty accumulator.
func NewFlows() *Flows { return &Flows{dirs: map[dirKey]*Direction{}} }

// Add accounts one parsed RC frame (UC, UD and CNP frames are ignored). icrcOK false means the
// receiver would drop it: it is counted, but its PSN is not trusted.
func (fl *Flows) Add(f *wire.Frame, ts time.Time, wireLen int, icrcOK bool) {
	if f.Info == nil || f.Info.Transport != wire.RC {
		return
	}
	h := f.BTH
	k := dirKey{f.SrcIP(), f.DstIP(), h.DestQP()}
	d := fl.dirs[k]
	if d == nil {
		d = &Direction{Src: k.src, Dst: k.dst, DestQP: k.qp, SrcPort: f.SrcPort(),
			NAKs: map[string]int{}, rnr: map[uint32]time.Time{}, rkeys: map[uint32]*RKeyUse{}}
		fl.dirs[k] = d
		c := &Conn{A: d}
		d.conn = c
		fl.conns = append(fl.conns, c)
		fl.pairByPort(d)
	}
	d.Packets++
	d.Bytes += wireLen
	d.lastSeen = ts
	if !icrcOK {
		d.ICRCBad++
		return
	}
	psn := h.PSN()
	info := f.Info
	if (info.Class == wire.First || info.Class == wire.Middle) && len(f.Payload) > fl.mtu {
		fl.mtu = len(f.Payload)
	}
	if info.Response {
		d.Responses++
		if d.peer == nil {
			fl.pairByPSN(d, psn)
		}
		fl.response(d, f, psn, ts)
		return
	}
	d.Requests++
	d.request(f, psn, ts, fl.mtu)
}

func (d *Direction) request(f *wire.Frame, psn uint32, ts time.Time, mtu int) {
	info := f.Info
	if t, ok := d.rnr[psn]; ok {
		d.peerRNRObserved(ts.Sub(t))
		delete(d.rnr, psn)
	}
	d.reqPSNs.add(psn)
	switch {
	case !d.started:
		d.started = true
		d.FirstPSN, d.LastPSN = psn, psn
	case psnDiff(psn, d.expMin) < -psnWindow || psnDiff(psn, d.expMax) > psnWindow:
		// Too far to be a resend or a loss: the QP number was reused (a capture of several runs)
		// or the QP was reset. Start over rather than count thousands of retransmissions.
		d.Restarts++
		d.hasAck = false
	case psnLess(psn, d.expMin):
		d.Retransmits++
		d.useRKey(f, ts)
		return
	case psnLess(d.expMax, psn):
		d.Gaps++
		d.MissingPSNs += int(psnDiff(psn, d.expMax))
	}
	d.LastPSN = psn
	d.expMin, d.expMax = (psn+1)&wire.PSNMask, (psn+1)&wire.PSNMask
	op := f.Opcode
	switch {
	case op == wire.RCReadRequest:
		d.reads = append(d.reads, psn)
		// A READ uses one PSN per response packet: ceil(len/MTU), at least one. Before the MTU is
		// known, accept anything an IB MTU (256..4096) allows.
		n := uint32(f.RETH.DMALen())
		lo, hi := readSpan(n, 4096), readSpan(n, 256)
		if mtu > 0 {
			lo = readSpan(n, uint32(mtu))
			hi = lo
		}
		d.expMin, d.expMax = (psn+lo)&wire.PSNMask, (psn+hi)&wire.PSNMask
	case op == wire.RCCompareSwap || op == wire.RCFetchAdd:
		d.atomics = append(d.atomics, psn)
	}
	if info.Class == wire.Last || info.Class == wire.Only {
		d.Messages++
	}
	d.useRKey(f, ts)
}

func readSpan(n, mtu uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// peerRNRObserved credits the responder (the peer) with how long this requester waited.
func (d *Direction) peerRNRObserved(w time.Duration) {
	if d.peer != nil {
		d.peer.RNRWaitObserved += w
	}
}

func (d *Direction) useRKey(f *wire.Frame, ts time.Time) {
	var key uint32
	var op string
	switch {
	case f.AtomicETH != nil:
		key, op = f.AtomicETH.RKey(), "ATOMIC"
	case f.IETH != nil:
		key, op = f.IETH.RKey(), "INVALIDATE"
	case f.RETH != nil:
		key = f.RETH.RKey()
		switch f.Opcode {
		case wire.RCReadRequest:
			op = "READ"
		case wire.RCFlush:
			op = "FLUSH"
		case wire.RCAtomicWrite:
			op = "ATOMIC_WRITE"
		default:
			op = "WRITE"
		}
	default:
		return
	}
	u := d.rkeys[key]
	if u == nil {
		u = &RKeyUse{RKey: key, First: ts}
		d.rkeys[key] = u
		d.RKeys = append(d.RKeys, u)
	}
	u.Last = ts
	u.Uses++
	for _, o := range u.Ops {
		if o == op {
			return
		}
	}
	u.Ops = append(u.Ops, op)
}

// response accounts a response d carries for its peer's requests.
func (fl *Flows) response(d *Direction, f *wire.Frame, psn uint32, ts time.Time) {
	req := d.peer
	if f.AETH != nil {
		s := f.AETH.Syndrome()
		switch s.Type() {
		case wire.SyndromeACK:
			if f.Opcode == wire.RCAcknowledge {
				// The MSN only grows on a QP; one going backwards means a new QP with the same
				// number. Otherwise an ACK that acknowledges no new PSN is a re-ACK of a duplicate.
				msn := f.AETH.MSN()
				switch {
				case d.hasAck && psnLess(msn, d.lastMSN):
					d.Restarts++
				case d.hasAck && !psnLess(d.lastAck, psn):
					d.DupACKs++
				}
				d.lastAck, d.lastMSN, d.hasAck = psn, msn, true
			}
		case wire.SyndromeRNR:
			d.NAKs["RNR"]++
			d.RNRWaitAdvertised += time.Duration(wire.RNRTimerMicros(s.Value())) * time.Microsecond
			if req != nil {
				req.rnr[psn] = ts
			}
		default:
			d.NAKs[s.Name()]++
			if req != nil {
				// A NAK completes the request it names, in error.
				req.reads = removePSN(req.reads, psn)
				req.atomics = removePSN(req.atomics, psn)
			}
		}
	}
	if req == nil {
		return
	}
	switch f.Opcode {
	case wire.RCReadResponseLast, wire.RCReadResponseOnly:
		// The READ this answers is the latest one sent at or before this PSN.
		best, found := -1, false
		for i, p := range req.reads {
			if !psnLess(psn, p) && (!found || psnLess(req.reads[best], p)) {
				best, found = i, true
			}
		}
		if found {
			req.reads = append(req.reads[:best], req.reads[best+1:]...)
		}
	case wire.RCAtomicAcknowledge:
		req.atomics = removePSN(req.atomics, psn)
	}
}

func removePSN(s []uint32, psn uint32) []uint32 {
	for i, p := range s {
		if p == psn {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// rxeSrcPort is the UDP source port Linux rxe uses on an RC QP: the IB flow label of the two QP
// numbers (rdma_calc_flow_label: their product, folded) compressed to 14 bits above 0xC000
// (rdma_get_udp_sport). It is the same in both directions of a connection.
func rxeSrcPort(lqpn, rqpn uint32) uint16 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	fl := uint32(v) & 0xFFFFF
	return uint16(0xC000 | (fl&0x3FFF ^ fl>>14))
}

func (fl *Flows) pair(a, b *Direction) {
	a.peer, b.peer = b, a
	// Keep a's connection and drop b's.
	c := a.conn
	c.B = b
	old := b.conn
	b.conn = c
	for i, x := range fl.conns {
		if x == old {
			fl.conns = append(fl.conns[:i], fl.conns[i+1:]...)
			break
		}
	}
}

// candidates are the unpaired directions going the other way between d's addresses.
func (fl *Flows) candidates(d *Direction) []*Direction {
	var out []*Direction
	for _, c := range fl.conns {
		e := c.A
		if c.B == nil && e != d && e.Src == d.Dst && e.Dst == d.Src {
			out = append(out, e)
		}
	}
	return out
}

func (fl *Flows) pairByPort(d *Direction) {
	cs := fl.candidates(d)
	for _, e := range cs {
		if p := rxeSrcPort(e.DestQP, d.DestQP); p == d.SrcPort && p == e.SrcPort {
			fl.pair(e, d)
			return
		}
	}
	if len(cs) == 1 && fl.sameHostsUnpaired(d) == 1 {
		fl.pair(cs[0], d)
	}
}

// sameHostsUnpaired counts the unpaired directions going d's way between d's addresses.
func (fl *Flows) sameHostsUnpaired(d *Direction) int {
	n := 0
	for _, c := range fl.conns {
		if c.B == nil && c.A.Src == d.Src && c.A.Dst == d.Dst {
			n++
		}
	}
	return n
}

func (fl *Flows) pairByPSN(d *Direction, psn uint32) {
	var match *Direction
	for _, e := range fl.candidates(d) {
		if e.reqPSNs.has(psn) {
			if match != nil {
				return // ambiguous: wait for another response
			}
			match = e
		}
	}
	if match != nil {
		fl.pair(match, d)
	}
}

// Conns returns the connections in order of first appearance, with their final counts.
func (fl *Flows) Conns() []*Conn {
	for _, c := range fl.conns {
		for _, d := range []*Direction{c.A, c.B} {
			if d != nil {
				d.OutstandingReads, d.OutstandingAtomics = len(d.reads), len(d.atomics)
			}
		}
	}
	return fl.conns
}

// Lines renders a connection for the human output.
func (c *Conn) Lines() []string {
	a, b := c.A, c.B
	var out []string
	if b != nil {
		out = append(out, fmt.Sprintf("conn %s qp=%s <-> %s qp=%s", a.Dst, hex24(a.DestQP), b.Dst, hex24(b.DestQP)))
	} else {
		out = append(out, fmt.Sprintf("conn %s -> %s qp=%s (other direction not seen)", a.Src, a.Dst, hex24(a.DestQP)))
	}
	for _, d := range []*Direction{a, b} {
		if d == nil {
			continue
		}
		out = append(out, d.lines()...)
	}
	return out
}

func (d *Direction) lines() []string {
	l := fmt.Sprintf("  %s -> %s qp=%s sport=%d: packets=%d bytes=%d requests=%d responses=%d messages=%d",
		d.Src, d.Dst, hex24(d.DestQP), d.SrcPort, d.Packets, d.Bytes, d.Requests, d.Responses, d.Messages)
	if d.started {
		l += fmt.Sprintf(" psn=%d..%d", d.FirstPSN, d.LastPSN)
	}
	l += fmt.Sprintf(" retransmits=%d gaps=%d missing_psns=%d dup_acks=%d restarts=%d icrc_bad=%d outstanding_reads=%d outstanding_atomics=%d",
		d.Retransmits, d.Gaps, d.MissingPSNs, d.DupACKs, d.Restarts, d.ICRCBad, d.OutstandingReads, d.OutstandingAtomics)
	out := []string{l}
	if len(d.NAKs) > 0 {
		names := make([]string, 0, len(d.NAKs))
		for n := range d.NAKs {
			names = append(names, n)
		}
		sort.Strings(names)
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s=%d", n, d.NAKs[n]))
		}
		s := "    naks sent: " + strings.Join(parts, " ")
		if d.NAKs["RNR"] > 0 {
			s += fmt.Sprintf(" rnr_wait_advertised=%s rnr_wait_observed=%s", d.RNRWaitAdvertised, d.RNRWaitObserved)
		}
		out = append(out, s)
	}
	for _, u := range d.RKeys {
		out = append(out, fmt.Sprintf("    rkey %s uses=%d ops=%s first=%s last=%s", hex32(u.RKey), u.Uses,
			strings.Join(u.Ops, ","), u.First.UTC().Format(timeFormat), u.Last.UTC().Format(timeFormat)))
	}
	return out
}

const timeFormat = "2006-01-02T15:04:05.000000Z"

// psnWindow bounds how far a resend can go back or a loss can skip ahead. rxe keeps at most 128
// PSNs unacknowledged and a READ spans at most 2^31/256 PSNs in theory but a few in practice;
// anything further is a new QP incarnation, not a retransmission.
const psnWindow = 8192

// psnDiff is a-b in the 24-bit PSN space, as a signed distance.
func psnDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

func psnLess(a, b uint32) bool { return psnDiff(a, b) < 0 }

// psnSet remembers request PSNs as ranges, so pairing by PSN stays cheap on long captures.
type psnSet struct{ r [][2]uint32 }

func (s *psnSet) add(p uint32) {
	if n := len(s.r); n > 0 && (s.r[n-1][1]+1)&wire.PSNMask == p {
		s.r[n-1][1] = p
		return
	}
	if len(s.r) < 4096 {
		s.r = append(s.r, [2]uint32{p, p})
	}
}

func (s *psnSet) has(p uint32) bool {
	for _, r := range s.r {
		if psnDiff(p, r[0]) >= 0 && psnDiff(r[1], p) >= 0 {
			return true
		}
	}
	return false
}
