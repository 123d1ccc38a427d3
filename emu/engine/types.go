// Package engine is the RDMA engine of softirdma and its Go verbs API: devices, protection
// domains, memory regions and windows (on top of keys), completion queues, shared receive queues
// and queue pairs with their transports, speaking RoCEv2 frames (wire/roce) over a Link, on a
// Clock it is given. It reads no clock and moves no frame itself: the simulator (emu/sim) and the
// real-time host (emu/realtime) supply both, so the engine cannot tell a simulated wire from a
// real one and carries no packet library.
//
// Names follow libibverbs (AllocPD, RegMR, CreateQP, Modify, PostSend, Poll ...) and every enum
// has libibverbs' numeric values, so RDMA programmers find what they expect.
//
// A verb that fails returns an error wrapping its errno (errors.Is(err, syscall.EINVAL)) and
// saying what was wrong. That includes a nil object where a verb takes a pointer, as its
// receiver or an argument (ConnectRC(qp, nil, o), a nil *QP's PostSend): EINVAL naming it,
// never a panic; and a zero object the engine did not make (&QP{}). Methods with no error to
// return (Num, State, Poll ...) need an object the engine made.
//
// The engine's locks are taken in one order, written in locks.go, and checked: built with the
// tag lockcheck, taking a lock out of that order panics, naming both locks. `make test` checks
// the engine's tests and its users' so:
//
//	go test -race -tags lockcheck ./emu/... ./hw/...
package engine

import (
	"fmt"

	"github.com/softirdma/softirdma/internal/names"
	"github.com/softirdma/softirdma/keys"
)

// Access flags and MW types are the key space's, re-exported so users of the verbs API need one
// import.
type (
	Access = keys.Access
	MWType = keys.MWType
)

const (
	AccessLocalWrite   = keys.LocalWrite
	AccessRemoteWrite  = keys.RemoteWrite
	AccessRemoteRead   = keys.RemoteRead
	AccessRemoteAtomic = keys.RemoteAtomic
	AccessMWBind       = keys.MWBind
	AccessZeroBased    = keys.ZeroBased
	AccessOnDemand     = keys.OnDemand
	// AccessFlushGlobal and AccessFlushPersistent let FLUSH requests of that placement type
	// reach an MR or window (IBV_ACCESS_FLUSH_GLOBAL, IBV_ACCESS_FLUSH_PERSISTENT).
	AccessFlushGlobal     = keys.FlushGlobal
	AccessFlushPersistent = keys.FlushPersistent

	MWType1  = keys.MWType1
	MWType2  = keys.MWType2
	MWType2A = keys.MWType2A
)

// WCStatus is enum ibv_wc_status. The statuses a failed key check completes with are the key
// space's (keys.Status), which an access error carries: WCStatus(ae.Status) is its completion
// status.
type WCStatus uint8

const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr                = WCStatus(keys.StatusLocQPOpErr)
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr                = WCStatus(keys.StatusLocProtErr)
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr                 = WCStatus(keys.StatusMWBindErr)
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr              = WCStatus(keys.StatusRemInvReqErr)
	WCRemAccessErr              = WCStatus(keys.StatusRemAccessErr)
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRDReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
)

var wcStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
	"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
	"REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
	"REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
	"GENERAL_ERR", "TM_ERR", "TM_RNDV_INCOMPLETE",
}

// String is the libibverbs name without the IBV_WC_ prefix.
func (s WCStatus) String() string { return names.In(wcStatusNames[:], s, "STATUS_%d") }

// QPState is enum ibv_qp_state.
type QPState uint8

const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

// The transport attributes a QP gets when nobody chose them: what ibv_rc_pingpong and perftest
// set, and what ConnectRC, the commands and the device's drivers use. An ACK timeout exponent of
// 14 is 4.096 us x 2^14, about 67 ms; a retry count of 7 is seven retries (IBTA; rxe retries
// forever), an RNR retry count of 7 retries forever; RNR timer code 12 is 0.64 ms.
const (
	DefaultTimeout     = 14
	DefaultRetryCnt    = 7
	DefaultRNRRetry    = 7
	DefaultMinRNRTimer = 12
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string { return names.In(qpStateNames[:], s, "QPS_%d") }

// QPType is enum ibv_qp_type, and the kernel's IB_QPT_GSI for the port's GSI QP, which
// libibverbs does not create.
type QPType uint8

const (
	QPTypeGSI QPType = 1 // QP1, the port's general services QP: a UD QP for MADs (kernel verbs' IB_QPT_GSI)
	QPTypeRC  QPType = 2
	QPTypeUC  QPType = 3
	QPTypeUD  QPType = 4
)

var qpTypeNames = [...]string{QPTypeGSI: "GSI", QPTypeRC: "RC", QPTypeUC: "UC", QPTypeUD: "UD"}

func (t QPType) String() string { return names.In(qpTypeNames[:], t, "QPT_%d") }

// NetworkType is the network header a datagram arrived with (the kernel's enum
// rdma_network_type, ib_wc.network_hdr_type).
type NetworkType uint8

const (
	NetworkIB   NetworkType = 0
	NetworkIPv4 NetworkType = 2
	NetworkIPv6 NetworkType = 3
)

// AttrMask is enum ibv_qp_attr_mask: which fields of a QPAttr a Modify call sets.
type AttrMask uint32

const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
	AttrRateLimit        AttrMask = 1 << 25
)

// MTU is enum ibv_mtu: 1 = 256 bytes ... 5 = 4096 bytes.
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// MTUOf is the MTU of n bytes, if n is one of 256, 512, 1024, 2048 and 4096.
func MTUOf(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// Bytes is the MTU in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// WROpcode is enum ibv_wr_opcode, plus REG_MR (kernel verbs' fast-register work request).
type WROpcode uint8

const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
	// WRFlush asks the responder to make earlier placements at the target visible or
	// persistent (IBTA 1.5 memory placement extensions); see FlushInfo.
	WRFlush WROpcode = 14
	// WRAtomicWrite stores 8 bytes at an 8-byte aligned remote address as one write.
	WRAtomicWrite WROpcode = 15
	// WRRegMR is softirdma's number for IB_WR_REG_MR, which libibverbs does not expose.
	WRRegMR WROpcode = 0x20
)

var wrOpcodeNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAndAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
	WRSendWithInv: "SEND_WITH_INV", WRRegMR: "REG_MR", WRFlush: "FLUSH", WRAtomicWrite: "ATOMIC_WRITE",
}

// valid says whether o is an opcode the send queue takes (a switch: posting asks every time).
func (o WROpcode) valid() bool {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead, WRAtomicCmpAndSwp,
		WRAtomicFetchAndAdd, WRLocalInv, WRBindMW, WRSendWithInv, WRRegMR, WRFlush, WRAtomicWrite:
		return true
	}
	return false
}

func (o WROpcode) String() string {
	if s, ok := wrOpcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WR_%d", uint8(o))
}

// FlushType is a FLUSH's placement type (IBV_FLUSH_GLOBAL, IBV_FLUSH_PERSISTENT), the low
// nibble of the FETH: the bits may be combined.
type FlushType uint8

const (
	FlushGlobal     FlushType = 1
	FlushPersistent FlushType = 2
)

// FlushLevel is a FLUSH's selectivity level (IBV_FLUSH_RANGE, IBV_FLUSH_MR).
type FlushLevel uint8

const (
	// FlushRange covers RemoteAddr and the FLUSH's length in the rkey's region.
	FlushRange FlushLevel = 0
	// FlushMR covers the whole region the rkey names; the address and length are not checked.
	FlushMR FlushLevel = 1
)

// SendFlags is enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// WCOpcode is enum ibv_wc_opcode.
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCFlush           WCOpcode = 8
	WCAtomicWrite     WCOpcode = 9
	WCRegMR           WCOpcode = 0x20 // IB_WC_REG_MR in kernel verbs; not in libibverbs
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ", WCCompSwap: "COMP_SWAP",
	WCFetchAdd: "FETCH_ADD", WCBindMW: "BIND_MW", WCLocalInv: "LOCAL_INV", WCRegMR: "REG_MR",
	WCFlush: "FLUSH", WCAtomicWrite: "ATOMIC_WRITE",
	WCRecv: "RECV", WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

func (o WCOpcode) String() string {
	if s, ok := wcOpcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WC_%d", uint8(o))
}

// WCFlags is enum ibv_wc_flags.
type WCFlags uint32

const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
)

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	// Imm is the immediate data (WITH_IMM) or the invalidated rkey (WITH_INV), in host order.
	Imm   uint32
	QPNum uint32
	// SrcQP is the sender's QP: the connected peer's, or a datagram's DETH source QP.
	SrcQP uint32
	Flags WCFlags
	// NetworkHdrType is the header in the GRH area of a datagram's receive buffer (with
	// WCWithGRH): NetworkIPv4 or NetworkIPv6.
	NetworkHdrType NetworkType
	// Err is why a completion failed, for people: which check, which key, which PSN. It is
	// not part of ibv_wc.
	Err error
}

// InvalidatedRKey is the rkey a SEND_WITH_INV invalidated (ibv_wc_get_invalidated_rkey).
func (wc *WC) InvalidatedRKey() uint32 { return wc.Imm }

// SGE is a scatter/gather element (struct ibv_sge): Addr is in the MR's address space.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}
