// Package mad reads and writes the common header of InfiniBand management datagrams (MADs, IBTA
// 13.4.2): the 256-byte datagrams the GSI QP (QP1) carries, such as the connection manager's REQ,
// REP and RTU. It names management classes, methods and the connection manager's attributes, for
// tools that show what crossed the wire and for the connection manager that sends them. It holds
// no state and answers nothing.
package mad

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/softirdma/softirdma/internal/names"
)

// Len is the size of every MAD on the GSI QP; HeaderLen that of the common header that starts it.
const (
	Len       = 256
	HeaderLen = 24
)

// GSIQKey is the Q_Key of every datagram to or from a GSI QP (IBTA 13.5.3.1).
const GSIQKey = 0x80010000

// BaseVersion is the base version of every MAD this package knows (IBTA 13.4.2).
const BaseVersion = 1

// Header is the common MAD header.
type Header struct {
	BaseVersion   uint8
	MgmtClass     Class
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        uint16
	AttrModifier  uint32
}

// ErrShort is what Parse returns for fewer bytes than the common header.
var ErrShort = errors.New("mad: shorter than the 24-byte common header")

// Parse reads the common header at the start of b, which must hold at least HeaderLen bytes;
// the rest of b is the class's own data, not looked at.
func Parse(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShort
	}
	return Header{
		BaseVersion:   b[0],
		MgmtClass:     Class(b[1]),
		ClassVersion:  b[2],
		Method:        Method(b[3]),
		Status:        binary.BigEndian.Uint16(b[4:]),
		ClassSpecific: binary.BigEndian.Uint16(b[6:]),
		TID:           binary.BigEndian.Uint64(b[8:]),
		AttrID:        binary.BigEndian.Uint16(b[16:]),
		AttrModifier:  binary.BigEndian.Uint32(b[20:]),
	}, nil
}

// Put writes h as the common header at the start of b, which must hold at least HeaderLen bytes;
// the rest of b is left as it is.
func (h Header) Put(b []byte) error {
	if len(b) < HeaderLen {
		return fmt.Errorf("mad: %d bytes for the %d-byte common header", len(b), HeaderLen)
	}
	b[0], b[1], b[2], b[3] = h.BaseVersion, byte(h.MgmtClass), h.ClassVersion, byte(h.Method)
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TID)
	binary.BigEndian.PutUint16(b[16:], h.AttrID)
	binary.BigEndian.PutUint16(b[18:], 0) // reserved
	binary.BigEndian.PutUint32(b[20:], h.AttrModifier)
	return nil
}

// Class is a management class (IBTA table 135).
type Class uint8

// Management classes a GSI QP carries, and the subnet manager's two for completeness.
const (
	ClassSubnLID Class = 0x01
	ClassSubnAdm Class = 0x03
	ClassPerf    Class = 0x04
	ClassBM      Class = 0x05
	ClassDevMgt  Class = 0x06
	ClassCM      Class = 0x07
	ClassSNMP    Class = 0x08
	ClassSubnDR  Class = 0x81
	ClassCongMgt Class = 0x21
)

// String is the class's short name, or its number.
func (c Class) String() string {
	if _, known := classNames[c]; !known && (c >= 0x30 && c <= 0x4f || c >= 0x09 && c <= 0x0f) {
		return fmt.Sprintf("Vendor(0x%02x)", uint8(c))
	}
	return names.Or(classNames, c, "0x%02x")
}

var classNames = map[Class]string{
	ClassSubnLID: "SMP", ClassSubnAdm: "SA", ClassPerf: "PerfMgt", ClassBM: "BM", ClassDevMgt: "DevMgt",
	ClassCM: "CM", ClassSNMP: "SNMP", ClassSubnDR: "SMP(DR)", ClassCongMgt: "CongMgt",
}

// Method is a MAD's method; the high bit marks a response.
type Method uint8

// Methods of IBTA table 136.
const (
	MethodGet        Method = 0x01
	MethodSet        Method = 0x02
	MethodSend       Method = 0x03
	MethodTrap       Method = 0x05
	MethodReport     Method = 0x06
	MethodTrapRepess Method = 0x07
	MethodGetResp    Method = 0x81
	MethodReportResp Method = 0x86
)

// String is the method's name, or its number.
func (m Method) String() string { return names.Or(methodNames, m, "0x%02x") }

var methodNames = map[Method]string{
	MethodGet: "Get", MethodSet: "Set", MethodSend: "Send", MethodTrap: "Trap", MethodReport: "Report",
	MethodTrapRepess: "TrapRepress", MethodGetResp: "GetResp", MethodReportResp: "ReportResp",
}

// Connection manager attributes (IBTA table 104): the messages of connection establishment.
const (
	CMClassPortInfo uint16 = 0x0001
	CMREQ           uint16 = 0x0010
	CMMRA           uint16 = 0x0011
	CMREJ           uint16 = 0x0012
	CMREP           uint16 = 0x0013
	CMRTU           uint16 = 0x0014
	CMDREQ          uint16 = 0x0015
	CMDREP          uint16 = 0x0016
	CMSIDRREQ       uint16 = 0x0017
	CMSIDRREP       uint16 = 0x0018
	CMLAP           uint16 = 0x0019
	CMAPR           uint16 = 0x001A
)

var cmAttrNames = map[uint16]string{
	CMClassPortInfo: "ClassPortInfo", CMREQ: "REQ", CMMRA: "MRA", CMREJ: "REJ", CMREP: "REP", CMRTU: "RTU",
	CMDREQ: "DREQ", CMDREP: "DREP", CMSIDRREQ: "SIDR_REQ", CMSIDRREP: "SIDR_REP", CMLAP: "LAP", CMAPR: "APR",
}

// AttrName is the attribute's name where the class is one this package knows the attributes of
// (the connection manager's; ClassPortInfo for any class), or its number.
func (h Header) AttrName() string {
	if h.AttrID == CMClassPortInfo {
		return "ClassPortInfo"
	}
	if h.MgmtClass == ClassCM {
		return names.Or(cmAttrNames, h.AttrID, "0x%04x")
	}
	return fmt.Sprintf("0x%04x", h.AttrID)
}

// String is "class/attribute method", as "CM/REQ Send".
func (h Header) String() string {
	return fmt.Sprintf("%s/%s %s", h.MgmtClass, h.AttrName(), h.Method)
}
