package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softirdma/softirdma/internal/names"
)

// RejectReason is a REJ's reason (IBTA table 109).
type RejectReason uint16

// Reasons Linux's ib_cm and rdma_cm send.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

// String is the reason's name as Linux spells it (IB_CM_REJ_...), or its number.
func (r RejectReason) String() string { return names.Or(rejectNames, r, "reason %d") }

var rejectNames = map[RejectReason]string{
	RejNoQP: "NO_QP", RejNoEEC: "NO_EEC", RejNoResources: "NO_RESOURCES", RejTimeout: "TIMEOUT",
	RejUnsupported: "UNSUPPORTED", RejInvalidCommID: "INVALID_COMM_ID", RejInvalidCommInstance: "INVALID_COMM_INSTANCE",
	RejInvalidServiceID: "INVALID_SERVICE_ID", RejInvalidTransportType: "INVALID_TRANSPORT_TYPE", RejStaleConn: "STALE_CONN",
	RejRDCNotExist: "RDC_NOT_EXIST", RejInvalidGID: "INVALID_GID", RejInvalidLID: "INVALID_LID", RejInvalidSL: "INVALID_SL",
	RejInvalidTrafficClass: "INVALID_TRAFFIC_CLASS", RejInvalidHopLimit: "INVALID_HOP_LIMIT", RejInvalidPacketRate: "INVALID_PACKET_RATE",
	RejInvalidAltGID: "INVALID_ALT_GID", RejInvalidAltLID: "INVALID_ALT_LID", RejInvalidAltSL: "INVALID_ALT_SL",
	RejInvalidAltTrafficClass: "INVALID_ALT_TRAFFIC_CLASS", RejInvalidAltHopLimit: "INVALID_ALT_HOP_LIMIT",
	RejInvalidAltPacketRate: "INVALID_ALT_PACKET_RATE", RejPortCMRedirect: "PORT_CM_REDIRECT", RejPortRedirect: "PORT_REDIRECT",
	RejInvalidMTU: "INVALID_MTU", RejInsufficientRespResources: "INSUFFICIENT_RESP_RESOURCES", RejConsumerDefined: "CONSUMER_DEFINED",
	RejInvalidRNRRetry: "INVALID_RNR_RETRY", RejDuplicateLocalCommID: "DUPLICATE_LOCAL_COMM_ID", RejInvalidClassVersion: "INVALID_CLASS_VERSION",
	RejInvalidFlowLabel: "INVALID_FLOW_LABEL", RejInvalidAltFlowLabel: "INVALID_ALT_FLOW_LABEL", RejVendorOptionNotSupported: "VENDOR_OPTION_NOT_SUPPORTED",
}

// SIDRStatus is a SIDR_REP's status (IBTA table 121).
type SIDRStatus uint8

const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

func (s SIDRStatus) String() string { return names.In(sidrNames[:], s, "status %d") }

var sidrNames = [...]string{"SUCCESS", "UNSUPPORTED", "REJECT", "NO_QP", "REDIRECT", "UNSUPPORTED_VERSION"}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space): with the port, it makes the
// service ID of a listener.
type PortSpace uint16

const (
	PSIPoIB PortSpace = 0x0002
	PSTCP   PortSpace = 0x0106
	PSUDP   PortSpace = 0x0111
	PSIB    PortSpace = 0x013F
)

func (p PortSpace) String() string { return names.Or(psNames, p, "0x%04x") }

var psNames = map[PortSpace]string{PSIPoIB: "IPOIB", PSTCP: "TCP", PSUDP: "UDP", PSIB: "IB"}

// ServiceID is the service ID rdma_cm gives port port in port space ps (cma_get_service_id).
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID reads an rdma_cm service ID back: its port space and port, and whether it is
// one (the top 32 bits zero and a port space rdma_cm has).
func SplitServiceID(id uint64) (PortSpace, uint16, bool) {
	ps := PortSpace(id >> 16)
	_, known := psNames[ps]
	return ps, uint16(id), id>>32 == 0 && known
}

// HeaderLen is the size of rdma_cm's header at the start of a REQ's or SIDR_REQ's private data.
const HeaderLen = 36

// Header is rdma_cm's header (struct cma_hdr): its version, and the connecting side's source
// port and both addresses. The destination port is in the service ID.
type Header struct {
	Version  uint8 // 0
	IPv6     bool
	SrcPort  uint16
	Src, Dst netip.Addr
}

// ErrHeader is what ParseHeader returns for private data that does not start with one.
var ErrHeader = errors.New("cm: no rdma_cm header")

// ParseHeader reads rdma_cm's header from the start of private data.
func ParseHeader(p []byte) (Header, error) {
	var h Header
	if len(p) < HeaderLen {
		return h, ErrHeader
	}
	h.Version = p[0]
	switch p[1] >> 4 {
	case 4:
	case 6:
		h.IPv6 = true
	default:
		return h, fmt.Errorf("%w: IP version %d", ErrHeader, p[1]>>4)
	}
	src, dst := addrsAt(p, h.IPv6)
	h.Src, h.Dst = addrFrom(src), addrFrom(dst)
	if h.Version != 0 {
		return h, fmt.Errorf("%w: version %d", ErrHeader, h.Version)
	}
	h.SrcPort = binary.BigEndian.Uint16(p[2:])
	return h, nil
}

// Put writes the header at the start of p, as rdma_cm does (IPv4 addresses in the last four of
// their sixteen bytes, the rest zero).
func (h *Header) Put(p []byte) error {
	if len(p) < HeaderLen {
		return fmt.Errorf("cm: %d bytes for a %d-byte header", len(p), HeaderLen)
	}
	clear(p[:HeaderLen])
	p[0] = h.Version
	binary.BigEndian.PutUint16(p[2:], h.SrcPort)
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() {
		return errors.New("cm: a header needs both addresses")
	}
	p[1] = 4 << 4
	if v6 := h.IPv6 || !src.Is4() || !dst.Is4(); v6 {
		p[1] = 6 << 4
		src, dst = netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16())
	}
	a, b := addrsAt(p, p[1] == 6<<4)
	copy(a, src.AsSlice())
	copy(b, dst.AsSlice())
	return nil
}

// addrFrom reads an address of the 4 or 16 bytes addrsAt gives.
func addrFrom(b []byte) netip.Addr {
	if len(b) == 4 {
		return netip.AddrFrom4([4]byte(b))
	}
	return netip.AddrFrom16([16]byte(b))
}

// addrsAt is where the header keeps its source and destination addresses: all sixteen bytes
// of each for IPv6, the last four for IPv4.
func addrsAt(p []byte, v6 bool) (src, dst []byte) {
	if v6 {
		return p[4:20], p[20:36]
	}
	return p[16:20], p[32:36]
}
