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

// Control commands. Each one's arguments start at CtrlArgs, laid out as the *Args constants
// below say (offsets relative to CtrlArgs); its results are u32s at CtrlResult, numbered by the
// Result* constants. A failed command completes with a Linux errno: EINVAL for a malformed
// argument, ENOMEM when a table is full, ENOENT for an unknown number, EBUSY for an MR with
// windows bound (as the verbs API), EFAULT for a page list or ring outside mapped guest memory,
// EOPNOTSUPP for something the capabilities do not offer.
const (
	OpNop         = 0x01
	OpQueryDevice = 0x02 // the device writes registers CAPS to CTRLQ_MAX (QueryDeviceWords u32s) at argument offset 0. ResultVersion
	OpQueryPort   = 0x03 // args: QueryPortArgs. results: ResultPortState, ResultPortMaxMTU, ResultPortActiveMTU, ResultPortGIDLen
	OpQueryGID    = 0x04 // args: QueryGIDArgs. ResultGIDValid; the device writes the GID (zero if not valid) at QueryGIDGID
	OpCreateEQ    = 0x10 // args: CreateEQArgs. ResultNum: eqn
	OpDestroyEQ   = 0x11 // args: NumArgs (eqn)
	OpSetAVTable  = 0x12 // args: SetAVArgs (0 entries removes the table)
	OpAllocPD     = 0x20 // ResultNum: pdn
	OpDeallocPD   = 0x21 // args: NumArgs (pdn)
	OpAllocSTag   = 0x30 // args: AllocSTagArgs. ResultNum: stag
	OpRegMR       = 0x31 // args: RegMRArgs. ResultNum: stag (lkey = rkey)
	OpReregMR     = 0x32 // args: ReregMRArgs
	OpDeallocSTag = 0x33 // args: NumArgs (an MR's, a window's, a fast-register MR's stag)
	OpRegDMAMR    = 0x34 // args: RegDMAArgs. ResultNum: stag of an MR over all of guest memory (CapUD)
	OpMapPages    = 0x35 // args: MapPagesArgs: pages of an on-demand MR (CapOnDemand). ResultNum: pages it maps more than before
	OpUnmapPages  = 0x36 // args: UnmapPagesArgs; done once the function no longer touches them. ResultNum: pages it had
	OpCreateCQ    = 0x40 // args: CreateCQArgs. ResultNum: cqn, ResultSlot: its arm register
	OpResizeCQ    = 0x41 // args: ResizeCQArgs: a new ring, unpolled CQEs carried over
	OpDestroyCQ   = 0x42 // args: NumArgs (cqn)
	OpModifyCQ    = 0x43 // args: ModifyCQArgs: the CQ's event moderation (CapCQModeration, ABI 1.2)
	OpCreateQP    = 0x50 // args: CreateQPArgs. ResultNum: qpn, ResultSlot: its doorbell
	OpModifyQP    = 0x51 // args: ModifyQPArgs
	OpQueryQP     = 0x52 // args: QueryQPArgs; the device writes the QPAttr at QueryQPAttr (the one exception to "only status and results")
	OpDestroyQP   = 0x53 // args: NumArgs (qpn)
	OpAttachMcast = 0x54 // args: McastArgs (CapUD)
	OpDetachMcast = 0x55 // args: McastArgs (CapUD)
	OpResumeQP    = 0x56 // args: ResumeQPArgs: answers the page fault that holds a send queue (CapOnDemand)
	OpCreateSRQ   = 0x60 // args: CreateSRQArgs. ResultNum: srqn
	OpModifySRQ   = 0x61 // args: ModifySRQArgs
	OpQuerySRQ    = 0x62 // args: NumArgs (srqn). results: ResultSRQMaxWR, ResultSRQMaxSGE, ResultSRQLimit
	OpDestroySRQ  = 0x63 // args: NumArgs (srqn)
)

// Bounds on what a driver may ask for, beyond those the registers report. A command over one
// of them fails with EINVAL.
const (
	MaxMRPages  = 1 << 20 // pages in one page list: a registration, a fast-register MR, a REG_MR work request
	CQMaxLog    = 20      // log2 of a CQ's ring slots
	EQMaxLog    = 20      // log2 of an EQ's ring slots
	EthMaxLog   = 16      // log2 of an Ethernet ring's descriptors
	QueueMaxLog = 31      // log2 of any ring's slots (QueueLogCount)
	ElemMaxLog  = 16      // log2 of a ring element's bytes (QueueLogElem)
	MaxAH       = 1 << 16 // entries of the address-vector table
)

// Results: the u32 at CtrlResult + 4*Result*.
const (
	ResultNum     = 0 // the number of the object a command made (pdn, stag, eqn, cqn, qpn, srqn)
	ResultSlot    = 1 // the doorbell or arm register slot of a QP or CQ
	ResultVersion = 0 // OpQueryDevice: Version

	ResultPortState     = 0 // OpQueryPort: PortDown or PortActive (ibv_port_state)
	ResultPortMaxMTU    = 1 // ibv_mtu
	ResultPortActiveMTU = 2 // ibv_mtu
	ResultPortGIDLen    = 3 // the GID table's entries

	ResultGIDValid = 0 // OpQueryGID: 1 if the entry is valid

	ResultSRQMaxWR  = 0 // OpQuerySRQ
	ResultSRQMaxSGE = 1
	ResultSRQLimit  = 2

	ResultEthDropped = 0 // OpDestroyEthRing: frames dropped
)

// NumArgs are the arguments of a command that names one object by its number (a destroy, a
// dealloc, OpQuerySRQ).
const (
	NumArgsSize = 4
	NumArgsNum  = 0 // u32
)

// QueryPortArgs and QueryGIDArgs: the port is always 1.
const (
	QueryPortArgsSize = 4
	QueryPortPort     = 0 // u32

	QueryGIDArgsSize = 24
	QueryGIDPort     = 0 // u32
	QueryGIDIndex    = 4 // u32: below GIDTableLen
	QueryGIDGID      = 8 // 16 bytes, network order, written by the device
)

// CreateEQArgs: an event queue of 2^CreateEQLogCount EQEntrySize-byte entries (FaultEntrySize for
// EQPageFault; at most EQMaxLog) in the pages of a page list, of kind EQCompletion, EQAsync or
// EQPageFault, on an MSI-X vector.
const (
	CreateEQArgsSize = 20
	CreateEQPages    = 0  // PageList
	CreateEQLogCount = 16 // u8
	CreateEQKind     = 17 // u8
	CreateEQVector   = 18 // u16: below NumVectors
)

// SetAVArgs: the address-vector table (AVEntrySize-byte entries in 4 KiB pages), at most
// MaxAH entries.
const (
	SetAVArgsSize = 20
	SetAVPages    = 0  // PageList
	SetAVEntries  = 16 // u32
)

// AllocSTagArgs: an STag of a kind (STag*). A fast-register MR says how many pages its REG_MR
// work requests may name, at most MaxMRPages.
const (
	AllocSTagArgsSize = 12
	AllocSTagPD       = 0 // u32
	AllocSTagKind     = 4 // u32
	AllocSTagMaxPages = 8 // u32: STagFastRegMR only
)

// ReregMRArgs: the MR's current stag, what changes (Rereg*), then RegMRArgs; the arguments the
// flags do not name are not read.
const (
	ReregMRArgsSize = ReregMRReg + RegMRArgsSize
	ReregMRSTag     = 0 // u32
	ReregMRFlags    = 4 // u32
	ReregMRReg      = 8 // RegMRArgs
)

// CreateCQArgs and ResizeCQArgs: the CQ's ring, of CQESize-byte entries, and the completion EQ
// that hears of it when armed.
const (
	CreateCQArgsSize = 28
	CreateCQQueue    = 0  // QueueArgs
	CreateCQEQ       = 24 // u32: eqn, or CQNoEQ

	CQNoEQ = 0xffffffff

	ResizeCQArgsSize = 32
	ResizeCQNum      = 0 // u32: cqn
	ResizeCQQueue    = 8 // QueueArgs
)

// ModifyCQArgs: a CQ's event moderation, ib_modify_cq's cq_count and cq_period. Once an armed CQ
// fires, its completion event waits until Count completions have been written since it was
// armed (the one that fired it included) or Period microseconds have passed since that one,
// whichever comes first; a busy CQ then costs the guest one interrupt for many completions, as a
// NIC's CQ moderation does. Count 0 or 1 with Period 0 announces each event at once (a new CQ's
// setting). A Count or Period over its bound is EINVAL.
const (
	ModifyCQArgsSize = 8
	ModifyCQNum      = 0 // u32: cqn
	ModifyCQCount    = 4 // u16: completions an event waits for
	ModifyCQPeriod   = 6 // u16: microseconds an event may wait, at most CQModMaxPeriod

	CQModMaxCount  = 0xffff
	CQModMaxPeriod = 0xfff
)

// ModifyQPArgs and QueryQPArgs.
const (
	ModifyQPArgsSize = ModifyQPAttr + QPAttrSize
	ModifyQPNum      = 0 // u32: qpn
	ModifyQPMask     = 4 // u32: ibv_qp_attr_mask
	ModifyQPAttr     = 8 // QPAttr

	QueryQPArgsSize = QueryQPAttr + QPAttrSize
	QueryQPNum      = 0 // u32: qpn
	QueryQPAttr     = 8 // QPAttr, written by the device
)

// CreateSRQArgs and ModifySRQArgs.
const (
	CreateSRQArgsSize = 40
	CreateSRQPD       = 0  // u32
	CreateSRQMaxSGE   = 4  // u32: 1 to the device's max SGE
	CreateSRQLimit    = 8  // u32: below the ring's receives
	CreateSRQQueue    = 16 // QueueArgs

	ModifySRQArgsSize = 40
	ModifySRQNum      = 0  // u32: srqn
	ModifySRQMask     = 4  // u32: SRQModify*
	ModifySRQLimit    = 8  // u32: with SRQModifyLimit
	ModifySRQQueue    = 16 // QueueArgs: with SRQModifyMaxWR
)

// OpModifySRQ's mask: what it changes (ibv_modify_srq's IBV_SRQ_MAX_WR and IBV_SRQ_LIMIT).
const (
	SRQModifyMaxWR = 1 // a new ring at ModifySRQQueue, the posted receives moved over
	SRQModifyLimit = 2 // the limit at ModifySRQLimit
)

// Answers written into a command's arguments.
const (
	QueryDeviceWords = (RegCtrlQMax-RegCaps)/4 + 1 // OpQueryDevice: registers CAPS to CTRLQ_MAX, in order
	QueryGIDOffset   = QueryGIDGID                 // OpQueryGID: the GID's 16 bytes
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
	RegMRArgsSize = RegMRPages + PageListSize
	RegMRPD       = 0  // u32
	RegMRAccess   = 4  // u32: ibv_access_flags
	RegMRIOVA     = 8  // u64: the address the wire names (0 for zero-based)
	RegMRLength   = 16 // u64
	RegMROffset   = 24 // u64: first byte's offset in the first page
	RegMRPages    = 32 // PageList
)

// On-demand paging (CapOnDemand, ABI 1.3). REG_MR with IBV_ACCESS_ON_DEMAND registers an MR
// with no pages: its page list must be empty (0 pages) and its offset 0; its iova and length
// name its wire addresses (iova 0 and length 2^64-1: the implicit MR over a whole address
// space); a page-fault EQ must exist. When work reaches a page the MR lacks, the function puts
// an entry in the page-fault EQ (PF*) and waits, as docs/device.md says; the driver answers
// with OpMapPages and, for an entry with FaultHeld, OpResumeQP.

// MapPagesArgs: wire pages from VA (4 KiB-aligned) get the pages of a page list of 4 KiB pages,
// in order; at most MaxMRPages, each inside the MR. All are taken or none.
const (
	MapPagesArgsSize = 32
	MapPagesSTag     = 0  // u32: the on-demand MR's stag
	MapPagesVA       = 8  // u64
	MapPagesList     = 16 // PageList
)

// UnmapPagesArgs: the MR loses the pages holding wire addresses [VA, VA+Length). The command is
// done only once no access of the function's to those pages is under way, so a driver may let
// them go when it sees it done (an MMU notifier's invalidation).
const (
	UnmapPagesArgsSize = 24
	UnmapPagesSTag     = 0  // u32
	UnmapPagesVA       = 8  // u64
	UnmapPagesLength   = 16 // u64
)

// ResumeQPArgs: Status 0 lets the held send queue go on (a page still missing faults again);
// any other ibv_wc_status, up to ResumeMaxStatus, completes the work request that faulted with
// it and moves the QP to ERR. A QP no fault holds answers EINVAL and nothing changes: a driver
// that sees a gap in the page-fault EQ's sequence may resume each of its QPs.
const (
	ResumeQPArgsSize = 8
	ResumeQPNum      = 0 // u32: qpn
	ResumeQPStatus   = 4 // u32

	ResumeMaxStatus = 21 // IBV_WC_GENERAL_ERR
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
	CreateQPType      = 4  // u8: QPTypeRC; with CapUD also QPTypeUC, QPTypeUD and QPTypeGSI
	CreateQPSigAll    = 5  // u8: sq_sig_all
	CreateQPSendCQ    = 8  // u32 cqn
	CreateQPRecvCQ    = 12 // u32 cqn
	CreateQPSRQ       = 16 // u32 srqn, 0: none
	CreateQPMaxInline = 20 // u32
	CreateQPSendSGE   = 24 // u16
	CreateQPRecvSGE   = 26 // u16
	CreateQPSQ        = 32 // QueueArgs
	CreateQPRQ        = 56 // QueueArgs (ignored with an SRQ)

	CreateQPArgsSize = CreateQPRQ + QueueArgsSize
)

// QP types (ibv_qp_type) and port states (ibv_port_state), as libibverbs numbers them; the GSI
// QP, which users never create, by the kernel's number (IB_QPT_GSI): QPN 1, one per function.
const (
	QPTypeGSI = 1
	QPTypeRC  = 2
	QPTypeUC  = 3
	QPTypeUD  = 4

	PortDown   = 1
	PortActive = 4
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
	QPAttrDMAC          = 52 // 6 bytes, reserved: the device resolves the peer's MAC itself; ignored on modify, zeros on query
	QPAttrMaxSendWR     = 60 // u32 (query)
	QPAttrMaxRecvWR     = 64 // u32 (query)
	QPAttrMaxSendSGE    = 68 // u16 (query)
	QPAttrMaxRecvSGE    = 70 // u16 (query)
	QPAttrMaxInline     = 72 // u32 (query)
	QPAttrQKey          = 76 // u32: a UD or GSI QP's Q_Key (IBV_QP_QKEY)
)

// RegDMAArgs: the MR a kernel PD's local DMA lkey names, over all of guest memory, with the
// access given (local write at most: a DMA MR grants nothing remote).
const (
	RegDMAArgsSize = 8
	RegDMAPD       = 0 // u32
	RegDMAAccess   = 4 // u32: ibv_access_flags
)

// McastArgs: a UD QP joins or leaves a multicast group, named by its GID.
const (
	McastArgsSize = 24
	McastQPN      = 0 // u32
	McastGID      = 8 // 16 bytes, network order
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

// The page-fault EQ (CapOnDemand): kind EQPageFault, one at most, of FaultEntrySize-byte entries
// (CREATE_EQ's log count counts them). An entry asks for the pages [FaultVA, FaultVA+4096*FaultPages) of
// the on-demand MR FaultSTag, which work of QP FaultQPN reached. FaultHeld: the QP's send queue waits for
// OpResumeQP; otherwise the work comes again on its own (an RNR NAK, a retransmission) and
// wants only the pages.
const (
	EQPageFault = 2

	FaultEntrySize = 32
	FaultFlags     = 0  // u8: PF* bits
	FaultQPN       = 4  // u32
	FaultSeq       = 8  // u64: as EQSeq
	FaultVA        = 16 // u64: 4 KiB-aligned wire address
	FaultSTag      = 24 // u32
	FaultPages     = 28 // u32

	FaultWrite = 1 << 0 // the access stores into the pages
	FaultHeld  = 1 << 1
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
