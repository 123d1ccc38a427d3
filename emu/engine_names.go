package emu

// The names of emu/engine, forwarded.

import (
	"log/slog"
	"net/netip"

	"github.com/softirdma/softirdma/emu/engine"
)

type (
	// AH is an address handle (struct ibv_ah): where a datagram goes. It is engine.AH; its methods
	// are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.AH
	AH = engine.AH

	// AsyncEventType is what an asynchronous event reports, numbered as libibverbs' enum
	// ibv_event_type, so a device model passes it to its guest as it is. It is
	// engine.AsyncEventType; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.AsyncEventType
	AsyncEventType = engine.AsyncEventType

	// AsyncEvent is one asynchronous event (struct ibv_async_event). It is engine.AsyncEvent; its
	// fields and methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.AsyncEvent
	AsyncEvent = engine.AsyncEvent

	// PageFault is the device asking its driver for pages of an on-demand MR (OnPageFault). It
	// is engine.PageFault; its fields and methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.PageFault
	PageFault = engine.PageFault

	// SRQAttr holds an SRQ's attributes (struct ibv_srq_attr). It is engine.SRQAttr; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SRQAttr
	SRQAttr = engine.SRQAttr

	// SRQAttrMask says which SRQAttr fields a Modify sets (enum ibv_srq_attr_mask). It is
	// engine.SRQAttrMask; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SRQAttrMask
	SRQAttrMask = engine.SRQAttrMask

	// Clock is where the engine gets time and timers. It is engine.Clock; its methods are documented
	// there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Clock
	Clock = engine.Clock

	// Timer is a pending call. It is engine.Timer; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Timer
	Timer = engine.Timer

	// ConnectOptions are the attributes ConnectRC gives both ends of an RC connection. It is
	// engine.ConnectOptions; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.ConnectOptions
	ConnectOptions = engine.ConnectOptions

	// CQ is a completion queue. It is engine.CQ; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.CQ
	CQ = engine.CQ

	// SRQ is a shared receive queue. It is engine.SRQ; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SRQ
	SRQ = engine.SRQ

	// RecvWR is a receive work request (struct ibv_recv_wr). It is engine.RecvWR; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.RecvWR
	RecvWR = engine.RecvWR

	// PostError says which work request of a post failed and why; the ones before it were posted. It
	// is engine.PostError; its fields and methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.PostError
	PostError = engine.PostError

	// Link carries a device's frames. It is engine.Link; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Link
	Link = engine.Link

	// BufferLink is a Link that lends the device its frame buffers, so a frame is built where the
	// link will carry it and handed over without a copy: SendBuffer takes ownership of a frame built
	// in a buffer from Buffer. It is engine.BufferLink; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.BufferLink
	BufferLink = engine.BufferLink

	// BatchLink is a Link that sends several frames in one call (a socket's sendmmsg). It is
	// engine.BatchLink; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.BatchLink
	BatchLink = engine.BatchLink

	// SealedLink is a BufferLink that tells a receiving engine in the same process that a frame
	// is sealed and unchanged, so its ICRC is computed once. It is engine.SealedLink; its
	// methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SealedLink
	SealedLink = engine.SealedLink

	// SealedBatchLink is a SealedLink that takes the sealed frames of one flush in one call, so
	// it takes its locks once for them all. It is engine.SealedBatchLink; its methods are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SealedBatchLink
	SealedBatchLink = engine.SealedBatchLink

	// UnsealedLink is a SealedLink that computes the ICRC of the engine's frames itself, only
	// when something will read it (a capture, a fault, a link out of the process). It is
	// engine.UnsealedLink; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.UnsealedLink
	UnsealedLink = engine.UnsealedLink

	// DeviceConfig sets up a Device. It is engine.DeviceConfig; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.DeviceConfig
	DeviceConfig = engine.DeviceConfig

	// Limits are the device's capabilities (ibv_device_attr). It is engine.Limits; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Limits
	Limits = engine.Limits

	// Device is one softirdma NIC: its key space, its queues and its transport. It is engine.Device;
	// its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Device
	Device = engine.Device

	// Stats counts what the device did with frames. It is engine.Stats; its fields are documented
	// there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Stats
	Stats = engine.Stats

	// PD is a protection domain. It is engine.PD; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.PD
	PD = engine.PD

	// MR is a registered memory region. It is engine.MR; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.MR
	MR = engine.MR

	// MW is a memory window. It is engine.MW; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.MW
	MW = engine.MW

	// EventKind says what an Event records. It is engine.EventKind; its methods are documented
	// there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.EventKind
	EventKind = engine.EventKind

	// Event is one thing that happened in the engine, with what a person debugging it needs: when,
	// where, and for failures which check failed with which key, range, PSN or state. It is
	// engine.Event; its fields and methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.Event
	Event = engine.Event

	// EventSink receives the engine's events. It is engine.EventSink; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.EventSink
	EventSink = engine.EventSink

	// PageList is memory to register as a guest describes it: the guest-physical address of each
	// page, in order, and where the registered bytes begin and how many there are. It is
	// engine.PageList; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.PageList
	PageList = engine.PageList

	// GuestMemory is an address space of regions of Go memory mapped at guest-physical addresses: a
	// guest's RAM as a device model sees it, where regions come and go while the guest runs
	// (vfio-user's DMA map and unmap). It is engine.GuestMemory; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.GuestMemory
	GuestMemory = engine.GuestMemory

	// QPCap is the size of a QP's queues (struct ibv_qp_cap). It is engine.QPCap; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.QPCap
	QPCap = engine.QPCap

	// QPInitAttr describes a QP to create (struct ibv_qp_init_attr). It is engine.QPInitAttr; its
	// fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.QPInitAttr
	QPInitAttr = engine.QPInitAttr

	// AHAttr is the path to the peer (struct ibv_ah_attr with its GRH): for RoCEv2 the peer's GID,
	// which is its IP address, and the IP header fields to send with. It is engine.AHAttr; its
	// fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.AHAttr
	AHAttr = engine.AHAttr

	// QPAttr holds QP attributes (struct ibv_qp_attr); a Modify mask says which ones apply. It is
	// engine.QPAttr; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.QPAttr
	QPAttr = engine.QPAttr

	// QP is a queue pair. It is engine.QP; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.QP
	QP = engine.QP

	// SendWR is a send work request (struct ibv_send_wr). It is engine.SendWR; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SendWR
	SendWR = engine.SendWR

	// FlushInfo is what a FLUSH asks for: which placement, over the range [RemoteAddr, +Length)
	// (FlushRange) or the whole region of the rkey (FlushMR). It is engine.FlushInfo; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.FlushInfo
	FlushInfo = engine.FlushInfo

	// BindInfo is a window bind (bind_mw in struct ibv_send_wr): RKey is the new rkey the consumer
	// chose (its low 8 bits are what changes). It is engine.BindInfo; its fields are documented
	// there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.BindInfo
	BindInfo = engine.BindInfo

	// RegInfo is a fast registration: the MR from AllocFastRegMR, its new key (same index, new
	// key8), and the memory, address and rights to give it. It is engine.RegInfo; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.RegInfo
	RegInfo = engine.RegInfo

	// GuestPages is memory a guest names by its pages, in the address space Space. It is
	// engine.GuestPages; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.GuestPages
	GuestPages = engine.GuestPages

	// MWBind is the bind verb's request (struct ibv_mw_bind). It is engine.MWBind; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.MWBind
	MWBind = engine.MWBind

	// PostedError is a work request a device model could not turn into a WR (a malformed descriptor
	// in the guest's send queue): posted in its place, it completes with Status (and moves the QP to
	// ERR) when the requester reaches it, in posting order. It is engine.PostedError; its fields are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.PostedError
	PostedError = engine.PostedError

	// Access holds access flags with the numeric values of libibverbs' enum ibv_access_flags. It is
	// engine.Access, which is keys.Access; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/keys.Access
	Access = engine.Access

	// MWType is a memory window type. It is engine.MWType, which is keys.MWType; its methods are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/keys.MWType
	MWType = engine.MWType

	// WCStatus is enum ibv_wc_status. It is engine.WCStatus; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.WCStatus
	WCStatus = engine.WCStatus

	// QPState is enum ibv_qp_state. It is engine.QPState; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.QPState
	QPState = engine.QPState

	// QPType is enum ibv_qp_type, and the kernel's IB_QPT_GSI for the port's GSI QP, which
	// libibverbs does not create. It is engine.QPType; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.QPType
	QPType = engine.QPType

	// NetworkType is the network header a datagram arrived with (the kernel's enum
	// rdma_network_type, ib_wc.network_hdr_type). It is engine.NetworkType; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.NetworkType
	NetworkType = engine.NetworkType

	// AttrMask is enum ibv_qp_attr_mask: which fields of a QPAttr a Modify call sets. It is
	// engine.AttrMask; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.AttrMask
	AttrMask = engine.AttrMask

	// MTU is enum ibv_mtu: 1 = 256 bytes ... It is engine.MTU; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.MTU
	MTU = engine.MTU

	// WROpcode is enum ibv_wr_opcode, plus REG_MR (kernel verbs' fast-register work request). It is
	// engine.WROpcode; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.WROpcode
	WROpcode = engine.WROpcode

	// FlushType is a FLUSH's placement type (IBV_FLUSH_GLOBAL, IBV_FLUSH_PERSISTENT), the low nibble
	// of the FETH: the bits may be combined. It is engine.FlushType; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.FlushType
	FlushType = engine.FlushType

	// FlushLevel is a FLUSH's selectivity level (IBV_FLUSH_RANGE, IBV_FLUSH_MR). It is
	// engine.FlushLevel; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.FlushLevel
	FlushLevel = engine.FlushLevel

	// SendFlags is enum ibv_send_flags. It is engine.SendFlags; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SendFlags
	SendFlags = engine.SendFlags

	// WCOpcode is enum ibv_wc_opcode. It is engine.WCOpcode; its methods are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.WCOpcode
	WCOpcode = engine.WCOpcode

	// WCFlags is enum ibv_wc_flags. It is engine.WCFlags; it is documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.WCFlags
	WCFlags = engine.WCFlags

	// WC is a work completion (struct ibv_wc). It is engine.WC; its fields and methods are
	// documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.WC
	WC = engine.WC

	// SGE is a scatter/gather element (struct ibv_sge): Addr is in the MR's address space. It is
	// engine.SGE; its fields are documented there:
	//
	//	go doc github.com/softirdma/softirdma/emu/engine.SGE
	SGE = engine.SGE
)

const (
	AsyncCQErr            = engine.AsyncCQErr
	AsyncQPFatal          = engine.AsyncQPFatal
	AsyncQPReqErr         = engine.AsyncQPReqErr
	AsyncQPAccessErr      = engine.AsyncQPAccessErr
	AsyncCommEst          = engine.AsyncCommEst
	AsyncSQDrained        = engine.AsyncSQDrained
	AsyncDeviceFatal      = engine.AsyncDeviceFatal
	AsyncPortActive       = engine.AsyncPortActive
	AsyncPortErr          = engine.AsyncPortErr
	AsyncSRQErr           = engine.AsyncSRQErr
	AsyncSRQLimitReached  = engine.AsyncSRQLimitReached
	AsyncQPLastWQEReached = engine.AsyncQPLastWQEReached
	PortNum               = engine.PortNum
	SRQAttrMaxWR          = engine.SRQAttrMaxWR
	SRQAttrLimit          = engine.SRQAttrLimit
	MaxFrame              = engine.MaxFrame
	EvQPState             = engine.EvQPState
	EvPost                = engine.EvPost
	EvSend                = engine.EvSend
	EvRecv                = engine.EvRecv
	EvDrop                = engine.EvDrop
	EvNAK                 = engine.EvNAK
	EvRetry               = engine.EvRetry
	EvComplete            = engine.EvComplete
	EvAccess              = engine.EvAccess
	EvKey                 = engine.EvKey
	EvFault               = engine.EvFault
	EvWarning             = engine.EvWarning
	EvAsync               = engine.EvAsync
	EvAddress             = engine.EvAddress
	MinPageSize           = engine.MinPageSize
	MaxPageSize           = engine.MaxPageSize
	AccessLocalWrite      = engine.AccessLocalWrite
	AccessRemoteWrite     = engine.AccessRemoteWrite
	AccessRemoteRead      = engine.AccessRemoteRead
	AccessRemoteAtomic    = engine.AccessRemoteAtomic
	AccessMWBind          = engine.AccessMWBind
	AccessZeroBased       = engine.AccessZeroBased
	AccessOnDemand        = engine.AccessOnDemand
	AccessFlushGlobal     = engine.AccessFlushGlobal
	AccessFlushPersistent = engine.AccessFlushPersistent
	MWType1               = engine.MWType1
	MWType2               = engine.MWType2
	MWType2A              = engine.MWType2A
	WCSuccess             = engine.WCSuccess
	WCLocLenErr           = engine.WCLocLenErr
	WCLocQPOpErr          = engine.WCLocQPOpErr
	WCLocEECOpErr         = engine.WCLocEECOpErr
	WCLocProtErr          = engine.WCLocProtErr
	WCWRFlushErr          = engine.WCWRFlushErr
	WCMWBindErr           = engine.WCMWBindErr
	WCBadRespErr          = engine.WCBadRespErr
	WCLocAccessErr        = engine.WCLocAccessErr
	WCRemInvReqErr        = engine.WCRemInvReqErr
	WCRemAccessErr        = engine.WCRemAccessErr
	WCRemOpErr            = engine.WCRemOpErr
	WCRetryExcErr         = engine.WCRetryExcErr
	WCRNRRetryExcErr      = engine.WCRNRRetryExcErr
	WCLocRDDViolErr       = engine.WCLocRDDViolErr
	WCRemInvRDReqErr      = engine.WCRemInvRDReqErr
	WCRemAbortErr         = engine.WCRemAbortErr
	WCInvEECNErr          = engine.WCInvEECNErr
	WCInvEECStateErr      = engine.WCInvEECStateErr
	WCFatalErr            = engine.WCFatalErr
	WCRespTimeoutErr      = engine.WCRespTimeoutErr
	WCGeneralErr          = engine.WCGeneralErr
	WCTMErr               = engine.WCTMErr
	WCTMRndvIncomplete    = engine.WCTMRndvIncomplete
	QPSReset              = engine.QPSReset
	QPSInit               = engine.QPSInit
	QPSRTR                = engine.QPSRTR
	QPSRTS                = engine.QPSRTS
	QPSSQD                = engine.QPSSQD
	QPSSQE                = engine.QPSSQE
	QPSErr                = engine.QPSErr
	DefaultTimeout        = engine.DefaultTimeout
	DefaultRetryCnt       = engine.DefaultRetryCnt
	DefaultRNRRetry       = engine.DefaultRNRRetry
	DefaultMinRNRTimer    = engine.DefaultMinRNRTimer
	QPTypeGSI             = engine.QPTypeGSI
	QPTypeRC              = engine.QPTypeRC
	QPTypeUC              = engine.QPTypeUC
	QPTypeUD              = engine.QPTypeUD
	NetworkIB             = engine.NetworkIB
	NetworkIPv4           = engine.NetworkIPv4
	NetworkIPv6           = engine.NetworkIPv6
	AttrState             = engine.AttrState
	AttrCurState          = engine.AttrCurState
	AttrEnSQDAsyncNotify  = engine.AttrEnSQDAsyncNotify
	AttrAccessFlags       = engine.AttrAccessFlags
	AttrPKeyIndex         = engine.AttrPKeyIndex
	AttrPort              = engine.AttrPort
	AttrQKey              = engine.AttrQKey
	AttrAV                = engine.AttrAV
	AttrPathMTU           = engine.AttrPathMTU
	AttrTimeout           = engine.AttrTimeout
	AttrRetryCnt          = engine.AttrRetryCnt
	AttrRNRRetry          = engine.AttrRNRRetry
	AttrRQPSN             = engine.AttrRQPSN
	AttrMaxQPRdAtomic     = engine.AttrMaxQPRdAtomic
	AttrAltPath           = engine.AttrAltPath
	AttrMinRNRTimer       = engine.AttrMinRNRTimer
	AttrSQPSN             = engine.AttrSQPSN
	AttrMaxDestRdAtomic   = engine.AttrMaxDestRdAtomic
	AttrPathMigState      = engine.AttrPathMigState
	AttrCap               = engine.AttrCap
	AttrDestQPN           = engine.AttrDestQPN
	AttrRateLimit         = engine.AttrRateLimit
	MTU256                = engine.MTU256
	MTU512                = engine.MTU512
	MTU1024               = engine.MTU1024
	MTU2048               = engine.MTU2048
	MTU4096               = engine.MTU4096
	WRRDMAWrite           = engine.WRRDMAWrite
	WRRDMAWriteWithImm    = engine.WRRDMAWriteWithImm
	WRSend                = engine.WRSend
	WRSendWithImm         = engine.WRSendWithImm
	WRRDMARead            = engine.WRRDMARead
	WRAtomicCmpAndSwp     = engine.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd   = engine.WRAtomicFetchAndAdd
	WRLocalInv            = engine.WRLocalInv
	WRBindMW              = engine.WRBindMW
	WRSendWithInv         = engine.WRSendWithInv
	WRFlush               = engine.WRFlush
	WRAtomicWrite         = engine.WRAtomicWrite
	WRRegMR               = engine.WRRegMR
	FlushGlobal           = engine.FlushGlobal
	FlushPersistent       = engine.FlushPersistent
	FlushRange            = engine.FlushRange
	FlushMR               = engine.FlushMR
	SendFence             = engine.SendFence
	SendSignaled          = engine.SendSignaled
	SendSolicited         = engine.SendSolicited
	SendInline            = engine.SendInline
	WCSend                = engine.WCSend
	WCRDMAWrite           = engine.WCRDMAWrite
	WCRDMARead            = engine.WCRDMARead
	WCCompSwap            = engine.WCCompSwap
	WCFetchAdd            = engine.WCFetchAdd
	WCBindMW              = engine.WCBindMW
	WCLocalInv            = engine.WCLocalInv
	WCFlush               = engine.WCFlush
	WCAtomicWrite         = engine.WCAtomicWrite
	WCRegMR               = engine.WCRegMR
	WCRecv                = engine.WCRecv
	WCRecvRDMAWithImm     = engine.WCRecvRDMAWithImm
	WCWithGRH             = engine.WCWithGRH
	WCWithImm             = engine.WCWithImm
	WCWithInv             = engine.WCWithInv
	GSIQKey               = engine.GSIQKey
	GRHLen                = engine.GRHLen
	McastQPN              = engine.McastQPN
	DefaultSendWindow     = engine.DefaultSendWindow
	MaxSendWindow         = engine.MaxSendWindow
)

var (
	DefaultLimits = engine.DefaultLimits
)

func ConnectRC(a, b *QP, o ConnectOptions) error { return engine.ConnectRC(a, b, o) }

func NewDevice(cfg DeviceConfig) *Device { return engine.NewDevice(cfg) }

func SlogSink(l *slog.Logger) EventSink { return engine.SlogSink(l) }

func NewFrameBuffer(n int) []byte { return engine.NewFrameBuffer(n) }

func MTUOf(n int) (MTU, bool) { return engine.MTUOf(n) }

func ConnectUC(a, b *QP, mtu MTU) error { return engine.ConnectUC(a, b, mtu) }

func SourceAddr(grh []byte, t NetworkType) (netip.Addr, bool) { return engine.SourceAddr(grh, t) }
