package roce

// Kind classifies why a frame was not accepted.
type Kind uint8

// Kinds of parse failure. Everything but KindNotRoCE and KindBadICRC means the frame is malformed.
const (
	// KindShort: the frame ends before a header it announces.
	KindShort Kind = iota + 1
	// KindBadIPLength: the IP header or its length fields are inconsistent with the frame.
	KindBadIPLength
	// KindBadUDPLength: the UDP length disagrees with the IP payload length.
	KindBadUDPLength
	// KindBadPad: PadCnt is more than the packet has after its headers, or a header-only opcode pads.
	KindBadPad
	// KindUnknownOpcode: the BTH opcode is not in the table.
	KindUnknownOpcode
	// KindHeaderMismatch: the packet's length does not fit the headers and payload its opcode
	// calls for, or the header version is not 0.
	KindHeaderMismatch
	// KindBadICRC: the frame is well-formed but its ICRC does not match.
	KindBadICRC
	// KindNotRoCE: not an IPv4/IPv6 UDP datagram to port 4791.
	KindNotRoCE
)

var kindNames = [...]string{
	KindShort:          "short",
	KindBadIPLength:    "bad IP length",
	KindBadUDPLength:   "bad UDP length",
	KindBadPad:         "bad pad",
	KindUnknownOpcode:  "unknown opcode",
	KindHeaderMismatch: "header/opcode mismatch",
	KindBadICRC:        "bad ICRC",
	KindNotRoCE:        "not RoCEv2",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Error is the parser's error. The parser only returns the package's preallocated values, so a
// rejected frame costs no allocation either; compare kinds with errors.As or KindOf.
type Error struct {
	Kind Kind
	// Where says which header or field failed, e.g. "IPv4 total length".
	Where string
}

func (e *Error) Error() string { return "wire: " + e.Kind.String() + ": " + e.Where }

// Is makes errors.Is(err, &Error{Kind: k}) match any error of kind k.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Where == "" || t.Where == e.Where)
}

// KindOf returns the kind of a parser error, or 0 for nil and foreign errors.
func KindOf(err error) Kind {
	if e, ok := err.(*Error); ok {
		return e.Kind
	}
	return 0
}

// Malformed says whether err means a frame that claims to be RoCEv2 but is not well-formed.
func Malformed(err error) bool {
	k := KindOf(err)
	return k != 0 && k != KindBadICRC && k != KindNotRoCE
}

func newErr(k Kind, where string) *Error { return &Error{Kind: k, Where: where} }

var (
	errShortEthernet  = newErr(KindShort, "Ethernet header")
	errShortVLAN      = newErr(KindShort, "802.1Q tag")
	errShortIPv4      = newErr(KindShort, "IPv4 header")
	errShortIPv6      = newErr(KindShort, "IPv6 header")
	errShortUDP       = newErr(KindShort, "UDP header")
	errShortIPPayload = newErr(KindShort, "frame shorter than the IP length")
	errShortBTH       = newErr(KindShort, "BTH and ICRC")
	errIPv4IHL        = newErr(KindBadIPLength, "IPv4 header length")
	errIPv4Total      = newErr(KindBadIPLength, "IPv4 total length")
	errIPv4Fragment   = newErr(KindBadIPLength, "IPv4 fragment")
	errIPv6Payload    = newErr(KindBadIPLength, "IPv6 payload length")
	errIPVersion      = newErr(KindNotRoCE, "IP version is neither 4 nor 6")
	errUDPLength      = newErr(KindBadUDPLength, "differs from the IP payload length")
	errPad            = newErr(KindBadPad, "PadCnt does not fit the packet")
	errOpcode         = newErr(KindUnknownOpcode, "the BTH opcode is not one RoCEv2 defines")
	errExtHeaders     = newErr(KindHeaderMismatch, "extension headers")
	errPayload        = newErr(KindHeaderMismatch, "payload on a header-only opcode")
	errAtomicWrite    = newErr(KindHeaderMismatch, "ATOMIC_WRITE payload is not 8 bytes")
	errTVer           = newErr(KindHeaderMismatch, "BTH transport version")
	errICRC           = newErr(KindBadICRC, "the ICRC does not match the frame")
	errEtherType      = newErr(KindNotRoCE, "EtherType is neither IPv4 nor IPv6")
	errNotUDP         = newErr(KindNotRoCE, "IP protocol is not UDP")
	errPort           = newErr(KindNotRoCE, "UDP destination port is not 4791")
	errBuildBuffer    = newErr(KindShort, "build buffer")
	errBuildPayload   = newErr(KindHeaderMismatch, "build payload")
	errBuildAddr      = newErr(KindBadIPLength, "build addresses")
	errBuildTooLarge  = newErr(KindBadIPLength, "build frame too large")
)

// ErrBuildOpcode is what building a frame (or serializing a gopacket layer) for an opcode not in
// the table returns.
var ErrBuildOpcode = newErr(KindUnknownOpcode, "cannot build an opcode not in the table")
