package engine

import "github.com/softirdma/softirdma/wire/roce"

// rcTransport is Reliable Connected: one peer, every request acknowledged, lost packets sent
// again, READs and atomics. Its requester is requester.go, its responder responder.go and
// answers.go, its completer completer.go.
var rcTransport = transport{
	name:        "RC",
	wire:        roce.RC,
	transitions: rcTransitions,
	sends: wrs(WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRSendWithInv, WRRDMARead,
		WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush, WRAtomicWrite, WRLocalInv, WRBindMW, WRRegMR),
	connected: true,
	acked:     true,
	request:   (*QP).onRequest,
	response:  (*QP).onResponse,
}

// rcTransitions is the verbs state machine for RC QPs (IBTA table 91, ib_modify_qp_is_ok).
var rcTransitions = map[[2]QPState][2]AttrMask{
	{QPSReset, QPSInit}: {AttrPKeyIndex | AttrPort | AttrAccessFlags, 0},
	{QPSInit, QPSInit}:  {0, AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPSInit, QPSRTR}: {AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
	{QPSRTR, QPSRTS}: {AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic,
		AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState},
	{QPSRTS, QPSRTS}: {0, AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer},
	{QPSRTS, QPSSQD}: {0, AttrEnSQDAsyncNotify},
	{QPSSQD, QPSRTS}: {0, AttrCurState | AttrAccessFlags | AttrAltPath | AttrMinRNRTimer | AttrPathMigState},
	{QPSSQD, QPSSQD}: {0, AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer | AttrPathMigState |
		AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic},
}
