package wire

// The codec lives in wire/roce, which imports no gopacket so the engine need not; these names keep
// every program written against wire compiling unchanged.

import "github.com/softirdma/softirdma/wire/roce"

type (
	Path         = roce.Path
	Header       = roce.Header
	Builder      = roce.Builder
	Kind         = roce.Kind
	Error        = roce.Error
	Frame        = roce.Frame
	Parser       = roce.Parser
	BTH          = roce.BTH
	RETH         = roce.RETH
	AETH         = roce.AETH
	AtomicETH    = roce.AtomicETH
	AtomicAckETH = roce.AtomicAckETH
	ImmDt        = roce.ImmDt
	IETH         = roce.IETH
	DETH         = roce.DETH
	FETH         = roce.FETH
	Link         = roce.Link
	LinkStats    = roce.LinkStats
	Opcode       = roce.Opcode
	Ext          = roce.Ext
	Class        = roce.Class
	Transport    = roce.Transport
	Flags        = roce.Flags
	OpcodeInfo   = roce.OpcodeInfo
	Syndrome     = roce.Syndrome
	SyndromeType = roce.SyndromeType
)

const (
	KindShort              = roce.KindShort
	KindBadIPLength        = roce.KindBadIPLength
	KindBadUDPLength       = roce.KindBadUDPLength
	KindBadPad             = roce.KindBadPad
	KindUnknownOpcode      = roce.KindUnknownOpcode
	KindHeaderMismatch     = roce.KindHeaderMismatch
	KindBadICRC            = roce.KindBadICRC
	KindNotRoCE            = roce.KindNotRoCE
	EtherTypeIPv4          = roce.EtherTypeIPv4
	EtherTypeIPv6          = roce.EtherTypeIPv6
	EtherTypeVLAN          = roce.EtherTypeVLAN
	EtherTypeQinQ          = roce.EtherTypeQinQ
	BTHLen                 = roce.BTHLen
	RETHLen                = roce.RETHLen
	AETHLen                = roce.AETHLen
	AtomicETHLen           = roce.AtomicETHLen
	AtomicAckETHLen        = roce.AtomicAckETHLen
	ImmDtLen               = roce.ImmDtLen
	IETHLen                = roce.IETHLen
	DETHLen                = roce.DETHLen
	FETHLen                = roce.FETHLen
	CNPLen                 = roce.CNPLen
	ICRCLen                = roce.ICRCLen
	EthernetLen            = roce.EthernetLen
	VLANLen                = roce.VLANLen
	IPv4Len                = roce.IPv4Len
	IPv6Len                = roce.IPv6Len
	UDPLen                 = roce.UDPLen
	UDPPort                = roce.UDPPort
	PSNMask                = roce.PSNMask
	MaxFrameLen            = roce.MaxFrameLen
	RCSendFirst            = roce.RCSendFirst
	RCSendMiddle           = roce.RCSendMiddle
	RCSendLast             = roce.RCSendLast
	RCSendLastImm          = roce.RCSendLastImm
	RCSendOnly             = roce.RCSendOnly
	RCSendOnlyImm          = roce.RCSendOnlyImm
	RCWriteFirst           = roce.RCWriteFirst
	RCWriteMiddle          = roce.RCWriteMiddle
	RCWriteLast            = roce.RCWriteLast
	RCWriteLastImm         = roce.RCWriteLastImm
	RCWriteOnly            = roce.RCWriteOnly
	RCWriteOnlyImm         = roce.RCWriteOnlyImm
	RCReadRequest          = roce.RCReadRequest
	RCReadResponseFirst    = roce.RCReadResponseFirst
	RCReadResponseMiddle   = roce.RCReadResponseMiddle
	RCReadResponseLast     = roce.RCReadResponseLast
	RCReadResponseOnly     = roce.RCReadResponseOnly
	RCAcknowledge          = roce.RCAcknowledge
	RCAtomicAcknowledge    = roce.RCAtomicAcknowledge
	RCCompareSwap          = roce.RCCompareSwap
	RCFetchAdd             = roce.RCFetchAdd
	RCSendLastInv          = roce.RCSendLastInv
	RCSendOnlyInv          = roce.RCSendOnlyInv
	RCFlush                = roce.RCFlush
	RCAtomicWrite          = roce.RCAtomicWrite
	UCSendFirst            = roce.UCSendFirst
	UCSendMiddle           = roce.UCSendMiddle
	UCSendLast             = roce.UCSendLast
	UCSendLastImm          = roce.UCSendLastImm
	UCSendOnly             = roce.UCSendOnly
	UCSendOnlyImm          = roce.UCSendOnlyImm
	UCWriteFirst           = roce.UCWriteFirst
	UCWriteMiddle          = roce.UCWriteMiddle
	UCWriteLast            = roce.UCWriteLast
	UCWriteLastImm         = roce.UCWriteLastImm
	UCWriteOnly            = roce.UCWriteOnly
	UCWriteOnlyImm         = roce.UCWriteOnlyImm
	UDSendOnly             = roce.UDSendOnly
	UDSendOnlyImm          = roce.UDSendOnlyImm
	CNP                    = roce.CNP
	ExtDETH                = roce.ExtDETH
	ExtFETH                = roce.ExtFETH
	ExtRETH                = roce.ExtRETH
	ExtAtomicETH           = roce.ExtAtomicETH
	ExtAETH                = roce.ExtAETH
	ExtAtomicAckETH        = roce.ExtAtomicAckETH
	ExtImmDt               = roce.ExtImmDt
	ExtIETH                = roce.ExtIETH
	ExtCNP                 = roce.ExtCNP
	First                  = roce.First
	Middle                 = roce.Middle
	Last                   = roce.Last
	Only                   = roce.Only
	RC                     = roce.RC
	UC                     = roce.UC
	UD                     = roce.UD
	CongestionNotification = roce.CongestionNotification
	FlagSend               = roce.FlagSend
	FlagWrite              = roce.FlagWrite
	FlagRead               = roce.FlagRead
	FlagReadResponse       = roce.FlagReadResponse
	FlagAtomic             = roce.FlagAtomic
	FlagAtomicWrite        = roce.FlagAtomicWrite
	FlagFlush              = roce.FlagFlush
	FlagAck                = roce.FlagAck
	FlagCNP                = roce.FlagCNP
	FlagImm                = roce.FlagImm
	FlagInv                = roce.FlagInv
	FlagStart              = roce.FlagStart
	FlagEnd                = roce.FlagEnd
	FlagNeedsRecv          = roce.FlagNeedsRecv
	FlagCompletes          = roce.FlagCompletes
	FlagResponse           = roce.FlagResponse
	SyndromeACK            = roce.SyndromeACK
	SyndromeRNR            = roce.SyndromeRNR
	SyndromeReserved       = roce.SyndromeReserved
	SyndromeNAK            = roce.SyndromeNAK
	NAKPSNSeqError         = roce.NAKPSNSeqError
	NAKInvalidRequest      = roce.NAKInvalidRequest
	NAKRemoteAccess        = roce.NAKRemoteAccess
	NAKRemoteOp            = roce.NAKRemoteOp
	NAKInvalidRDReq        = roce.NAKInvalidRDReq
	ACKUnlimited           = roce.ACKUnlimited
)

var (
	ErrBuildOpcode = roce.ErrBuildOpcode
)

func NewBuilder(p Path) *Builder { return roce.NewBuilder(p) }

func PadFor(n int) int { return roce.PadFor(n) }

func SealFrame(frame []byte) error { return roce.SealFrame(frame) }

func NewFrameBuffer(n int) []byte { return roce.NewFrameBuffer(n) }

func WriteExt(dst []byte, ext Ext, h *Header) int { return roce.WriteExt(dst, ext, h) }

func IPv4Checksum(h []byte) uint16 { return roce.IPv4Checksum(h) }

func KindOf(err error) Kind { return roce.KindOf(err) }

func Malformed(err error) bool { return roce.Malformed(err) }

func ParseTransport(f *Frame, bth, end int) error { return roce.ParseTransport(f, bth, end) }

func Opcodes() []Opcode { return roce.Opcodes() }

func RNRTimerMicros(code uint8) uint32 { return roce.RNRTimerMicros(code) }
