package abi

// The control queue: a ring of CtrlEntrySize-byte entries at RegCtrlQBase, 2^RegCtrlQLog of
// them, in one contiguous, 4 KiB-aligned stretch of guest memory (at most CtrlQMaxLog). The
// driver writes a command into the entry at its producer index, then writes the new producer
// index to RegCtrlQProd. The device runs commands in ring order, one at a time, writes each
// one's status and results back into its entry (CtrlStatus last, with CtrlDone set), advances
// RegCtrlQCons and signals vector CtrlVector. Nothing else in an entry is written by the device.
const (
	CtrlEntrySize = 128
	CtrlQMaxLog   = 8
	CtrlVector    = 0

	CtrlOpcode = 0  // u16: Op*
	CtrlFlags  = 2  // u16: reserved, 0
	CtrlStatus = 4  // u32: written by the device: CtrlDone | errno (0: success)
	CtrlCookie = 8  // u64: the driver's, left as it is
	CtrlResult = 16 // u32 x 4: results, by command
	CtrlArgs   = 32 // 96 bytes of arguments, by command

	CtrlDone = 1 << 31
)

// Control commands. Each one's arguments start at CtrlArgs; offsets below are relative to it.
// A failed command completes with a Linux errno: EINVAL for a malformed argument, ENOMEM when a
// table is full, ENOENT for an unknown number, EBUSY for an MR with windows bound (as the verbs
// API), EFAULT for a page list or ring outside mapped guest memory, EOPNOTSUPP for something
// the capabilities do not offer.
const (
	OpNop         = 0x01
	OpQueryDevice = 0x02 // the device writes registers CAPS to CTRLQ_MAX (QueryDeviceWords u32s) at argument offset 0. result 0: VERSION
	OpQueryPort   = 0x03 // args: u32 port (1) at 0. results: 0 ibv_port_state, 1 max MTU, 2 active MTU (ibv_mtu), 3 GID table length
	OpQueryGID    = 0x04 // args: u32 port (1) at 0; u32 index at 4. result 0: 1 if valid; the device writes the GID (network order, zero if not valid) at argument offset 8
	OpCreateEQ    = 0x10 // args: PageList ring at 0; u8 log2 entries at 16; u8 kind (EQ*) at 17; u16 vector at 18. result 0: eqn
	OpDestroyEQ   = 0x11 // args: u32 eqn at 0
	OpSetAVTable  = 0x12 // args: PageList at 0; u32 entries at 16 (0 removes the table)
	OpAllocPD     = 0x20 // result 0: pdn
	OpDeallocPD   = 0x21 // args: u32 pdn at 0
	OpAllocSTag   = 0x30 // args: u32 pdn at 0; u32 kind (STag*) at 4; u32 max pages (fast-register) at 8. result 0: stag
	OpRegMR       = 0x31 // args: RegMRArgs. result 0: stag (lkey = rkey)
	OpReregMR     = 0x32 // args: u32 stag at 0; u32 Rereg* flags at 4; then as RegMRArgs from 8
	OpDeallocSTag = 0x33 // args: u32 stag at 0 (an MR's, a window's, a fast-register MR's)
	OpCreateCQ    = 0x40 // args: QueueArgs at 0; u32 eqn at 24 (0xffffffff: none). result 0: cqn, result 1: slot
	OpResizeCQ    = 0x41 // args: u32 cqn at 0; QueueArgs at 8: a new ring, unpolled CQEs carried over
	OpDestroyCQ   = 0x42 // args: u32 cqn at 0
	OpCreateQP    = 0x50 // args: CreateQPArgs. result 0: qpn, result 1: slot
	OpModifyQP    = 0x51 // args: u32 qpn at 0; u32 attribute mask (ibv_qp_attr_mask) at 4; QPAttr at 8
	OpQueryQP     = 0x52 // args: u32 qpn at 0; the device writes the QPAttr at 8 (the one exception to "only status and results")
	OpDestroyQP   = 0x53 // args: u32 qpn at 0
	OpCreateSRQ   = 0x60 // args: u32 pdn at 0; u32 max SGE at 4; u32 limit at 8; QueueArgs at 16. result 0: srqn
	OpModifySRQ   = 0x61 // args: u32 srqn at 0; u32 mask (1 max_wr: QueueArgs at 16 is a new ring; 2 limit) at 4; u32 limit at 8
	OpQuerySRQ    = 0x62 // args: u32 srqn at 0. result 0: max_wr, 1: max_sge, 2: limit
	OpDestroySRQ  = 0x63 // args: u32 srqn at 0
)

// OpModifySRQ's mask: what it changes (ibv_modify_srq's IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT).
const (
	SRQModifyMaxWR = 1 // a new ring, QueueArgs at 16, the posted receives moved over
	SRQModifyLimit = 2 // the limit at 8
)

// Answers written into a command's arguments.
const (
	QueryDeviceWords = (RegCtrlQMax-RegCaps)/4 + 1 // OpQueryDevice: registers CAPS to CTRLQ_MAX, in order
	QueryGIDOffset   = 8                           // OpQueryGID: the GID's 16 bytes
)

// STag kinds for OpAllocSTag.
const (
	STagFastRegMR = 1 // an MR left FREE until a REG_MR work request
	STagMWType1   = 2
	STagMWType2A  = 3
	STagMWType2B  = 4 // what libibverbs' type 2 means
)

// ReregMR flags (ibv_rereg_mr's).
const (
	ReregTranslation = 1
	ReregPD          = 2
	ReregAccess      = 4
)

// PageList describes guest memory by its pages: PLAddr is the address of the only page
// (PLLevels 0), of a 4 KiB page of up to 512 u64 page addresses (1), or of a 4 KiB page of up
// to 512 addresses of such pages (2). Pages are 2^PLShift bytes (RegPageSizes says which) and
// aligned to their size. Where the region starts in its first page is the command's to say.
const (
	PageListSize = 16
	PLAddr       = 0  // u64
	PLPages      = 8  // u32: number of pages
	PLShift      = 12 // u8: log2 page size
	PLLevels     = 13 // u8: 0, 1 or 2

	PLEntriesPerPage = 512
)

// RegMRArgs, relative to CtrlArgs.
const (
	RegMRPD     = 0  // u32
	RegMRAccess = 4  // u32: ibv_access_flags
	RegMRIOVA   = 8  // u64: the address the wire names (0 for zero-based)
	RegMRLength = 16 // u64
	RegMROffset = 24 // u64: first byte's offset in the first page
	RegMRPages  = 32 // PageList
)

// QueueArgs describes a ring in the rxe layout (QueueHeaderSize bytes of header, then the
// elements), relative to where a command puts it.
const (
	QueueArgsSize = 24
	QueueLogCount = 0 // u8: log2 of the elements (one always stays empty)
	QueueLogElem  = 1 // u8: log2 of an element's size
	QueuePages    = 8 // PageList of the whole ring, header included
)

// CreateQPArgs, relative to CtrlArgs.
const (
	CreateQPPD        = 0  // u32
	CreateQPType      = 4  // u8: ibv_qp_type (2 RC; UC 3 and UD 4 reserved)
	CreateQPSigAll    = 5  // u8: sq_sig_all
	CreateQPSendCQ    = 8  // u32 cqn
	CreateQPRecvCQ    = 12 // u32 cqn
	CreateQPSRQ       = 16 // u32 srqn, 0: none
	CreateQPMaxInline = 20 // u32
	CreateQPSendSGE   = 24 // u16
	CreateQPRecvSGE   = 26 // u16
	CreateQPSQ        = 32 // QueueArgs
	CreateQPRQ        = 56 // QueueArgs (ignored with an SRQ)
)

// QPAttr, relative to where a command puts it: what ibv_modify_qp and ibv_query_qp carry for an
// RC QP, its path as RoCEv2 sees it.
const (
	QPAttrSize          = 80
	QPAttrState         = 0  // u8 ibv_qp_state
	QPAttrCurState      = 1  // u8
	QPAttrPathMTU       = 2  // u8 ibv_mtu
	QPAttrTimeout       = 3  // u8
	QPAttrRetryCnt      = 4  // u8
	QPAttrRNRRetry      = 5  // u8
	QPAttrMinRNRTimer   = 6  // u8
	QPAttrMaxRdAtomic   = 7  // u8
	QPAttrMaxDestRdAtom = 8  // u8
	QPAttrSGIDIndex     = 9  // u8
	QPAttrHopLimit      = 10 // u8
	QPAttrTrafficClass  = 11 // u8
	QPAttrPortNum       = 12 // u8
	QPAttrSQDrainNotify = 13 // u8: en_sqd_async_notify
	QPAttrPKeyIndex     = 14 // u16
	QPAttrAccessFlags   = 16 // u32
	QPAttrDestQPN       = 20 // u32
	QPAttrRQPSN         = 24 // u32
	QPAttrSQPSN         = 28 // u32
	QPAttrFlowLabel     = 32 // u32
	QPAttrDGID          = 36 // 16 bytes, network order
	QPAttrDMAC          = 52 // 6 bytes: filled by the device on query; the device resolves it
	QPAttrMaxSendWR     = 60 // u32 (query)
	QPAttrMaxRecvWR     = 64 // u32 (query)
	QPAttrMaxSendSGE    = 68 // u16 (query)
	QPAttrMaxRecvSGE    = 70 // u16 (query)
	QPAttrMaxInline     = 72 // u32 (query)
)

// Event queues: rings in the rxe layout whose producer is the device, of EQEntrySize-byte
// entries. A completion EQ gets an entry when an armed CQ fires; the async EQ one per
// ibv_async_event. Each EQ signals its vector after adding entries.
const (
	EQCompletion = 0
	EQAsync      = 1

	EQEntrySize = 16
	EQType      = 0 // u8: EQCompletion entries: 0; async: ibv_event_type
	EQNum       = 4 // u32: the CQN, QPN, SRQN or port number it concerns
	EQSeq       = 8 // u64: the device's running count of entries, for a driver to spot a lap
)

// The address-vector table: AVEntrySize-byte entries indexed by AH number, written by the
// driver (kernel code creates address handles where it cannot wait for the device) and read
// by the device when a UD work request names one.
const (
	AVEntrySize    = 64
	AVFlags        = 0  // u32: AVValid
	AVPD           = 4  // u32: the AH's PD, checked against the QP's
	AVDGID         = 8  // 16 bytes, network order
	AVFlowLabel    = 24 // u32
	AVSGIDIndex    = 28 // u8
	AVHopLimit     = 29 // u8
	AVTrafficClass = 30 // u8
	AVNetworkType  = 31 // u8: RXE_NETWORK_TYPE_IPV4 1, _IPV6 2
	AVDMAC         = 32 // 6 bytes

	AVValid = 1
)

// REG_MR work request: softirdma's kernel-only send WQE opcode, the kernel's IB_WR_REG_MR,
// which has no user encoding in rxe's layout. Its fields sit in rxe_send_wr's union (offsets
// relative to the WQE).
const (
	WROpRegMR   = 0x20
	RegWRKey    = SendWRUnion + 0  // u32: the MR's new key (same index, new key8)
	RegWRAccess = SendWRUnion + 4  // u32
	RegWRIOVA   = SendWRUnion + 8  // u64
	RegWRLength = SendWRUnion + 16 // u64
	RegWROffset = SendWRUnion + 24 // u64: first byte's offset in the first page
	RegWRPages  = SendWRUnion + 32 // PageList
)
