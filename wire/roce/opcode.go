package roce

import "strconv"

// Opcode is the BTH opcode: the transport in the top three bits (RC 000, UC 001, UD 011, CNP 100)
// and the operation below.
type Opcode uint8

// RC opcodes (IBTA 9.2; include/rdma/ib_pack.h).
const (
	RCSendFirst             Opcode = 0x00
	RCSendMiddle            Opcode = 0x01
	RCSendLast              Opcode = 0x02
	RCSendLastImm           Opcode = 0x03
	RCSendOnly              Opcode = 0x04
	RCSendOnlyImm           Opcode = 0x05
	RCWriteFirst            Opcode = 0x06
	RCWriteMiddle           Opcode = 0x07
	RCWriteLast             Opcode = 0x08
	RCWriteLastImm          Opcode = 0x09
	RCWriteOnly             Opcode = 0x0A
	RCWriteOnlyImm          Opcode = 0x0B
	RCReadRequest           Opcode = 0x0C
	RCReadResponseFirst     Opcode = 0x0D
	RCReadResponseMiddle    Opcode = 0x0E
	RCReadResponseLast      Opcode = 0x0F
	RCReadResponseOnly      Opcode = 0x10
	RCAcknowledge           Opcode = 0x11
	RCAtomicAcknowledge     Opcode = 0x12
	RCCompareSwap           Opcode = 0x13
	RCFetchAdd              Opcode = 0x14
	RCSendLastInv           Opcode = 0x16
	RCSendOnlyInv           Opcode = 0x17
	RCFlush                 Opcode = 0x1C
	RCAtomicWrite           Opcode = 0x1D
	UCSendFirst             Opcode = 0x20
	UCSendMiddle            Opcode = 0x21
	UCSendLast              Opcode = 0x22
	UCSendLastImm           Opcode = 0x23
	UCSendOnly              Opcode = 0x24
	UCSendOnlyImm           Opcode = 0x25
	UCWriteFirst            Opcode = 0x26
	UCWriteMiddle           Opcode = 0x27
	UCWriteLast             Opcode = 0x28
	UCWriteLastImm          Opcode = 0x29
	UCWriteOnly             Opcode = 0x2A
	UCWriteOnlyImm          Opcode = 0x2B
	UDSendOnly              Opcode = 0x64
	UDSendOnlyImm           Opcode = 0x65
	CNP                     Opcode = 0x81
	opcodeTableLen                 = 256
	atomicWritePayloadBytes        = 8
)

// Ext is a set of extension headers, in the order they follow the BTH: DETH, FETH, RETH,
// AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, CNP (no opcode carries two that would conflict).
type Ext uint16

// Extension header bits of Ext.
const (
	ExtDETH Ext = 1 << iota
	ExtFETH
	ExtRETH
	ExtAtomicETH
	ExtAETH
	ExtAtomicAckETH
	ExtImmDt
	ExtIETH
	ExtCNP
)

// extOrder lists the extension headers in wire order with their lengths.
var extOrder = [...]struct {
	ext Ext
	len int
}{
	{ExtDETH, DETHLen}, {ExtFETH, FETHLen}, {ExtRETH, RETHLen}, {ExtAtomicETH, AtomicETHLen},
	{ExtAETH, AETHLen}, {ExtAtomicAckETH, AtomicAckETHLen}, {ExtImmDt, ImmDtLen}, {ExtIETH, IETHLen},
	{ExtCNP, CNPLen},
}

// Len is the total length of the extension headers in the set. Every frame built and parsed
// asks, so the lengths of all sets are worked out once.
func (e Ext) Len() int {
	if int(e) < len(extLens) {
		return int(extLens[e])
	}
	return extLen(e)
}

// extLens is the length of every set of the extension headers above.
var extLens = func() (t [1 << len(extOrder)]uint8) {
	for e := range t {
		t[e] = uint8(extLen(Ext(e)))
	}
	return t
}()

func extLen(e Ext) int {
	n := 0
	for _, x := range extOrder {
		if e&x.ext != 0 {
			n += x.len
		}
	}
	return n
}

// Class says where a packet sits in its message.
type Class uint8

// Classes of packets. Acknowledgements and single-packet requests are Only.
const (
	First Class = iota + 1
	Middle
	Last
	Only
)

func (c Class) String() string {
	switch c {
	case First:
		return "first"
	case Middle:
		return "middle"
	case Last:
		return "last"
	case Only:
		return "only"
	}
	return "?"
}

// Transport is the service the opcode belongs to.
type Transport uint8

// Transports.
const (
	RC Transport = iota + 1
	UC
	UD
	CongestionNotification
)

func (t Transport) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	case CongestionNotification:
		return "CNP"
	}
	return "?"
}

// Payload rules of an opcode.
type payloadRule uint8

const (
	noPayload    payloadRule = iota // headers only: ACKs, READ requests, atomics, FLUSH, CNP
	anyPayload                      // 0..MTU bytes
	fixedPayload                    // exactly 8 bytes (ATOMIC_WRITE)
)

// Flags is what an opcode means to the engines on either end: the operation it belongs to, its
// place in the message and what it asks of the receiver, so that they ask the table instead of
// comparing opcode numbers.
type Flags uint32

// Meaning bits of Flags. The operation bits (FlagSend to FlagCNP) are exclusive: each known
// opcode has exactly one.
const (
	// FlagSend is a SEND packet, of any transport and variant.
	FlagSend Flags = 1 << iota
	// FlagWrite is an RDMA WRITE packet (not ATOMIC_WRITE).
	FlagWrite
	// FlagRead is an RDMA READ request.
	FlagRead
	// FlagReadResponse is an RDMA READ response packet.
	FlagReadResponse
	// FlagAtomic is an atomic request with an AtomicETH: COMPARE_SWAP or FETCH_ADD.
	FlagAtomic
	// FlagAtomicWrite is an ATOMIC_WRITE request.
	FlagAtomicWrite
	// FlagFlush is a FLUSH request.
	FlagFlush
	// FlagAck is an acknowledgement: ACKNOWLEDGE or ATOMIC_ACKNOWLEDGE.
	FlagAck
	// FlagCNP is a congestion notification.
	FlagCNP
	// FlagImm is a packet that carries immediate data (an ImmDt header).
	FlagImm
	// FlagInv is a SEND that invalidates an rkey (an IETH header).
	FlagInv
	// FlagStart opens a message: FIRST and ONLY packets.
	FlagStart
	// FlagEnd closes a message: LAST and ONLY packets.
	FlagEnd
	// FlagNeedsRecv takes a receive WQE when it arrives: the packet that opens a SEND, and the
	// packet of a WRITE that carries immediate data.
	FlagNeedsRecv
	// FlagCompletes ends with a receive completion at the responder: the packet that closes a
	// SEND, and a WRITE packet with immediate data.
	FlagCompletes
	// FlagResponse is a packet a responder sends: READ responses and acknowledgements.
	FlagResponse
)

// opFlags is the set of operation bits.
const opFlags = FlagSend | FlagWrite | FlagRead | FlagReadResponse | FlagAtomic | FlagAtomicWrite | FlagFlush | FlagAck | FlagCNP

// OpcodeInfo describes one opcode.
type OpcodeInfo struct {
	Name      string
	Transport Transport
	Class     Class
	Ext       Ext
	// Flags is what the opcode means (see Flags).
	Flags Flags
	// Response is set for packets a responder sends: READ responses, ACKs and atomic ACKs.
	Response bool
	payload  payloadRule
}

// HasPayload says whether the opcode may carry data after its headers.
func (i *OpcodeInfo) HasPayload() bool { return i.payload != noPayload }

// FixedPayload is the exact payload length the opcode requires (8 for ATOMIC_WRITE), or 0 when it
// takes any length up to the MTU, or none.
func (i *OpcodeInfo) FixedPayload() int {
	if i.payload == fixedPayload {
		return atomicWritePayloadBytes
	}
	return 0
}

// Is says whether the opcode has any of the flags in f.
func (i *OpcodeInfo) Is(f Flags) bool { return i.Flags&f != 0 }

var opcodes [opcodeTableLen]OpcodeInfo

// def enters an opcode; op is its operation bit, and the bits that follow from the class and the
// extension headers are added here.
func def(op Opcode, name string, t Transport, c Class, ext Ext, p payloadRule, resp bool, fl Flags) {
	if c == First || c == Only {
		fl |= FlagStart
	}
	if c == Last || c == Only {
		fl |= FlagEnd
	}
	if ext&ExtImmDt != 0 {
		fl |= FlagImm
	}
	if ext&ExtIETH != 0 {
		fl |= FlagInv
	}
	if resp {
		fl |= FlagResponse
	}
	switch {
	case fl&FlagSend != 0:
		if fl&FlagStart != 0 {
			fl |= FlagNeedsRecv
		}
		if fl&FlagEnd != 0 {
			fl |= FlagCompletes
		}
	case fl&FlagWrite != 0 && fl&FlagImm != 0:
		fl |= FlagNeedsRecv | FlagCompletes
	}
	opcodes[op] = OpcodeInfo{Name: name, Transport: t, Class: c, Ext: ext, Flags: fl, Response: resp, payload: p}
}

func init() {
	// Sends and writes exist in RC and UC with the same low code; UC has no READ, atomics or
	// acknowledgements.
	for _, t := range []struct {
		base Opcode
		tr   Transport
		pfx  string
	}{{0x00, RC, "RC_"}, {0x20, UC, "UC_"}} {
		b, p := t.base, t.pfx
		def(b+0x00, p+"SEND_FIRST", t.tr, First, 0, anyPayload, false, FlagSend)
		def(b+0x01, p+"SEND_MIDDLE", t.tr, Middle, 0, anyPayload, false, FlagSend)
		def(b+0x02, p+"SEND_LAST", t.tr, Last, 0, anyPayload, false, FlagSend)
		def(b+0x03, p+"SEND_LAST_WITH_IMMEDIATE", t.tr, Last, ExtImmDt, anyPayload, false, FlagSend)
		def(b+0x04, p+"SEND_ONLY", t.tr, Only, 0, anyPayload, false, FlagSend)
		def(b+0x05, p+"SEND_ONLY_WITH_IMMEDIATE", t.tr, Only, ExtImmDt, anyPayload, false, FlagSend)
		def(b+0x06, p+"RDMA_WRITE_FIRST", t.tr, First, ExtRETH, anyPayload, false, FlagWrite)
		def(b+0x07, p+"RDMA_WRITE_MIDDLE", t.tr, Middle, 0, anyPayload, false, FlagWrite)
		def(b+0x08, p+"RDMA_WRITE_LAST", t.tr, Last, 0, anyPayload, false, FlagWrite)
		def(b+0x09, p+"RDMA_WRITE_LAST_WITH_IMMEDIATE", t.tr, Last, ExtImmDt, anyPayload, false, FlagWrite)
		def(b+0x0A, p+"RDMA_WRITE_ONLY", t.tr, Only, ExtRETH, anyPayload, false, FlagWrite)
		def(b+0x0B, p+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", t.tr, Only, ExtRETH|ExtImmDt, anyPayload, false, FlagWrite)
	}
	def(RCReadRequest, "RC_RDMA_READ_REQUEST", RC, Only, ExtRETH, noPayload, false, FlagRead)
	def(RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", RC, First, ExtAETH, anyPayload, true, FlagReadResponse)
	def(RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", RC, Middle, 0, anyPayload, true, FlagReadResponse)
	def(RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", RC, Last, ExtAETH, anyPayload, true, FlagReadResponse)
	def(RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", RC, Only, ExtAETH, anyPayload, true, FlagReadResponse)
	def(RCAcknowledge, "RC_ACKNOWLEDGE", RC, Only, ExtAETH, noPayload, true, FlagAck)
	def(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", RC, Only, ExtAETH|ExtAtomicAckETH, noPayload, true, FlagAck)
	def(RCCompareSwap, "RC_COMPARE_SWAP", RC, Only, ExtAtomicETH, noPayload, false, FlagAtomic)
	def(RCFetchAdd, "RC_FETCH_ADD", RC, Only, ExtAtomicETH, noPayload, false, FlagAtomic)
	def(RCSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", RC, Last, ExtIETH, anyPayload, false, FlagSend)
	def(RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", RC, Only, ExtIETH, anyPayload, false, FlagSend)
	def(RCFlush, "RC_FLUSH", RC, Only, ExtFETH|ExtRETH, noPayload, false, FlagFlush)
	def(RCAtomicWrite, "RC_ATOMIC_WRITE", RC, Only, ExtRETH, fixedPayload, false, FlagAtomicWrite)
	def(UDSendOnly, "UD_SEND_ONLY", UD, Only, ExtDETH, anyPayload, false, FlagSend)
	def(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", UD, Only, ExtDETH|ExtImmDt, anyPayload, false, FlagSend)
	def(CNP, "CNP", CongestionNotification, Only, ExtCNP, noPayload, false, FlagCNP)
}

// Info returns the table entry of the opcode, or nil when softirdma does not know it.
func (op Opcode) Info() *OpcodeInfo {
	if opcodes[op].Name == "" {
		return nil
	}
	return &opcodes[op]
}

// Is says whether the opcode has any of the flags in f; an unknown opcode has none.
func (op Opcode) Is(f Flags) bool { return opcodes[op].Flags&f != 0 }

// Has says whether the opcode carries any of the extension headers in e.
func (op Opcode) Has(e Ext) bool { return opcodes[op].Ext&e != 0 }

// Known says whether the opcode is in the table.
func (op Opcode) Known() bool { return opcodes[op].Name != "" }

// String returns the opcode's name, or its hex value when unknown.
func (op Opcode) String() string {
	if n := opcodes[op].Name; n != "" {
		return n
	}
	return "OPCODE_0x" + strconv.FormatUint(uint64(op)|0x100, 16)[1:]
}

// Opcodes lists every known opcode in numeric order.
func Opcodes() []Opcode {
	var out []Opcode
	for i := range opcodes {
		if opcodes[i].Name != "" {
			out = append(out, Opcode(i))
		}
	}
	return out
}

// Syndrome is the AETH syndrome byte.
type Syndrome uint8

// SyndromeType is the top three bits of a syndrome.
type SyndromeType uint8

// Syndrome types (rxe masks them with 0xE0).
const (
	SyndromeACK      SyndromeType = 0x00
	SyndromeRNR      SyndromeType = 0x20
	SyndromeReserved SyndromeType = 0x40
	SyndromeNAK      SyndromeType = 0x60
)

// NAK codes (syndrome 0x60 | code).
const (
	NAKPSNSeqError    Syndrome = 0x60
	NAKInvalidRequest Syndrome = 0x61
	NAKRemoteAccess   Syndrome = 0x62
	NAKRemoteOp       Syndrome = 0x63
	NAKInvalidRDReq   Syndrome = 0x64
	// ACKUnlimited is the ACK with credit code 31 ("no credit information"), the only ACK rxe sends.
	ACKUnlimited Syndrome = 0x1F
)

// Type returns the syndrome's type bits.
func (s Syndrome) Type() SyndromeType { return SyndromeType(s & 0xE0) }

// Value returns the low five bits: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1F }

// Name is the short name of the syndrome: ACK, RNR, NAK_PSN_SEQ_ERR, NAK_INV_REQ,
// NAK_REM_ACCESS, NAK_REM_OP, NAK_INV_RD_REQ, NAK_RESERVED, or RESERVED.
func (s Syndrome) Name() string {
	switch s.Type() {
	case SyndromeACK:
		return "ACK"
	case SyndromeRNR:
		return "RNR"
	case SyndromeNAK:
		switch s {
		case NAKPSNSeqError:
			return "NAK_PSN_SEQ_ERR"
		case NAKInvalidRequest:
			return "NAK_INV_REQ"
		case NAKRemoteAccess:
			return "NAK_REM_ACCESS"
		case NAKRemoteOp:
			return "NAK_REM_OP"
		case NAKInvalidRDReq:
			return "NAK_INV_RD_REQ"
		}
		return "NAK_RESERVED"
	}
	return "RESERVED"
}

// String renders the syndrome as its name with its value, e.g. "ACK(credits=31)",
// "RNR(timer=1,0.01ms)" or "NAK_REM_ACCESS".
func (s Syndrome) String() string {
	switch s.Type() {
	case SyndromeACK:
		return "ACK(credits=" + strconv.Itoa(int(s.Value())) + ")"
	case SyndromeRNR:
		return "RNR(timer=" + strconv.Itoa(int(s.Value())) + "," +
			strconv.FormatFloat(float64(RNRTimerMicros(s.Value()))/1000, 'f', -1, 64) + "ms)"
	case SyndromeNAK:
		return s.Name()
	}
	return "RESERVED(0x" + strconv.FormatUint(uint64(s)|0x100, 16)[1:] + ")"
}

// rnrTimerMicros is the IBTA table of RNR NAK timer codes in microseconds (code 0 is the longest).
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerMicros decodes an RNR timer code (0-31) into microseconds, following IBTA (code 25 is
// 61440 µs, not rxe's 61410).
func RNRTimerMicros(code uint8) uint32 { return rnrTimerMicros[code&0x1F] }
