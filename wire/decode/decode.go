// Package decode owns what `softirdma decode` reports about a capture: one record per RoCEv2
// frame with every header field (a UD frame's DETH, and the MAD a GSI QP's datagram carries) and
// the ICRC verdict, per-flow statistics (-flows: RC connections, UC streams, UD QP pairs), the
// closing summary, and the human and JSON renderings of all three. It reads through wire and never
// panics on a truncated or garbage file.
//
// A capture with a snap length (tcpdump -s 128, usual for RDMA) keeps each frame's headers and
// drops its payload and ICRC. Such a frame is analysed, flows included, from the headers it holds,
// with the lengths the IP and UDP headers give; its ICRC is reported as not checkable. A frame cut
// inside its headers is reported with the header the capture ends in, and not analysed.
package decode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/softirdma/softirdma/wire/roce"

	"github.com/google/gopacket"
	"github.com/softirdma/softirdma/wire"
)

// Options select what Run prints.
type Options struct {
	// Flows adds per-connection statistics after the frames.
	Flows bool
	// JSON prints one JSON object per line instead of text: frames, then flows, then the summary.
	JSON bool
}

// Summary counts the frames of a capture. RoCEv2 counts every frame to UDP port 4791, malformed
// ones included, so ICRCOK + ICRCBad + Malformed + ICRCUnchecked + HeadersCut == RoCEv2.
//
// The last three count frames a capture's snap length cut short (tcpdump -s 128): ICRCUnchecked
// those analysed from the headers the capture holds, whose ICRC it does not; HeadersCut the
// RoCEv2 frames it cut inside the BTH or an extension header; Unidentified the frames it cut
// before their UDP destination port, which may or may not be RoCEv2.
type Summary struct {
	Frames        int `json:"frames"`
	RoCEv2        int `json:"rocev2"`
	ICRCOK        int `json:"icrc_ok"`
	ICRCBad       int `json:"icrc_bad"`
	Malformed     int `json:"malformed"`
	ICRCUnchecked int `json:"icrc_unchecked,omitempty"`
	HeadersCut    int `json:"headers_cut,omitempty"`
	Unidentified  int `json:"unidentified,omitempty"`
}

// String is the last line of the human output. The counts of cut frames follow the others, and
// only for a capture that cut some: the line for whole frames stays what scripts match.
func (s Summary) String() string {
	l := fmt.Sprintf("summary: frames=%d rocev2=%d icrc_ok=%d icrc_bad=%d malformed=%d",
		s.Frames, s.RoCEv2, s.ICRCOK, s.ICRCBad, s.Malformed)
	if s.ICRCUnchecked+s.HeadersCut+s.Unidentified > 0 {
		l += fmt.Sprintf(" icrc_unchecked=%d headers_cut=%d unidentified=%d", s.ICRCUnchecked, s.HeadersCut, s.Unidentified)
	}
	return l
}

// Clean says whether every RoCEv2 frame was well-formed with a valid ICRC, where the capture
// holds the frame whole, and every frame the capture cut kept the headers that say what it is:
// a header-only capture is clean, one cut inside the headers is not, since nothing can be said of
// the frames it cut there.
func (s Summary) Clean() bool {
	return s.ICRCBad == 0 && s.Malformed == 0 && s.HeadersCut == 0 && s.Unidentified == 0
}

// ErrUnreadable wraps every error that keeps Run from reading the capture at all (not a capture,
// a link type it cannot decode). Errors met later, after some frames, are returned unwrapped with
// the summary of what was read.
var ErrUnreadable = errors.New("unreadable capture")

// Status of a RoCEv2 frame.
const (
	StatusOK        = "ok"
	StatusICRCBad   = "icrc_bad"
	StatusMalformed = "malformed"
	// StatusICRCUnchecked: the capture cut the frame after its headers; it is analysed, and its
	// ICRC, not in the capture, is not checked.
	StatusICRCUnchecked = "icrc_unchecked"
	// StatusHeadersCut: the capture cut the frame inside its BTH or an extension header (named
	// in Record.Cut); it is not analysed.
	StatusHeadersCut = "headers_cut"
	// StatusUnidentified: the capture cut the frame before its UDP destination port, so whether
	// it is RoCEv2 is not known. Such records are not counted as RoCEv2 frames.
	StatusUnidentified = "unidentified"
)

// Record is what the decoder reports about one RoCEv2 frame, or about a frame a capture cut
// too short to tell (StatusUnidentified). Header fields are present only when the frame carries
// them and the capture holds them.
type Record struct {
	Frame  int       `json:"frame"`
	Time   time.Time `json:"time"`
	Length int       `json:"len"`
	CapLen int       `json:"caplen"`
	Status string    `json:"status"`
	Error  string    `json:"error,omitempty"`
	// Cut is the header inside which the capture ends, for StatusHeadersCut and
	// StatusUnidentified: "BTH", "RETH", "UDP header", ...
	Cut     string  `json:"cut,omitempty"`
	Src     string  `json:"src,omitempty"`
	Dst     string  `json:"dst,omitempty"`
	SrcPort uint16  `json:"sport,omitempty"`
	VLAN    *uint16 `json:"vlan,omitempty"`

	Opcode      string  `json:"opcode,omitempty"`
	OpcodeValue *uint8  `json:"opcode_value,omitempty"`
	DestQP      *uint32 `json:"dest_qp,omitempty"`
	PSN         *uint32 `json:"psn,omitempty"`
	AckReq      bool    `json:"ackreq,omitempty"`
	SE          bool    `json:"se,omitempty"`
	MigReq      bool    `json:"migreq,omitempty"`
	FECN        bool    `json:"fecn,omitempty"`
	BECN        bool    `json:"becn,omitempty"`
	PKey        uint16  `json:"pkey,omitempty"`

	RETH      *RETH      `json:"reth,omitempty"`
	AtomicETH *AtomicETH `json:"atomic_eth,omitempty"`
	AETH      *AETH      `json:"aeth,omitempty"`
	// AtomicOrig is the AtomicAckETH's original value.
	AtomicOrig *Hex64  `json:"atomic_orig,omitempty"`
	Imm        *uint32 `json:"imm,omitempty"`
	InvRKey    *uint32 `json:"inv_rkey,omitempty"`
	DETH       *DETH   `json:"deth,omitempty"`
	// MAD is the management datagram header of a UD frame to or from a GSI QP; CM what its
	// connection manager message says.
	MAD     *MAD    `json:"mad,omitempty"`
	CM      *CM     `json:"cm,omitempty"`
	FETH    *uint32 `json:"feth,omitempty"`
	Payload *int    `json:"payload,omitempty"`
	ICRC    string  `json:"icrc,omitempty"`
	// ICRCCarried and ICRCComputed are the ICRC in the frame and the one its bytes give, when
	// they differ.
	ICRCCarried  string `json:"icrc_carried,omitempty"`
	ICRCComputed string `json:"icrc_computed,omitempty"`
}

// Hex64 is a 64-bit address or atomic operand. JSON carries it as a string, "0x" and lower-case
// hex digits without leading zeros ("0x55aa6c626000"), as the text output shows it: a JSON
// number loses precision above 2^53 in jq and JavaScript.
type Hex64 uint64

func (v Hex64) String() string { return "0x" + strconv.FormatUint(uint64(v), 16) }

// MarshalText makes JSON write the value as a string.
func (v Hex64) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (v *Hex64) UnmarshalText(b []byte) error {
	s, ok := strings.CutPrefix(string(b), "0x")
	n, err := strconv.ParseUint(s, 16, 64)
	if !ok || err != nil {
		return fmt.Errorf("decode: %q is not a 64-bit value in hex (0x...)", b)
	}
	*v = Hex64(n)
	return nil
}

// RETH fields.
type RETH struct {
	VA     Hex64  `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"len"`
}

// AtomicETH fields.
type AtomicETH struct {
	VA      Hex64  `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd Hex64  `json:"swap_add"`
	Compare Hex64  `json:"compare"`
}

// AETH fields, with the syndrome decoded.
type AETH struct {
	Syndrome uint8  `json:"syndrome"`
	Kind     string `json:"kind"`
	Text     string `json:"text"`
	MSN      uint32 `json:"msn"`
}

// DETH fields.
type DETH struct {
	QKey  uint32 `json:"qkey"`
	SrcQP uint32 `json:"src_qp"`
}

// MAD is a management datagram's common header, with its class, method and attribute named.
type MAD struct {
	Class     uint8  `json:"class"`
	ClassName string `json:"class_name"`
	Method    uint8  `json:"method"`
	Name      string `json:"name"` // "CM/REQ Send"
	Attr      uint16 `json:"attr"`
	AttrMod   uint32 `json:"attr_mod,omitempty"`
	Status    uint16 `json:"status,omitempty"`
	TID       Hex64  `json:"tid"`
}

// Run decodes the capture read from r and writes the report to w. It returns the summary and,
// when the capture could not be read to its end, an error (wrapping ErrUnreadable if nothing
// could be read).
func Run(r io.Reader, w io.Writer, opt Options) (Summary, error) {
	var sum Summary
	pr, err := wire.NewPcapReader(r)
	if err != nil {
		return sum, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	parse, err := linkParser(pr.Link())
	if err != nil {
		return sum, err
	}
	out := newOutput(w, opt.JSON)
	var (
		p     roce.Parser
		f     roce.Frame
		flows = NewFlows()
	)
	var readErr error
	for {
		data, ci, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = fmt.Errorf("after %d frames: %w", sum.Frames, err)
			break
		}
		sum.Frames++
		perr := parse(&p, &f, data, ci.Length)
		if !f.RoCE {
			if cut := cutInside(perr); cut != "" && ci.CaptureLength < ci.Length {
				sum.Unidentified++
				out.record(unidentified(&f, cut, sum.Frames, ci))
			}
			continue // not addressed to UDP 4791: not ours to judge
		}
		sum.RoCEv2++
		rec := record(&p, &f, perr, sum.Frames, ci)
		switch rec.Status {
		case StatusOK:
			sum.ICRCOK++
		case StatusICRCBad:
			sum.ICRCBad++
		case StatusICRCUnchecked:
			sum.ICRCUnchecked++
		case StatusHeadersCut:
			sum.HeadersCut++
		default:
			sum.Malformed++
		}
		if opt.Flows && (rec.Status == StatusOK || rec.Status == StatusICRCBad || rec.Status == StatusICRCUnchecked) {
			flows.Add(&f, ci.Timestamp, ci.Length, rec.Status != StatusICRCBad)
		}
		out.record(rec)
	}
	if opt.Flows {
		out.flows(flows)
	}
	out.summary(sum)
	if err := out.err(); err != nil {
		return sum, err
	}
	return sum, readErr
}

// parseFunc parses data, the part of a frame of wireLen bytes that the capture holds.
type parseFunc func(p *roce.Parser, f *roce.Frame, data []byte, wireLen int) error

// linkParser returns how to find the IP packet in a frame of the link type.
func linkParser(lt wire.LinkType) (parseFunc, error) {
	switch lt {
	case wire.LinkTypeEthernet:
		return (*roce.Parser).ParseCaptured, nil
	case wire.LinkTypeRaw, wire.LinkTypeIPv4, wire.LinkTypeIPv6, wire.LinkTypeRawBSD, wire.LinkTypeRawBSD14:
		return (*roce.Parser).ParseCapturedIP, nil
	case wire.LinkTypeLinuxSLL:
		return cooked(wire.SLLLen, wire.SLLProtoOff), nil
	case wire.LinkTypeLinuxSLL2:
		return cooked(wire.SLL2Len, wire.SLL2ProtoOff), nil
	}
	return nil, fmt.Errorf("%w: link type %v is not one the decoder reads (Ethernet, raw IP, Linux cooked v1 or v2)", ErrUnreadable, lt)
}

var (
	errShortCooked = errors.New("short cooked header")
	errCookedNotIP = errors.New("not IP")
)

// cooked parses Linux cooked capture: a pseudo header of n bytes whose protocol field, at
// protoOff, is the EtherType of the packet that follows.
func cooked(n, protoOff int) parseFunc {
	return func(p *roce.Parser, f *roce.Frame, data []byte, wireLen int) error {
		if len(data) < n {
			f.Reset()
			return errShortCooked
		}
		switch et := binary.BigEndian.Uint16(data[protoOff:]); et {
		case roce.EtherTypeIPv4, roce.EtherTypeIPv6:
			return p.ParseCapturedIP(f, data[n:], wireLen-n)
		}
		f.Reset()
		return errCookedNotIP
	}
}

// cutInside names the header inside which a frame's captured bytes end, or "" when the parse
// failed otherwise (or did not fail).
func cutInside(err error) string {
	if err == errShortCooked {
		return "cooked header"
	}
	return roce.CutInside(err)
}

// unidentified describes a frame the capture cut before its UDP destination port: its addresses
// if the capture holds them, and where the capture ends.
func unidentified(f *roce.Frame, cut string, n int, ci gopacket.CaptureInfo) *Record {
	rec := &Record{Frame: n, Time: ci.Timestamp.UTC(), Length: ci.Length, CapLen: ci.CaptureLength,
		Status: StatusUnidentified, Cut: cut}
	switch {
	case cut == "UDP header": // the IP header is whole
	case cut == "IPv4 header" && len(f.Buf) >= f.L3+roce.IPv4Len: // cut in its options
	default:
		return rec
	}
	rec.Src, rec.Dst = f.SrcIP().String(), f.DstIP().String()
	return rec
}

// record describes one frame the parser found addressed to UDP 4791.
func record(p *roce.Parser, f *roce.Frame, perr error, n int, ci gopacket.CaptureInfo) *Record {
	rec := &Record{Frame: n, Time: ci.Timestamp.UTC(), Length: ci.Length, CapLen: ci.CaptureLength}
	rec.Src, rec.Dst = f.SrcIP().String(), f.DstIP().String()
	rec.SrcPort = f.SrcPort()
	if f.HasVLAN {
		v := f.VLAN & 0x0FFF
		rec.VLAN = &v
	}
	rec.status(f, perr, ci)
	h := f.BTH
	if h == nil {
		// Inconsistent lengths: still show the BTH if the capture holds it.
		bth := f.L4 + roce.UDPLen
		if len(f.Buf) < bth+roce.BTHLen {
			return rec
		}
		h = roce.BTH(f.Buf[bth : bth+roce.BTHLen])
	}
	rec.bth(h)
	if f.Info == nil || f.Payload == nil && rec.Status == StatusMalformed {
		return rec // headers past the BTH were not found
	}
	rec.extHeaders(f)
	switch rec.Status {
	case StatusOK, StatusICRCBad, StatusICRCUnchecked:
		n := f.PayloadLen()
		rec.Payload = &n
		rec.ICRC = "ok"
		switch rec.Status {
		case StatusICRCBad:
			rec.ICRC = "bad"
			rec.ICRCCarried, rec.ICRCComputed = hex32(f.ICRC), hex32(p.ICRC(f))
		case StatusICRCUnchecked:
			rec.ICRC = "n/a"
		}
	}
	return rec
}

// status sorts a frame by what the parser said of it, perr, and whether the capture cut it.
func (rec *Record) status(f *roce.Frame, perr error, ci gopacket.CaptureInfo) {
	cut := ci.CaptureLength < ci.Length
	switch {
	case perr == nil && f.Truncated():
		rec.Status = StatusICRCUnchecked
	case perr == nil:
		rec.Status = StatusOK
	case roce.KindOf(perr) == roce.KindBadICRC:
		rec.Status = StatusICRCBad
	case cut && cutInside(perr) != "":
		rec.Status = StatusHeadersCut
		rec.Cut = cutInside(perr)
	default:
		rec.Status = StatusMalformed
		rec.Error = perr.Error()
		if cut {
			rec.Error += fmt.Sprintf(" (the capture holds %d of %d bytes)", ci.CaptureLength, ci.Length)
		}
	}
}

// bth fills in what the BTH says.
func (rec *Record) bth(h roce.BTH) {
	op := uint8(h.Opcode())
	qp, psn := h.DestQP(), h.PSN()
	rec.Opcode, rec.OpcodeValue, rec.DestQP, rec.PSN = h.Opcode().String(), &op, &qp, &psn
	rec.AckReq, rec.SE, rec.MigReq, rec.FECN, rec.BECN = h.AckReq(), h.SE(), h.MigReq(), h.FECN(), h.BECN()
	if k := h.PKey(); k != 0xFFFF {
		rec.PKey = k
	}
}

// extHeaders fills in what the extension headers the frame carries say, and a datagram's MAD.
func (rec *Record) extHeaders(f *roce.Frame) {
	if v := f.RETH; v != nil {
		rec.RETH = &RETH{VA: Hex64(v.VA()), RKey: v.RKey(), DMALen: v.DMALen()}
	}
	if v := f.AtomicETH; v != nil {
		rec.AtomicETH = &AtomicETH{VA: Hex64(v.VA()), RKey: v.RKey(), SwapAdd: Hex64(v.SwapAdd()), Compare: Hex64(v.Compare())}
	}
	if v := f.AETH; v != nil {
		s := v.Syndrome()
		rec.AETH = &AETH{Syndrome: uint8(s), Kind: s.Name(), Text: s.String(), MSN: v.MSN()}
	}
	if v := f.AtomicAckETH; v != nil {
		o := Hex64(v.Orig())
		rec.AtomicOrig = &o
	}
	if v := f.ImmDt; v != nil {
		i := v.Imm()
		rec.Imm = &i
	}
	if v := f.IETH; v != nil {
		k := v.RKey()
		rec.InvRKey = &k
	}
	if v := f.DETH; v != nil {
		rec.DETH = &DETH{QKey: v.QKey(), SrcQP: v.SrcQP()}
		if h, ok := madOf(f); ok {
			rec.MAD = &MAD{Class: uint8(h.MgmtClass), ClassName: h.MgmtClass.String(), Method: uint8(h.Method), Name: h.String(),
				Attr: h.AttrID, AttrMod: h.AttrModifier, Status: h.Status, TID: Hex64(h.TID)}
			rec.CM = cmOf(h, f.Payload)
		}
	}
	if v := f.FETH; v != nil {
		x := v.Raw()
		rec.FETH = &x
	}
}

func hex32(v uint32) string { return "0x" + pad(strconv.FormatUint(uint64(v), 16), 8) }
func hex24(v uint32) string { return "0x" + pad(strconv.FormatUint(uint64(v), 16), 6) }

func pad(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return strings.Repeat("0", n-len(s)) + s
}

// writeExtHeaders writes what the extension headers (and a datagram's MAD) say, in Text's form.
func (r *Record) writeExtHeaders(b *strings.Builder) {
	if v := r.DETH; v != nil {
		fmt.Fprintf(b, " qkey=%s src_qp=%s", hex32(v.QKey), hex24(v.SrcQP))
	}
	if v := r.MAD; v != nil {
		fmt.Fprintf(b, " mad=%s tid=%s", strings.ReplaceAll(v.Name, " ", ":"), v.TID)
		if v.Status != 0 {
			fmt.Fprintf(b, " mad_status=0x%04x", v.Status)
		}
	}
	if r.CM != nil {
		b.WriteString(r.CM.text())
	}
	if v := r.FETH; v != nil {
		fmt.Fprintf(b, " feth=%s", hex32(*v))
	}
	if v := r.RETH; v != nil {
		fmt.Fprintf(b, " va=%s rkey=%s len=%d", v.VA, hex32(v.RKey), v.DMALen)
	}
	if v := r.AtomicETH; v != nil {
		fmt.Fprintf(b, " va=%s rkey=%s", v.VA, hex32(v.RKey))
		if r.OpcodeValue != nil && roce.Opcode(*r.OpcodeValue) == roce.RCCompareSwap {
			fmt.Fprintf(b, " swap=%s compare=%s", v.SwapAdd, v.Compare)
		} else {
			fmt.Fprintf(b, " add=%s", v.SwapAdd)
		}
	}
	if v := r.AETH; v != nil {
		fmt.Fprintf(b, " aeth=%s msn=%d", v.Text, v.MSN)
	}
	if v := r.AtomicOrig; v != nil {
		fmt.Fprintf(b, " orig=%s", *v)
	}
	if v := r.Imm; v != nil {
		fmt.Fprintf(b, " imm=%s", hex32(*v))
	}
	if v := r.InvRKey; v != nil {
		fmt.Fprintf(b, " inv_rkey=%s", hex32(*v))
	}
}

// Text renders a record as one line: time, addresses, UDP source port, opcode, QP, PSN, flags,
// extension header fields, payload length and ICRC verdict.
func (r *Record) Text() string {
	var b strings.Builder
	b.WriteString(r.Time.Format(timeFormat))
	fmt.Fprintf(&b, " #%d", r.Frame)
	if r.Status == StatusUnidentified {
		if r.Src != "" {
			fmt.Fprintf(&b, " %s -> %s", r.Src, r.Dst)
		}
		fmt.Fprintf(&b, " not analysed: the capture ends inside the %s (%d of %d bytes): cannot tell whether it is RoCEv2",
			r.Cut, r.CapLen, r.Length)
		return b.String()
	}
	fmt.Fprintf(&b, " %s -> %s sport=%d", r.Src, r.Dst, r.SrcPort)
	if r.VLAN != nil {
		fmt.Fprintf(&b, " vlan=%d", *r.VLAN)
	}
	if r.Opcode != "" {
		fmt.Fprintf(&b, " %s qp=%s psn=%d", r.Opcode, hex24(*r.DestQP), *r.PSN)
	}
	for _, fl := range []struct {
		on   bool
		name string
	}{{r.AckReq, "ackreq"}, {r.SE, "se"}, {r.MigReq, "migreq"}, {r.FECN, "fecn"}, {r.BECN, "becn"}} {
		if fl.on {
			b.WriteString(" " + fl.name)
		}
	}
	if r.PKey != 0 {
		fmt.Fprintf(&b, " pkey=0x%04x", r.PKey)
	}
	r.writeExtHeaders(&b)
	if v := r.Payload; v != nil {
		fmt.Fprintf(&b, " payload=%d", *v)
	}
	switch r.Status {
	case StatusOK:
		b.WriteString(" icrc=ok")
	case StatusICRCBad:
		fmt.Fprintf(&b, " icrc=bad(carried %s computed %s)", r.ICRCCarried, r.ICRCComputed)
	case StatusICRCUnchecked:
		fmt.Fprintf(&b, " icrc=n/a (truncated to %d of %d bytes)", r.CapLen, r.Length)
	case StatusHeadersCut:
		fmt.Fprintf(&b, " not analysed: the capture ends inside the %s (%d of %d bytes)", r.Cut, r.CapLen, r.Length)
	default:
		b.WriteString(" malformed: " + r.Error)
	}
	return b.String()
}

// output writes text or JSON lines and keeps the first write error.
type output struct {
	w    io.Writer
	json bool
	enc  *json.Encoder
	e    error
}

func newOutput(w io.Writer, js bool) *output {
	o := &output{w: w, json: js}
	if js {
		o.enc = json.NewEncoder(w)
	}
	return o
}

func (o *output) err() error { return o.e }

func (o *output) line(s string) {
	if o.e == nil {
		_, o.e = io.WriteString(o.w, s+"\n")
	}
}

func (o *output) object(v any) {
	if o.e == nil {
		o.e = o.enc.Encode(v)
	}
}

func (o *output) record(r *Record) {
	if o.json {
		o.object(struct {
			Type string `json:"type"`
			*Record
		}{"frame", r})
		return
	}
	o.line(r.Text())
}

func (o *output) flows(fl *Flows) {
	cs, ud, uc, cms := fl.Conns(), fl.Datagrams(), fl.UCStreams(), fl.CMExchanges()
	if o.json {
		typedObjects(o, "flow", cs)
		typedObjects(o, "uc_flow", uc)
		typedObjects(o, "ud_flow", ud)
		typedObjects(o, "cm_flow", cms)
		return
	}
	if len(cs)+len(ud)+len(uc)+len(cms) == 0 {
		o.line("flows: none")
		return
	}
	if len(cs) > 0 {
		o.line(fmt.Sprintf("flows: %d RC connections", len(cs)))
	}
	for _, c := range cs {
		for _, l := range c.Lines() {
			o.line(l)
		}
	}
	section(o, "flows: %d UC streams", uc)
	section(o, "flows: %d UD QP pairs", ud)
	section(o, "flows: %d CM exchanges", cms)
}

// section writes heading with the count of objs, when there are any, then each one's line.
func section[T interface{ Line() string }](o *output, heading string, objs []T) {
	if len(objs) > 0 {
		o.line(fmt.Sprintf(heading, len(objs)))
	}
	for _, v := range objs {
		o.line(v.Line())
	}
}

// typedObjects writes each of objs as one JSON object led by "type": typ.
func typedObjects[T any](o *output, typ string, objs []T) {
	for _, v := range objs {
		o.object(typed{typ, v})
	}
}

// typed is v's JSON object with a first member "type": Type, as if v's struct were embedded
// after a Type field (none of the flows has a member of that name).
type typed struct {
	Type string
	V    any
}

func (t typed) MarshalJSON() ([]byte, error) {
	typ, err := json.Marshal(t.Type)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(t.V)
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"type":`), typ...)
	if len(body) > len("{}") {
		out = append(out, ',')
	}
	return append(out, body[1:]...), nil
}

func (o *output) summary(s Summary) {
	if o.json {
		o.object(struct {
			Type string `json:"type"`
			Summary
		}{"summary", s})
		return
	}
	o.line(s.String())
}
