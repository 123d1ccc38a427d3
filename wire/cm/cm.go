// Package cm reads and writes the messages of InfiniBand connection management (IBTA volume 1,
// chapter 12) as Linux's ib_cm puts them in MADs on RoCEv2: REQ, MRA, REJ, REP, RTU, DREQ, DREP,
// SIDR_REQ and SIDR_REP, and the header rdma_cm puts first in a REQ's or SIDR_REQ's private data
// (cma_hdr) with the service IDs of its port spaces. Each message is the 232 bytes after the MAD's
// 24-byte common header (see wire/mad, whose attribute IDs and lengths it shares); fields are
// big-endian, and packed fields take their bits from the most significant down, as the tables of
// chapter 12 lay them out. It imports nothing of softirdma but wire/mad and holds no state: the
// connection manager that sends them is elsewhere.
package cm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softirdma/softirdma/wire/mad"
)

// DataLen is the length of a CM message: a 256-byte MAD less its common header.
const DataLen = mad.Len - mad.HeaderLen

// Attribute IDs of the connection manager's messages (the MAD header's AttrID): wire/mad's, by
// the names of this package's messages.
const (
	AttrREQ     = mad.CMREQ
	AttrMRA     = mad.CMMRA
	AttrREJ     = mad.CMREJ
	AttrREP     = mad.CMREP
	AttrRTU     = mad.CMRTU
	AttrDREQ    = mad.CMDREQ
	AttrDREP    = mad.CMDREP
	AttrSIDRREQ = mad.CMSIDRREQ
	AttrSIDRREP = mad.CMSIDRREP
)

// ClassVersion is the connection manager class version Linux's ib_cm sends (IB_CM_CLASS_VERSION).
const ClassVersion = 2

// MADHeader is the common MAD header of a CM message of attribute attr in transaction tid, as
// ib_cm sends one: base version 1, the CM class of version 2, method Send.
func MADHeader(tid uint64, attr uint16) mad.Header {
	return mad.Header{BaseVersion: mad.BaseVersion, MgmtClass: mad.ClassCM, ClassVersion: ClassVersion, Method: mad.MethodSend, TID: tid, AttrID: attr}
}

// Private data lengths (IBTA table 105).
const (
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJPrivateLen     = 148
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	SIDRREQPrivateLen = 216
	SIDRREPPrivateLen = 136
	// ARILen is the size of a REJ's additional rejection information, and of a SIDR_REP's.
	ARILen = 72
)

// ErrLen is what a parser returns for data other than DataLen bytes long.
var ErrLen = errors.New("cm: a CM message is 232 bytes")

func check(b []byte) error {
	if len(b) != DataLen {
		return fmt.Errorf("%w, not %d", ErrLen, len(b))
	}
	return nil
}

// begin readies b for a Put: DataLen bytes, all zero, so that reserved bits are.
func begin(b []byte) error {
	if err := check(b); err != nil {
		return err
	}
	clear(b)
	return nil
}

// ids reads the two communication IDs most messages start with: the sender's, then the
// receiver's.
func ids(b []byte) (local, remote uint32) {
	return binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
}

func putIDs(b []byte, local, remote uint32) {
	binary.BigEndian.PutUint32(b, local)
	binary.BigEndian.PutUint32(b[4:], remote)
}

// get24 reads the 24 bits at the top of the big-endian word at b.
func get24(b []byte) uint32 { return binary.BigEndian.Uint32(b) >> 8 }

// put24 writes v's low 24 bits at the top of the word at b, keeping its low byte.
func put24(b []byte, v uint32) {
	binary.BigEndian.PutUint32(b, v<<8|uint32(b[3]))
}

// bits reads n bits of byte x starting at bit off counted from the most significant.
func bits(x byte, off, n uint) uint8 { return (x >> (8 - off - n)) & (1<<n - 1) }

// setBits writes v into n bits of *x starting at bit off from the most significant.
func setBits(x *byte, off, n uint, v uint8) {
	mask := byte(1<<n-1) << (8 - off - n)
	*x = *x&^mask | (v<<(8-off-n))&mask
}

func flag(x byte, off uint) bool { return bits(x, off, 1) != 0 }

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// Path is one path of a REQ: the primary or the alternate.
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits
}

func (p *Path) parse(b []byte) {
	p.LocalLID, p.RemoteLID = binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = binary.BigEndian.Uint32(b[36:]) >> 12
	p.PacketRate = b[39] & 0x3f
	p.TrafficClass, p.HopLimit = b[40], b[41]
	p.SL, p.SubnetLocal = bits(b[42], 0, 4), flag(b[42], 4)
	p.LocalACKTimeout = bits(b[43], 0, 5)
}

func (p *Path) put(b []byte) {
	binary.BigEndian.PutUint16(b, p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(b[36:], p.FlowLabel<<12)
	b[39] = p.PacketRate & 0x3f
	b[40], b[41] = p.TrafficClass, p.HopLimit
	setBits(&b[42], 0, 4, p.SL)
	setBits(&b[42], 4, 1, b2u(p.SubnetLocal))
	setBits(&b[43], 0, 5, p.LocalACKTimeout)
}

// REQ asks for a connection (table 106).
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits: 4.096 us x 2^n
	TransportServiceType    uint8  // 2 bits: 0 RC, 1 UC, 3 XRC
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, the ibv_mtu enum
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary, Alternate      Path
	SAPSupported            bool
	Private                 [REQPrivateLen]byte
}

// ParseREQ reads a REQ from a CM message's 232 bytes.
func ParseREQ(b []byte) (REQ, error) {
	var m REQ
	if err := check(b); err != nil {
		return m, err
	}
	m.LocalCommID = binary.BigEndian.Uint32(b)
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	m.LocalCAGUID = binary.BigEndian.Uint64(b[16:])
	m.LocalQKey = binary.BigEndian.Uint32(b[28:])
	m.LocalQPN, m.ResponderResources = get24(b[32:]), b[35]
	m.LocalEECN, m.InitiatorDepth = get24(b[36:]), b[39]
	m.RemoteEECN = get24(b[40:])
	m.RemoteCMResponseTimeout, m.TransportServiceType, m.EndToEndFlowControl = bits(b[43], 0, 5), bits(b[43], 5, 2), flag(b[43], 7)
	m.StartingPSN = get24(b[44:])
	m.LocalCMResponseTimeout, m.RetryCount = bits(b[47], 0, 5), bits(b[47], 5, 3)
	m.PKey = binary.BigEndian.Uint16(b[48:])
	m.PathMTU, m.RDCExists, m.RNRRetryCount = bits(b[50], 0, 4), flag(b[50], 4), bits(b[50], 5, 3)
	m.MaxCMRetries, m.SRQ, m.ExtendedTransportType = bits(b[51], 0, 4), flag(b[51], 4), bits(b[51], 5, 3)
	m.Primary.parse(b[52:96])
	m.Alternate.parse(b[96:140])
	m.SAPSupported = flag(b[139], 5)
	copy(m.Private[:], b[140:])
	return m, nil
}

// Put writes the REQ into b, which must be DataLen bytes; reserved bits are zero.
func (m *REQ) Put(b []byte) error {
	if err := begin(b); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, m.LocalCommID)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	binary.BigEndian.PutUint64(b[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(b[28:], m.LocalQKey)
	put24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	setBits(&b[43], 0, 5, m.RemoteCMResponseTimeout)
	setBits(&b[43], 5, 2, m.TransportServiceType)
	setBits(&b[43], 7, 1, b2u(m.EndToEndFlowControl))
	put24(b[44:], m.StartingPSN)
	setBits(&b[47], 0, 5, m.LocalCMResponseTimeout)
	setBits(&b[47], 5, 3, m.RetryCount)
	binary.BigEndian.PutUint16(b[48:], m.PKey)
	setBits(&b[50], 0, 4, m.PathMTU)
	setBits(&b[50], 4, 1, b2u(m.RDCExists))
	setBits(&b[50], 5, 3, m.RNRRetryCount)
	setBits(&b[51], 0, 4, m.MaxCMRetries)
	setBits(&b[51], 4, 1, b2u(m.SRQ))
	setBits(&b[51], 5, 3, m.ExtendedTransportType)
	m.Primary.put(b[52:96])
	m.Alternate.put(b[96:140])
	setBits(&b[139], 5, 1, b2u(m.SAPSupported))
	copy(b[140:], m.Private[:])
	return nil
}

// MRA says a message was received and its answer will take longer (table 107).
type MRA struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              uint8 // 2 bits: 0 REQ, 1 REP, 2 LAP
	ServiceTimeout            uint8 // 5 bits
	Private                   [MRAPrivateLen]byte
}

// ParseMRA reads an MRA.
func ParseMRA(b []byte) (MRA, error) {
	var m MRA
	if err := check(b); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = ids(b)
	m.MessageMRAed, m.ServiceTimeout = bits(b[8], 0, 2), bits(b[9], 0, 5)
	copy(m.Private[:], b[10:])
	return m, nil
}

// Put writes the MRA into b.
func (m *MRA) Put(b []byte) error {
	if err := begin(b); err != nil {
		return err
	}
	putIDs(b, m.LocalCommID, m.RemoteCommID)
	setBits(&b[8], 0, 2, m.MessageMRAed)
	setBits(&b[9], 0, 5, m.ServiceTimeout)
	copy(b[10:], m.Private[:])
	return nil
}

// REJ refuses a REQ or REP (table 108).
type REJ struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           uint8 // 2 bits: 0 REQ, 1 REP, 2 no message
	RejectedInfoLength        uint8 // 7 bits
	Reason                    RejectReason
	ARI                       [ARILen]byte
	Private                   [REJPrivateLen]byte
}

// ParseREJ reads a REJ.
func ParseREJ(b []byte) (REJ, error) {
	var m REJ
	if err := check(b); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = ids(b)
	m.MessageRejected, m.RejectedInfoLength = bits(b[8], 0, 2), bits(b[9], 0, 7)
	m.Reason = RejectReason(binary.BigEndian.Uint16(b[10:]))
	copy(m.ARI[:], b[12:84])
	copy(m.Private[:], b[84:])
	return m, nil
}

// Put writes the REJ into b.
func (m *REJ) Put(b []byte) error {
	if err := begin(b); err != nil {
		return err
	}
	putIDs(b, m.LocalCommID, m.RemoteCommID)
	setBits(&b[8], 0, 2, m.MessageRejected)
	setBits(&b[9], 0, 7, m.RejectedInfoLength)
	binary.BigEndian.PutUint16(b[10:], uint16(m.Reason))
	copy(b[12:84], m.ARI[:])
	copy(b[84:], m.Private[:])
	return nil
}

// REP accepts a REQ (table 110).
type REP struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	EndToEndFlowControl       bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	Private                   [REPPrivateLen]byte
}

// ParseREP reads a REP.
func ParseREP(b []byte) (REP, error) {
	var m REP
	if err := check(b); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = ids(b)
	m.LocalQKey = binary.BigEndian.Uint32(b[8:])
	m.LocalQPN, m.LocalEECN, m.StartingPSN = get24(b[12:]), get24(b[16:]), get24(b[20:])
	m.ResponderResources, m.InitiatorDepth = b[24], b[25]
	m.TargetACKDelay, m.FailoverAccepted, m.EndToEndFlowControl = bits(b[26], 0, 5), bits(b[26], 5, 2), flag(b[26], 7)
	m.RNRRetryCount, m.SRQ = bits(b[27], 0, 3), flag(b[27], 3)
	m.LocalCAGUID = binary.BigEndian.Uint64(b[28:])
	copy(m.Private[:], b[36:])
	return m, nil
}

// Put writes the REP into b.
func (m *REP) Put(b []byte) error {
	if err := begin(b); err != nil {
		return err
	}
	putIDs(b, m.LocalCommID, m.RemoteCommID)
	binary.BigEndian.PutUint32(b[8:], m.LocalQKey)
	put24(b[12:], m.LocalQPN)
	put24(b[16:], m.LocalEECN)
	put24(b[20:], m.StartingPSN)
	b[24], b[25] = m.ResponderResources, m.InitiatorDepth
	setBits(&b[26], 0, 5, m.TargetACKDelay)
	setBits(&b[26], 5, 2, m.FailoverAccepted)
	setBits(&b[26], 7, 1, b2u(m.EndToEndFlowControl))
	setBits(&b[27], 0, 3, m.RNRRetryCount)
	setBits(&b[27], 3, 1, b2u(m.SRQ))
	binary.BigEndian.PutUint64(b[28:], m.LocalCAGUID)
	copy(b[36:], m.Private[:])
	return nil
}

// Pair is a message that names both ends and carries private data from an offset: RTU (table
// 111), DREP (113), and DREQ (112), which also names the QP it disconnects.
type Pair struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // DREQ only, 24 bits
	Private                   []byte // RTU and DREP: 224 bytes; DREQ: 220
}

// ParseRTU, ParseDREP and ParseDREQ read those messages; Private aliases b.
func ParseRTU(b []byte) (Pair, error)  { return parsePair(b, 8, false) }
func ParseDREP(b []byte) (Pair, error) { return parsePair(b, 8, false) }
func ParseDREQ(b []byte) (Pair, error) { return parsePair(b, 12, true) }

func parsePair(b []byte, priv int, qpn bool) (Pair, error) {
	var m Pair
	if err := check(b); err != nil {
		return m, err
	}
	m.LocalCommID, m.RemoteCommID = ids(b)
	if qpn {
		m.RemoteQPN = get24(b[8:])
	}
	m.Private = b[priv:]
	return m, nil
}

// PutRTU, PutDREP and PutDREQ write those messages into b; private data longer than the
// message holds is an error.
func (m *Pair) PutRTU(b []byte) error  { return m.put(b, 8, false) }
func (m *Pair) PutDREP(b []byte) error { return m.put(b, 8, false) }
func (m *Pair) PutDREQ(b []byte) error { return m.put(b, 12, true) }

func (m *Pair) put(b []byte, priv int, qpn bool) error {
	if err := check(b); err != nil {
		return err
	}
	if len(m.Private) > DataLen-priv {
		return fmt.Errorf("cm: %d bytes of private data, the message holds %d", len(m.Private), DataLen-priv)
	}
	clear(b)
	putIDs(b, m.LocalCommID, m.RemoteCommID)
	if qpn {
		put24(b[8:], m.RemoteQPN)
	}
	copy(b[priv:], m.Private)
	return nil
}

// SIDRREQ asks a service for its UD QP (table 119).
type SIDRREQ struct {
	RequestID uint32
	PKey      uint16
	ServiceID uint64
	Private   [SIDRREQPrivateLen]byte
}

// ParseSIDRREQ reads a SIDR_REQ.
func ParseSIDRREQ(b []byte) (SIDRREQ, error) {
	var m SIDRREQ
	if err := check(b); err != nil {
		return m, err
	}
	m.RequestID, m.PKey, m.ServiceID = binary.BigEndian.Uint32(b), binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint64(b[8:])
	copy(m.Private[:], b[16:])
	return m, nil
}

// Put writes the SIDR_REQ into b.
func (m *SIDRREQ) Put(b []byte) error {
	if err := begin(b); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, m.RequestID)
	binary.BigEndian.PutUint16(b[4:], m.PKey)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	copy(b[16:], m.Private[:])
	return nil
}

// SIDRREP answers a SIDR_REQ (table 120).
type SIDRREP struct {
	RequestID  uint32
	Status     SIDRStatus
	AddInfoLen uint8
	QPN        uint32 // 24 bits
	ServiceID  uint64
	QKey       uint32
	AddInfo    [ARILen]byte
	Private    [SIDRREPPrivateLen]byte
}

// ParseSIDRREP reads a SIDR_REP.
func ParseSIDRREP(b []byte) (SIDRREP, error) {
	var m SIDRREP
	if err := check(b); err != nil {
		return m, err
	}
	m.RequestID, m.Status, m.AddInfoLen = binary.BigEndian.Uint32(b), SIDRStatus(b[4]), b[5]
	m.QPN, m.ServiceID, m.QKey = get24(b[8:]), binary.BigEndian.Uint64(b[12:]), binary.BigEndian.Uint32(b[20:])
	copy(m.AddInfo[:], b[24:96])
	copy(m.Private[:], b[96:])
	return m, nil
}

// Put writes the SIDR_REP into b.
func (m *SIDRREP) Put(b []byte) error {
	if err := begin(b); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, m.RequestID)
	b[4], b[5] = byte(m.Status), m.AddInfoLen
	put24(b[8:], m.QPN)
	binary.BigEndian.PutUint64(b[12:], m.ServiceID)
	binary.BigEndian.PutUint32(b[20:], m.QKey)
	copy(b[24:96], m.AddInfo[:])
	copy(b[96:], m.Private[:])
	return nil
}
