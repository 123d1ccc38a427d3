package decode

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/softirdma/softirdma/wire/roce"

	"github.com/softirdma/softirdma/wire/mad"
)

// UD and UC have no responses to pair, so their flows are simpler than RC's. A UD flow is the
// traffic from one QP to another: the DETH names the sender's QP, the BTH the receiver's. A UC
// stream is one direction of a UC connection, keyed as an RC direction is; its PSNs show the
// packets the link lost (a UC receiver drops the rest of such a message).

// DatagramFlow is the UD traffic from one QP to another (or to a multicast group).
type DatagramFlow struct {
	Src    netip.Addr `json:"src"`
	SrcQP  uint32     `json:"src_qp"`
	Dst    netip.Addr `json:"dst"`
	DestQP uint32     `json:"dest_qp"`

	Datagrams int `json:"datagrams"`
	Bytes     int `json:"bytes"`
	ICRCBad   int `json:"icrc_bad"`
	// QKeys are the Q_Keys the datagrams carried, in order of first use.
	QKeys []uint32 `json:"qkeys"`
	// MADs counts the management datagrams by "class/attribute method" (see mad.Header).
	MADs map[string]int `json:"mads,omitempty"`
}

// UCStream is one direction of a UC connection.
type UCStream struct {
	Src     netip.Addr `json:"src"`
	Dst     netip.Addr `json:"dst"`
	DestQP  uint32     `json:"dest_qp"`
	SrcPort uint16     `json:"sport"`

	Packets  int    `json:"packets"`
	Bytes    int    `json:"bytes"`
	Messages int    `json:"messages"` // last or only packets
	FirstPSN uint32 `json:"first_psn"`
	LastPSN  uint32 `json:"last_psn"`
	// Gaps are packets whose PSN skipped some (a loss before the capture point, or a capture
	// that missed them); MissingPSNs is how many. Behind counts packets at or before a PSN
	// already seen: duplicates, or a sender reset.
	Gaps        int `json:"gaps"`
	MissingPSNs int `json:"missing_psns"`
	Behind      int `json:"behind"`
	ICRCBad     int `json:"icrc_bad"`

	next uint32
}

type udKey struct {
	src, dst    netip.Addr
	srcQP, dstQ uint32
}

type ucKey = dirKey

// unreliable accumulates the UD and UC flows of a Flows.
type unreliable struct {
	ud      map[udKey]*DatagramFlow
	udOrder []*DatagramFlow
	uc      map[ucKey]*UCStream
	ucOrder []*UCStream
	cms     cmExchanges // the CM exchanges the GSI QPs' MADs carry (cmflows.go)
}

func (u *unreliable) add(f *roce.Frame, wireLen int, icrcOK bool) {
	if u.ud == nil {
		u.ud, u.uc = map[udKey]*DatagramFlow{}, map[ucKey]*UCStream{}
	}
	switch f.Info.Transport {
	case roce.UD:
		u.addUD(f, wireLen, icrcOK)
	case roce.UC:
		u.addUC(f, wireLen, icrcOK)
	}
}

// flowOf is the flow of m that k names; at its first frame it is made by mk and appended to
// order, unless that frame's ICRC is bad (then it is nil): a flipped bit may be in the addresses
// or the QPs.
func flowOf[K comparable, V any](m map[K]*V, order *[]*V, k K, icrcOK bool, mk func() *V) *V {
	v := m[k]
	if v == nil {
		if !icrcOK {
			return nil
		}
		v = mk()
		m[k] = v
		*order = append(*order, v)
	}
	return v
}

func (u *unreliable) addUD(f *roce.Frame, wireLen int, icrcOK bool) {
	k := udKey{f.SrcIP(), f.DstIP(), f.DETH.SrcQP(), f.BTH.DestQP()}
	d := flowOf(u.ud, &u.udOrder, k, icrcOK, func() *DatagramFlow {
		return &DatagramFlow{Src: k.src, SrcQP: k.srcQP, Dst: k.dst, DestQP: k.dstQ}
	})
	if d == nil {
		return
	}
	d.Datagrams++
	d.Bytes += wireLen
	if !icrcOK {
		d.ICRCBad++
		return
	}
	if q := f.DETH.QKey(); !slices.Contains(d.QKeys, q) {
		d.QKeys = append(d.QKeys, q)
	}
	if h, ok := madOf(f); ok {
		if d.MADs == nil {
			d.MADs = map[string]int{}
		}
		d.MADs[h.String()]++
		u.cms.add(k.src, k.dst, h, f.Payload)
	}
}

func (u *unreliable) addUC(f *roce.Frame, wireLen int, icrcOK bool) {
	k := ucKey{f.SrcIP(), f.DstIP(), f.BTH.DestQP()}
	psn := f.BTH.PSN()
	s := flowOf(u.uc, &u.ucOrder, k, icrcOK, func() *UCStream {
		return &UCStream{Src: k.src, Dst: k.dst, DestQP: k.qp, SrcPort: f.SrcPort(), FirstPSN: psn, LastPSN: psn, next: psn}
	})
	if s == nil {
		return
	}
	s.Packets++
	s.Bytes += wireLen
	if !icrcOK {
		s.ICRCBad++
		return
	}
	switch d := psnDiff(psn, s.next); {
	case d > 0:
		s.Gaps++
		s.MissingPSNs += int(d)
	case d < 0:
		s.Behind++
		return
	}
	s.LastPSN, s.next = psn, (psn+1)&roce.PSNMask
	if f.Info.Is(roce.FlagEnd) {
		s.Messages++
	}
}

// madOf reads the MAD a UD frame carries, if it is one: to or from a GSI QP (QP1), with the GSI
// Q_Key and at least a MAD header of payload.
func madOf(f *roce.Frame) (mad.Header, bool) {
	if f.DETH == nil || f.DETH.QKey() != mad.GSIQKey || (f.BTH.DestQP() != 1 && f.DETH.SrcQP() != 1) {
		return mad.Header{}, false
	}
	h, err := mad.Parse(f.Payload)
	return h, err == nil
}

// Datagrams returns the UD flows in order of first appearance.
func (fl *Flows) Datagrams() []*DatagramFlow { return fl.unrel.udOrder }

// UCStreams returns the UC streams in order of first appearance.
func (fl *Flows) UCStreams() []*UCStream { return fl.unrel.ucOrder }

// Line renders a UD flow for the human output.
func (d *DatagramFlow) Line() string {
	var qk []string
	for _, q := range d.QKeys {
		qk = append(qk, hex32(q))
	}
	l := fmt.Sprintf("ud %s qp=%s -> %s qp=%s: datagrams=%d bytes=%d qkeys=%s icrc_bad=%d",
		d.Src, hex24(d.SrcQP), d.Dst, hex24(d.DestQP), d.Datagrams, d.Bytes, strings.Join(qk, ","), d.ICRCBad)
	if len(d.MADs) > 0 {
		names := make([]string, 0, len(d.MADs))
		for n := range d.MADs {
			names = append(names, n)
		}
		sort.Strings(names)
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s=%d", strings.ReplaceAll(n, " ", ":"), d.MADs[n]))
		}
		l += " mads: " + strings.Join(parts, " ")
	}
	return l
}

// Line renders a UC stream for the human output.
func (s *UCStream) Line() string {
	return fmt.Sprintf("uc %s -> %s qp=%s sport=%d: packets=%d bytes=%d messages=%d psn=%d..%d gaps=%d missing_psns=%d behind=%d icrc_bad=%d",
		s.Src, s.Dst, hex24(s.DestQP), s.SrcPort, s.Packets, s.Bytes, s.Messages, s.FirstPSN, s.LastPSN, s.Gaps, s.MissingPSNs, s.Behind, s.ICRCBad)
}
