package decode

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/softirdma/softirdma/wire/roce"
)

// An RC connection joins two queue pairs, (A, qa) and (B, qb). Every frame from A to B carries qb
// as its destination QP, requests and acknowledgements alike, and every frame from B to A carries
// qa; the BTH never names the sender's QP. So the decoder first keeps one Direction per (source,
// destination, destination QP), then pairs the two directions of a connection:
//   - by the UDP source port, when the peers are rxe: rxe derives it from both QP numbers, so
//     both directions carry the same port and it matches their two destination QPs;
//   - otherwise when a response (ACK, READ response, atomic ACK) on one direction carries a PSN that
//     only one candidate reverse direction has sent a request with among its latest (recentPSNs);
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
	lastSeen time.Time

	// Pairing state, while peer is nil: id indexes Flows.all, hosts holds the unpaired
	// directions from Src to Dst, recent the latest request PSNs (see Flows.psns).
	id     int
	hosts  *hostDir
	recent []uint32
	next   int // where the next PSN goes in recent once it is full
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

	merged bool // B's connection, before B was paired into another: no longer reported
}

// Flows accumulates RC connection statistics frame by frame. Every frame costs constant time
// however many connections the capture holds: directions are found by map, and the candidates
// for pairing are indexed by host pair, source port and recent request PSN.
type Flows struct {
	dirs  map[dirKey]*Direction
	conns []*Conn
	all   []*Direction // by Direction.id
	hosts map[hostKey]*hostDir
	// psns indexes the unpaired directions by the request PSNs they sent lately.
	psns map[psnKey]psnUsers
	// mtu is the path MTU learned from FIRST and MIDDLE packets (which carry exactly one MTU);
	// 0 until one is seen. It tells how many PSNs a READ request uses.
	mtu int
	// unrel holds the UD flows, UC streams and CM exchanges (datagrams.go, cmflows.go).
	unrel unreliable
}

type dirKey struct {
	src, dst netip.Addr
	qp       uint32
}

type hostKey struct{ src, dst netip.Addr }

// NewFlows returns an empty accumulator.
func NewFlows() *Flows {
	return &Flows{dirs: map[dirKey]*Direction{}, hosts: map[hostKey]*hostDir{}, psns: map[psnKey]psnUsers{}}
}

// Add accounts one parsed frame: RC frames to their connection, UD ones to their QP pair, UC ones
// to their stream (CNPs are ignored). icrcOK false means the receiver would drop it: it is counted
// on its flow, but its PSN is not trusted, and it starts no flow of its own, since a flipped bit
// may be in the addresses or the QP number.
func (fl *Flows) Add(f *roce.Frame, ts time.Time, wireLen int, icrcOK bool) {
	if f.Info == nil {
		return
	}
	if t := f.Info.Transport; t == roce.UD || t == roce.UC {
		fl.unrel.add(f, wireLen, icrcOK)
		return
	}
	if f.Info.Transport != roce.RC {
		return
	}
	h := f.BTH
	k := dirKey{f.SrcIP(), f.DstIP(), h.DestQP()}
	d := fl.dirs[k]
	if d == nil {
		if !icrcOK {
			return
		}
		d = fl.newDirection(k, f.SrcPort())
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
	// The length on the wire: a header-only capture holds less of the payload.
	if n := f.PayloadLen(); (info.Class == roce.First || info.Class == roce.Middle) && n > fl.mtu {
		fl.mtu = n
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
	if d.peer == nil {
		fl.sentPSN(d, psn)
	}
	d.request(f, psn, ts, fl.mtu)
}

func (d *Direction) request(f *roce.Frame, psn uint32, ts time.Time, mtu int) {
	info := f.Info
	if t, ok := d.rnr[psn]; ok {
		d.peerRNRObserved(ts.Sub(t))
		delete(d.rnr, psn)
	}
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
	d.expMin, d.expMax = (psn+1)&roce.PSNMask, (psn+1)&roce.PSNMask
	op := f.Opcode
	switch {
	case op == roce.RCReadRequest:
		d.reads = append(d.reads, psn)
		// A READ uses one PSN per response packet: ceil(len/MTU), at least one. Before the MTU is
		// known, accept anything an IB MTU (256..4096) allows.
		n := uint32(f.RETH.DMALen())
		lo, hi := readSpan(n, 4096), readSpan(n, 256)
		if mtu > 0 {
			lo = readSpan(n, uint32(mtu))
			hi = lo
		}
		d.expMin, d.expMax = (psn+lo)&roce.PSNMask, (psn+hi)&roce.PSNMask
	case op == roce.RCCompareSwap || op == roce.RCFetchAdd:
		d.atomics = append(d.atomics, psn)
	}
	if info.Class == roce.Last || info.Class == roce.Only {
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

func (d *Direction) useRKey(f *roce.Frame, ts time.Time) {
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
		case roce.RCReadRequest:
			op = "READ"
		case roce.RCFlush:
			op = "FLUSH"
		case roce.RCAtomicWrite:
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
		if d.rkeys == nil {
			d.rkeys = map[uint32]*RKeyUse{}
		}
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
func (fl *Flows) response(d *Direction, f *roce.Frame, psn uint32, ts time.Time) {
	req := d.peer
	if f.AETH != nil {
		s := f.AETH.Syndrome()
		switch s.Type() {
		case roce.SyndromeACK:
			if f.Opcode == roce.RCAcknowledge {
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
		case roce.SyndromeRNR:
			d.countNAK("RNR")
			d.RNRWaitAdvertised += time.Duration(roce.RNRTimerMicros(s.Value())) * time.Microsecond
			if req != nil {
				if req.rnr == nil {
					req.rnr = map[uint32]time.Time{}
				}
				req.rnr[psn] = ts
			}
		default:
			d.countNAK(s.Name())
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
	case roce.RCReadResponseLast, roce.RCReadResponseOnly:
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
	case roce.RCAtomicAcknowledge:
		req.atomics = removePSN(req.atomics, psn)
	}
}

func (d *Direction) countNAK(kind string) {
	if d.NAKs == nil {
		d.NAKs = map[string]int{}
	}
	d.NAKs[kind]++
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

// newDirection starts a direction, in a connection of its own until it is paired.
func (fl *Flows) newDirection(k dirKey, sport uint16) *Direction {
	d := &Direction{Src: k.src, Dst: k.dst, DestQP: k.qp, SrcPort: sport, id: len(fl.all)}
	fl.dirs[k] = d
	fl.all = append(fl.all, d)
	c := &Conn{A: d}
	d.conn = c
	fl.conns = append(fl.conns, c)
	d.hosts = fl.hostDir(k.src, k.dst)
	d.hosts.add(d)
	fl.pairByPort(d)
	return d
}

// hostDir holds the unpaired directions from one address to another, in order of appearance:
// all of them, and by UDP source port.
type hostDir struct {
	unpaired dirSet
	byPort   map[uint16]*dirSet
	// reverse is the hostDir of the other way (itself when both addresses are the same).
	reverse *hostDir
}

func (fl *Flows) hostDir(src, dst netip.Addr) *hostDir {
	if h := fl.hosts[hostKey{src, dst}]; h != nil {
		return h
	}
	h := &hostDir{byPort: map[uint16]*dirSet{}}
	fl.hosts[hostKey{src, dst}] = h
	h.reverse = h
	if src != dst {
		h.reverse = &hostDir{byPort: map[uint16]*dirSet{}, reverse: h}
		fl.hosts[hostKey{dst, src}] = h.reverse
	}
	return h
}

func (h *hostDir) add(d *Direction) {
	h.unpaired.add(d)
	s := h.byPort[d.SrcPort]
	if s == nil {
		s = &dirSet{}
		h.byPort[d.SrcPort] = s
	}
	s.add(d)
}

// drop notes that d, one of h's directions, has been paired.
func (h *hostDir) drop(d *Direction) {
	h.unpaired.drop()
	s := h.byPort[d.SrcPort]
	s.drop()
	if s.live == 0 {
		delete(h.byPort, d.SrcPort)
	}
}

// dirSet lists directions in order of appearance, of which live are still unpaired. Paired ones
// stay in the list until they outnumber the others; then the list is compacted, so adding and
// dropping cost constant amortized time and the list is never more than twice live (+8) long.
type dirSet struct {
	list []*Direction
	live int
}

func (s *dirSet) add(d *Direction) {
	s.list = append(s.list, d)
	s.live++
}

// drop notes that one of the directions was paired (its peer is already set).
func (s *dirSet) drop() {
	s.live--
	if len(s.list)-s.live <= s.live+8 {
		return
	}
	n := 0
	for _, d := range s.list {
		if d.peer == nil {
			s.list[n] = d
			n++
		}
	}
	clear(s.list[n:])
	s.list = s.list[:n]
}

// first returns the first unpaired direction other than d.
func (s *dirSet) first(d *Direction) *Direction {
	for _, e := range s.list {
		if e.peer == nil && e != d {
			return e
		}
	}
	return nil
}

func (fl *Flows) pair(a, b *Direction) {
	a.peer, b.peer = b, a
	for _, d := range []*Direction{a, b} {
		d.hosts.drop(d)
		fl.forgetPSNs(d)
	}
	// Keep a's connection and drop b's.
	c := a.conn
	c.B = b
	b.conn.merged = true
	b.conn = c
}

// maxPortCandidates bounds how many unpaired directions with d's source port pairByPort tries.
// With rxe's ports there are one or two; many only come from a stack with one fixed source
// port, where a match of rxe's hash would be chance anyway.
const maxPortCandidates = 64

// pairByPort pairs a new direction with an unpaired one going the other way between the same
// addresses: the one whose destination QP and d's give the source port both carry (rxe), or
// else the only one, when d is the only unpaired direction its own way.
func (fl *Flows) pairByPort(d *Direction) {
	rev := d.hosts.reverse
	if s := rev.byPort[d.SrcPort]; s != nil {
		tried := 0
		for _, e := range s.list {
			if e.peer != nil || e == d {
				continue
			}
			if rxeSrcPort(e.DestQP, d.DestQP) == d.SrcPort {
				fl.pair(e, d)
				return
			}
			if tried++; tried == maxPortCandidates {
				break
			}
		}
	}
	candidates := rev.unpaired.live
	if rev == d.hosts {
		candidates-- // d itself
	}
	if candidates == 1 && d.hosts.unpaired.live == 1 {
		fl.pair(rev.unpaired.first(d), d)
	}
}

// recentPSNs is how many of its latest request PSNs an unpaired direction can be found by. A
// response names a request the responder has just received, and rxe lets at most 128 be
// outstanding.
const recentPSNs = 256

type psnKey struct {
	hosts *hostDir
	psn   uint32
}

// psnUsers counts the unpaired directions of a hostDir that sent a PSN lately. When there is
// one, idSum is its id.
type psnUsers struct{ n, idSum int }

// sentPSN indexes a request PSN of an unpaired direction.
func (fl *Flows) sentPSN(d *Direction, psn uint32) {
	if slices.Contains(d.recent, psn) {
		return
	}
	if len(d.recent) < recentPSNs {
		d.recent = append(d.recent, psn)
	} else {
		fl.unindexPSN(d, d.recent[d.next])
		d.recent[d.next] = psn
		d.next = (d.next + 1) % recentPSNs
	}
	k := psnKey{d.hosts, psn}
	u := fl.psns[k]
	u.n++
	u.idSum += d.id
	fl.psns[k] = u
}

func (fl *Flows) unindexPSN(d *Direction, psn uint32) {
	k := psnKey{d.hosts, psn}
	u := fl.psns[k]
	u.n--
	u.idSum -= d.id
	if u.n == 0 {
		delete(fl.psns, k)
	} else {
		fl.psns[k] = u
	}
}

func (fl *Flows) forgetPSNs(d *Direction) {
	for _, p := range d.recent {
		fl.unindexPSN(d, p)
	}
	d.recent = nil
}

// pairByPSN pairs d, which has sent a response with the PSN, with the only unpaired direction
// going the other way that sent a request with it lately. When there are several, a later
// response may tell.
func (fl *Flows) pairByPSN(d *Direction, psn uint32) {
	rev := d.hosts.reverse
	u := fl.psns[psnKey{rev, psn}]
	if rev == d.hosts && slices.Contains(d.recent, psn) {
		u.n--
		u.idSum -= d.id
	}
	if u.n == 1 {
		fl.pair(fl.all[u.idSum], d)
	}
}

// Conns returns the connections in order of first appearance, with their final counts.
func (fl *Flows) Conns() []*Conn {
	out := make([]*Conn, 0, len(fl.conns))
	for _, c := range fl.conns {
		if c.merged {
			continue
		}
		for _, d := range []*Direction{c.A, c.B} {
			if d != nil {
				d.OutstandingReads, d.OutstandingAtomics = len(d.reads), len(d.atomics)
			}
		}
		out = append(out, c)
	}
	return out
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
