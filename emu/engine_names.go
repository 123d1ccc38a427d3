package emu

// The names of emu/engine, forwarded.

import (
	"log/slog"
	"net/netip"

	"github.com/softirdma/softirdma/emu/engine"
)

type (
	AH             = engine.AH
	AsyncEventType = engine.AsyncEventType
	AsyncEvent     = engine.AsyncEvent
	SRQAttr        = engine.SRQAttr
	SRQAttrMask    = engine.SRQAttrMask
	Clock          = engine.Clock
	Timer          = engine.Timer
	ConnectOptions = engine.ConnectOptions
	CQ             = engine.CQ
	SRQ            = engine.SRQ
	RecvWR         = engine.RecvWR
	PostError      = engine.PostError
	Link           = engine.Link
	BufferLink     = engine.BufferLink
	DeviceConfig   = engine.DeviceConfig
	Limits         = engine.Limits
	Device         = engine.Device
	Stats          = engine.Stats
	PD             = engine.PD
	MR             = engine.MR
	MW             = engine.MW
	EventKind      = engine.EventKind
	Event          = engine.Event
	EventSink      = engine.EventSink
	PageList       = engine.PageList
	GuestMemory    = engine.GuestMemory
	QPCap          = engine.QPCap
	QPInitAttr     = engine.QPInitAttr
	AHAttr         = engine.AHAttr
	QPAttr         = engine.QPAttr
	QP             = engine.QP
	SendWR         = engine.SendWR
	FlushInfo      = engine.FlushInfo
	BindInfo       = engine.BindInfo
	RegInfo        = engine.RegInfo
	GuestPages     = engine.GuestPages
	MWBind         = engine.MWBind
	PostedError    = engine.PostedError
	Access         = engine.Access
	MWType         = engine.MWType
	WCStatus       = engine.WCStatus
	QPState        = engine.QPState
	QPType         = engine.QPType
	NetworkType    = engine.NetworkType
	AttrMask       = engine.AttrMask
	MTU            = engine.MTU
	WROpcode       = engine.WROpcode
	FlushType      = engine.FlushType
	FlushLevel     = engine.FlushLevel
	SendFlags      = engine.SendFlags
	WCOpcode       = engine.WCOpcode
	WCFlags        = engine.WCFlags
	WC             = engine.WC
	SGE            = engine.SGE
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
