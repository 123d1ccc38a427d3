package abi

// Views of the control queue's layouts: each is a byte slice with accessors at the offsets
// above, the one way the device and the Go driver read and write an entry and its arguments.
// A view never copies; a setter writes into the bytes it views, and a view of a part (an
// entry's arguments, a command's page list or ring, a QP's attributes) is a slice of the
// same bytes. A view made by CtrlEntryOf, or by an entry's argument methods, is exactly its
// layout's size, so its accessors never reach past it; one made by converting a slice
// (make(CreateQPArgs, CreateQPArgsSize)) must be of its layout's size at least.
//
// The package imports nothing, so that the C header's generator can type-check it alone: the
// little-endian helpers are its own.

func get16(b []byte) uint16 { _ = b[1]; return uint16(b[0]) | uint16(b[1])<<8 }
func get32(b []byte) uint32 { _ = b[3]; return uint32(get16(b)) | uint32(get16(b[2:]))<<16 }
func get64(b []byte) uint64 { _ = b[7]; return uint64(get32(b)) | uint64(get32(b[4:]))<<32 }

func put16(b []byte, v uint16) { _ = b[1]; b[0], b[1] = byte(v), byte(v>>8) }
func put32(b []byte, v uint32) { _ = b[3]; put16(b, uint16(v)); put16(b[2:], uint16(v>>16)) }
func put64(b []byte, v uint64) { _ = b[7]; put32(b, uint32(v)); put32(b[4:], uint32(v>>32)) }

// part is the size bytes of b at off, capped so that an append cannot reach past them.
func part(b []byte, off, size int) []byte { return b[off : off+size : off+size] }

// CtrlEntry is a view of one control-queue entry (CtrlEntrySize bytes).
type CtrlEntry []byte

// CtrlEntryOf views the first CtrlEntrySize bytes of b as an entry; false if b is shorter.
func CtrlEntryOf(b []byte) (CtrlEntry, bool) {
	if len(b) < CtrlEntrySize {
		return nil, false
	}
	return CtrlEntry(part(b, 0, CtrlEntrySize)), true
}

func (e CtrlEntry) Opcode() uint16      { return get16(e[CtrlOpcode:]) }
func (e CtrlEntry) SetOpcode(v uint16)  { put16(e[CtrlOpcode:], v) }
func (e CtrlEntry) Flags() uint16       { return get16(e[CtrlFlags:]) }
func (e CtrlEntry) SetFlags(v uint16)   { put16(e[CtrlFlags:], v) }
func (e CtrlEntry) Status() uint32      { return get32(e[CtrlStatus:]) }
func (e CtrlEntry) SetStatus(v uint32)  { put32(e[CtrlStatus:], v) }
func (e CtrlEntry) Cookie() uint64      { return get64(e[CtrlCookie:]) }
func (e CtrlEntry) SetCookie(v uint64)  { put64(e[CtrlCookie:], v) }
func (e CtrlEntry) Result(i int) uint32 { return get32(e[CtrlResult+4*i:]) }

// SetResult writes result i (0 to 3: Result*).
func (e CtrlEntry) SetResult(i int, v uint32) { put32(e[CtrlResult+4*i:], v) }

// Results are the four results' 16 bytes.
func (e CtrlEntry) Results() []byte { return part(e, CtrlResult, 16) }

// StatusBytes are the status's 4 bytes, which the device writes back after the rest.
func (e CtrlEntry) StatusBytes() []byte { return part(e, CtrlStatus, 4) }

// ResultBytes are the results and the arguments: what the device writes back before the status.
func (e CtrlEntry) ResultBytes() []byte { return e[CtrlResult:CtrlEntrySize:CtrlEntrySize] }

// Args is the whole argument area, CtrlEntrySize-CtrlArgs bytes.
func (e CtrlEntry) Args() []byte { return part(e, CtrlArgs, CtrlEntrySize-CtrlArgs) }

// QueryDeviceWord is register RegCaps+4*i as OpQueryDevice answers it (i below QueryDeviceWords).
func (e CtrlEntry) QueryDeviceWord(i int) uint32 { return get32(e[CtrlArgs+4*i:]) }

// SetQueryDeviceWord writes the answer's word i.
func (e CtrlEntry) SetQueryDeviceWord(i int, v uint32) { put32(e[CtrlArgs+4*i:], v) }

// The arguments of each command, as views of the entry's argument area.

func (e CtrlEntry) NumArgs() NumArgs             { return NumArgs(e.args(NumArgsSize)) }
func (e CtrlEntry) QueryPortArgs() QueryPortArgs { return QueryPortArgs(e.args(QueryPortArgsSize)) }
func (e CtrlEntry) QueryGIDArgs() QueryGIDArgs   { return QueryGIDArgs(e.args(QueryGIDArgsSize)) }
func (e CtrlEntry) CreateEQArgs() CreateEQArgs   { return CreateEQArgs(e.args(CreateEQArgsSize)) }
func (e CtrlEntry) SetAVArgs() SetAVArgs         { return SetAVArgs(e.args(SetAVArgsSize)) }
func (e CtrlEntry) AllocSTagArgs() AllocSTagArgs { return AllocSTagArgs(e.args(AllocSTagArgsSize)) }
func (e CtrlEntry) RegMRArgs() RegMRArgs         { return RegMRArgs(e.args(RegMRArgsSize)) }
func (e CtrlEntry) ReregMRArgs() ReregMRArgs     { return ReregMRArgs(e.args(ReregMRArgsSize)) }
func (e CtrlEntry) RegDMAArgs() RegDMAArgs       { return RegDMAArgs(e.args(RegDMAArgsSize)) }
func (e CtrlEntry) McastArgs() McastArgs         { return McastArgs(e.args(McastArgsSize)) }
func (e CtrlEntry) MapPagesArgs() MapPagesArgs   { return MapPagesArgs(e.args(MapPagesArgsSize)) }
func (e CtrlEntry) UnmapPagesArgs() UnmapPagesArgs {
	return UnmapPagesArgs(e.args(UnmapPagesArgsSize))
}
func (e CtrlEntry) ResumeQPArgs() ResumeQPArgs   { return ResumeQPArgs(e.args(ResumeQPArgsSize)) }
func (e CtrlEntry) CreateCQArgs() CreateCQArgs   { return CreateCQArgs(e.args(CreateCQArgsSize)) }
func (e CtrlEntry) ResizeCQArgs() ResizeCQArgs   { return ResizeCQArgs(e.args(ResizeCQArgsSize)) }
func (e CtrlEntry) ModifyCQArgs() ModifyCQArgs   { return ModifyCQArgs(e.args(ModifyCQArgsSize)) }
func (e CtrlEntry) CreateQPArgs() CreateQPArgs   { return CreateQPArgs(e.args(CreateQPArgsSize)) }
func (e CtrlEntry) ModifyQPArgs() ModifyQPArgs   { return ModifyQPArgs(e.args(ModifyQPArgsSize)) }
func (e CtrlEntry) QueryQPArgs() QueryQPArgs     { return QueryQPArgs(e.args(QueryQPArgsSize)) }
func (e CtrlEntry) CreateSRQArgs() CreateSRQArgs { return CreateSRQArgs(e.args(CreateSRQArgsSize)) }
func (e CtrlEntry) ModifySRQArgs() ModifySRQArgs { return ModifySRQArgs(e.args(ModifySRQArgsSize)) }
func (e CtrlEntry) EthRingArgs() EthRingArgs     { return EthRingArgs(e.args(EthRingArgsSize)) }

func (e CtrlEntry) args(size int) []byte { return part(e, CtrlArgs, size) }

// PageList is a view of a page-list descriptor (PageListSize bytes).
type PageList []byte

func (p PageList) Addr() uint64           { return get64(p[PLAddr:]) }
func (p PageList) SetAddr(v uint64)       { put64(p[PLAddr:], v) }
func (p PageList) Pages() uint32          { return get32(p[PLPages:]) }
func (p PageList) SetPages(v uint32)      { put32(p[PLPages:], v) }
func (p PageList) Shift() uint8           { return p[PLShift] }
func (p PageList) SetShift(v uint8)       { p[PLShift] = v }
func (p PageList) Levels() uint8          { return p[PLLevels] }
func (p PageList) SetLevels(v uint8)      { p[PLLevels] = v }
func pageList(b []byte, off int) PageList { return PageList(part(b, off, PageListSize)) }

// QueueArgs is a view of a ring's description (QueueArgsSize bytes).
type QueueArgs []byte

func (q QueueArgs) LogCount() uint8     { return q[QueueLogCount] }
func (q QueueArgs) SetLogCount(v uint8) { q[QueueLogCount] = v }
func (q QueueArgs) LogElem() uint8      { return q[QueueLogElem] }
func (q QueueArgs) SetLogElem(v uint8)  { q[QueueLogElem] = v }
func (q QueueArgs) Pages() PageList     { return pageList(q, QueuePages) }
func queueArgs(b []byte, off int) QueueArgs {
	return QueueArgs(part(b, off, QueueArgsSize))
}

// NumArgs views the arguments of a command naming one object.
type NumArgs []byte

func (a NumArgs) Num() uint32     { return get32(a[NumArgsNum:]) }
func (a NumArgs) SetNum(v uint32) { put32(a[NumArgsNum:], v) }

// QueryPortArgs views OpQueryPort's arguments.
type QueryPortArgs []byte

func (a QueryPortArgs) Port() uint32     { return get32(a[QueryPortPort:]) }
func (a QueryPortArgs) SetPort(v uint32) { put32(a[QueryPortPort:], v) }

// QueryGIDArgs views OpQueryGID's arguments and answer.
type QueryGIDArgs []byte

func (a QueryGIDArgs) Port() uint32      { return get32(a[QueryGIDPort:]) }
func (a QueryGIDArgs) SetPort(v uint32)  { put32(a[QueryGIDPort:], v) }
func (a QueryGIDArgs) Index() uint32     { return get32(a[QueryGIDIndex:]) }
func (a QueryGIDArgs) SetIndex(v uint32) { put32(a[QueryGIDIndex:], v) }

// GID is the answer's 16 bytes, written by the device.
func (a QueryGIDArgs) GID() []byte { return part(a, QueryGIDGID, 16) }

// CreateEQArgs views OpCreateEQ's arguments.
type CreateEQArgs []byte

func (a CreateEQArgs) Pages() PageList     { return pageList(a, CreateEQPages) }
func (a CreateEQArgs) LogCount() uint8     { return a[CreateEQLogCount] }
func (a CreateEQArgs) SetLogCount(v uint8) { a[CreateEQLogCount] = v }
func (a CreateEQArgs) Kind() uint8         { return a[CreateEQKind] }
func (a CreateEQArgs) SetKind(v uint8)     { a[CreateEQKind] = v }
func (a CreateEQArgs) Vector() uint16      { return get16(a[CreateEQVector:]) }
func (a CreateEQArgs) SetVector(v uint16)  { put16(a[CreateEQVector:], v) }

// SetAVArgs views OpSetAVTable's arguments.
type SetAVArgs []byte

func (a SetAVArgs) Pages() PageList     { return pageList(a, SetAVPages) }
func (a SetAVArgs) Entries() uint32     { return get32(a[SetAVEntries:]) }
func (a SetAVArgs) SetEntries(v uint32) { put32(a[SetAVEntries:], v) }

// AllocSTagArgs views OpAllocSTag's arguments.
type AllocSTagArgs []byte

func (a AllocSTagArgs) PD() uint32           { return get32(a[AllocSTagPD:]) }
func (a AllocSTagArgs) SetPD(v uint32)       { put32(a[AllocSTagPD:], v) }
func (a AllocSTagArgs) Kind() uint32         { return get32(a[AllocSTagKind:]) }
func (a AllocSTagArgs) SetKind(v uint32)     { put32(a[AllocSTagKind:], v) }
func (a AllocSTagArgs) MaxPages() uint32     { return get32(a[AllocSTagMaxPages:]) }
func (a AllocSTagArgs) SetMaxPages(v uint32) { put32(a[AllocSTagMaxPages:], v) }

// RegMRArgs views OpRegMR's arguments (and OpReregMR's, from ReregMRReg).
type RegMRArgs []byte

func (a RegMRArgs) PD() uint32         { return get32(a[RegMRPD:]) }
func (a RegMRArgs) SetPD(v uint32)     { put32(a[RegMRPD:], v) }
func (a RegMRArgs) Access() uint32     { return get32(a[RegMRAccess:]) }
func (a RegMRArgs) SetAccess(v uint32) { put32(a[RegMRAccess:], v) }
func (a RegMRArgs) IOVA() uint64       { return get64(a[RegMRIOVA:]) }
func (a RegMRArgs) SetIOVA(v uint64)   { put64(a[RegMRIOVA:], v) }
func (a RegMRArgs) Length() uint64     { return get64(a[RegMRLength:]) }
func (a RegMRArgs) SetLength(v uint64) { put64(a[RegMRLength:], v) }
func (a RegMRArgs) Offset() uint64     { return get64(a[RegMROffset:]) }
func (a RegMRArgs) SetOffset(v uint64) { put64(a[RegMROffset:], v) }
func (a RegMRArgs) Pages() PageList    { return pageList(a, RegMRPages) }

// ReregMRArgs views OpReregMR's arguments.
type ReregMRArgs []byte

func (a ReregMRArgs) STag() uint32      { return get32(a[ReregMRSTag:]) }
func (a ReregMRArgs) SetSTag(v uint32)  { put32(a[ReregMRSTag:], v) }
func (a ReregMRArgs) Flags() uint32     { return get32(a[ReregMRFlags:]) }
func (a ReregMRArgs) SetFlags(v uint32) { put32(a[ReregMRFlags:], v) }
func (a ReregMRArgs) Reg() RegMRArgs    { return RegMRArgs(part(a, ReregMRReg, RegMRArgsSize)) }

// RegDMAArgs views OpRegDMAMR's arguments.
type RegDMAArgs []byte

func (a RegDMAArgs) PD() uint32         { return get32(a[RegDMAPD:]) }
func (a RegDMAArgs) SetPD(v uint32)     { put32(a[RegDMAPD:], v) }
func (a RegDMAArgs) Access() uint32     { return get32(a[RegDMAAccess:]) }
func (a RegDMAArgs) SetAccess(v uint32) { put32(a[RegDMAAccess:], v) }

// McastArgs views OpAttachMcast's and OpDetachMcast's arguments.
type McastArgs []byte

func (a McastArgs) QPN() uint32     { return get32(a[McastQPN:]) }
func (a McastArgs) SetQPN(v uint32) { put32(a[McastQPN:], v) }
func (a McastArgs) GID() []byte     { return part(a, McastGID, 16) }

// CreateCQArgs views OpCreateCQ's arguments.
type CreateCQArgs []byte

func (a CreateCQArgs) Queue() QueueArgs { return queueArgs(a, CreateCQQueue) }
func (a CreateCQArgs) EQ() uint32       { return get32(a[CreateCQEQ:]) }
func (a CreateCQArgs) SetEQ(v uint32)   { put32(a[CreateCQEQ:], v) }

// ResizeCQArgs views OpResizeCQ's arguments.
type ResizeCQArgs []byte

func (a ResizeCQArgs) Num() uint32      { return get32(a[ResizeCQNum:]) }
func (a ResizeCQArgs) SetNum(v uint32)  { put32(a[ResizeCQNum:], v) }
func (a ResizeCQArgs) Queue() QueueArgs { return queueArgs(a, ResizeCQQueue) }

// ModifyCQArgs views OpModifyCQ's arguments.
type ModifyCQArgs []byte

func (a ModifyCQArgs) Num() uint32        { return get32(a[ModifyCQNum:]) }
func (a ModifyCQArgs) SetNum(v uint32)    { put32(a[ModifyCQNum:], v) }
func (a ModifyCQArgs) Count() uint16      { return get16(a[ModifyCQCount:]) }
func (a ModifyCQArgs) SetCount(v uint16)  { put16(a[ModifyCQCount:], v) }
func (a ModifyCQArgs) Period() uint16     { return get16(a[ModifyCQPeriod:]) }
func (a ModifyCQArgs) SetPeriod(v uint16) { put16(a[ModifyCQPeriod:], v) }

// CreateQPArgs views OpCreateQP's arguments.
type CreateQPArgs []byte

func (a CreateQPArgs) PD() uint32            { return get32(a[CreateQPPD:]) }
func (a CreateQPArgs) SetPD(v uint32)        { put32(a[CreateQPPD:], v) }
func (a CreateQPArgs) Type() uint8           { return a[CreateQPType] }
func (a CreateQPArgs) SetType(v uint8)       { a[CreateQPType] = v }
func (a CreateQPArgs) SigAll() uint8         { return a[CreateQPSigAll] }
func (a CreateQPArgs) SetSigAll(v uint8)     { a[CreateQPSigAll] = v }
func (a CreateQPArgs) SendCQ() uint32        { return get32(a[CreateQPSendCQ:]) }
func (a CreateQPArgs) SetSendCQ(v uint32)    { put32(a[CreateQPSendCQ:], v) }
func (a CreateQPArgs) RecvCQ() uint32        { return get32(a[CreateQPRecvCQ:]) }
func (a CreateQPArgs) SetRecvCQ(v uint32)    { put32(a[CreateQPRecvCQ:], v) }
func (a CreateQPArgs) SRQ() uint32           { return get32(a[CreateQPSRQ:]) }
func (a CreateQPArgs) SetSRQ(v uint32)       { put32(a[CreateQPSRQ:], v) }
func (a CreateQPArgs) MaxInline() uint32     { return get32(a[CreateQPMaxInline:]) }
func (a CreateQPArgs) SetMaxInline(v uint32) { put32(a[CreateQPMaxInline:], v) }
func (a CreateQPArgs) SendSGE() uint16       { return get16(a[CreateQPSendSGE:]) }
func (a CreateQPArgs) SetSendSGE(v uint16)   { put16(a[CreateQPSendSGE:], v) }
func (a CreateQPArgs) RecvSGE() uint16       { return get16(a[CreateQPRecvSGE:]) }
func (a CreateQPArgs) SetRecvSGE(v uint16)   { put16(a[CreateQPRecvSGE:], v) }
func (a CreateQPArgs) SQ() QueueArgs         { return queueArgs(a, CreateQPSQ) }
func (a CreateQPArgs) RQ() QueueArgs         { return queueArgs(a, CreateQPRQ) }

// ModifyQPArgs views OpModifyQP's arguments.
type ModifyQPArgs []byte

func (a ModifyQPArgs) Num() uint32      { return get32(a[ModifyQPNum:]) }
func (a ModifyQPArgs) SetNum(v uint32)  { put32(a[ModifyQPNum:], v) }
func (a ModifyQPArgs) Mask() uint32     { return get32(a[ModifyQPMask:]) }
func (a ModifyQPArgs) SetMask(v uint32) { put32(a[ModifyQPMask:], v) }
func (a ModifyQPArgs) Attr() QPAttr     { return QPAttr(part(a, ModifyQPAttr, QPAttrSize)) }

// QueryQPArgs views OpQueryQP's arguments and answer.
type QueryQPArgs []byte

func (a QueryQPArgs) Num() uint32     { return get32(a[QueryQPNum:]) }
func (a QueryQPArgs) SetNum(v uint32) { put32(a[QueryQPNum:], v) }

// Attr is the answer, written by the device.
func (a QueryQPArgs) Attr() QPAttr { return QPAttr(part(a, QueryQPAttr, QPAttrSize)) }

// CreateSRQArgs views OpCreateSRQ's arguments.
type CreateSRQArgs []byte

func (a CreateSRQArgs) PD() uint32         { return get32(a[CreateSRQPD:]) }
func (a CreateSRQArgs) SetPD(v uint32)     { put32(a[CreateSRQPD:], v) }
func (a CreateSRQArgs) MaxSGE() uint32     { return get32(a[CreateSRQMaxSGE:]) }
func (a CreateSRQArgs) SetMaxSGE(v uint32) { put32(a[CreateSRQMaxSGE:], v) }
func (a CreateSRQArgs) Limit() uint32      { return get32(a[CreateSRQLimit:]) }
func (a CreateSRQArgs) SetLimit(v uint32)  { put32(a[CreateSRQLimit:], v) }
func (a CreateSRQArgs) Queue() QueueArgs   { return queueArgs(a, CreateSRQQueue) }

// ModifySRQArgs views OpModifySRQ's arguments.
type ModifySRQArgs []byte

func (a ModifySRQArgs) Num() uint32       { return get32(a[ModifySRQNum:]) }
func (a ModifySRQArgs) SetNum(v uint32)   { put32(a[ModifySRQNum:], v) }
func (a ModifySRQArgs) Mask() uint32      { return get32(a[ModifySRQMask:]) }
func (a ModifySRQArgs) SetMask(v uint32)  { put32(a[ModifySRQMask:], v) }
func (a ModifySRQArgs) Limit() uint32     { return get32(a[ModifySRQLimit:]) }
func (a ModifySRQArgs) SetLimit(v uint32) { put32(a[ModifySRQLimit:], v) }
func (a ModifySRQArgs) Queue() QueueArgs  { return queueArgs(a, ModifySRQQueue) }

// EthRingArgs views OpCreateEthRing's arguments (and OpDestroyEthRing's kind).
type EthRingArgs []byte

func (a EthRingArgs) Kind() uint8        { return a[EthRingKind] }
func (a EthRingArgs) SetKind(v uint8)    { a[EthRingKind] = v }
func (a EthRingArgs) Vector() uint16     { return get16(a[EthRingVector:]) }
func (a EthRingArgs) SetVector(v uint16) { put16(a[EthRingVector:], v) }
func (a EthRingArgs) Flags() uint32      { return get32(a[EthRingFlags:]) }
func (a EthRingArgs) SetFlags(v uint32)  { put32(a[EthRingFlags:], v) }
func (a EthRingArgs) Queue() QueueArgs   { return queueArgs(a, EthRingQueue) }

// QPAttr views a QP's attributes (QPAttrSize bytes), as OpModifyQP takes and OpQueryQP answers.
type QPAttr []byte

func (a QPAttr) State() uint8               { return a[QPAttrState] }
func (a QPAttr) SetState(v uint8)           { a[QPAttrState] = v }
func (a QPAttr) CurState() uint8            { return a[QPAttrCurState] }
func (a QPAttr) SetCurState(v uint8)        { a[QPAttrCurState] = v }
func (a QPAttr) PathMTU() uint8             { return a[QPAttrPathMTU] }
func (a QPAttr) SetPathMTU(v uint8)         { a[QPAttrPathMTU] = v }
func (a QPAttr) Timeout() uint8             { return a[QPAttrTimeout] }
func (a QPAttr) SetTimeout(v uint8)         { a[QPAttrTimeout] = v }
func (a QPAttr) RetryCnt() uint8            { return a[QPAttrRetryCnt] }
func (a QPAttr) SetRetryCnt(v uint8)        { a[QPAttrRetryCnt] = v }
func (a QPAttr) RNRRetry() uint8            { return a[QPAttrRNRRetry] }
func (a QPAttr) SetRNRRetry(v uint8)        { a[QPAttrRNRRetry] = v }
func (a QPAttr) MinRNRTimer() uint8         { return a[QPAttrMinRNRTimer] }
func (a QPAttr) SetMinRNRTimer(v uint8)     { a[QPAttrMinRNRTimer] = v }
func (a QPAttr) MaxRdAtomic() uint8         { return a[QPAttrMaxRdAtomic] }
func (a QPAttr) SetMaxRdAtomic(v uint8)     { a[QPAttrMaxRdAtomic] = v }
func (a QPAttr) MaxDestRdAtomic() uint8     { return a[QPAttrMaxDestRdAtom] }
func (a QPAttr) SetMaxDestRdAtomic(v uint8) { a[QPAttrMaxDestRdAtom] = v }
func (a QPAttr) SGIDIndex() uint8           { return a[QPAttrSGIDIndex] }
func (a QPAttr) SetSGIDIndex(v uint8)       { a[QPAttrSGIDIndex] = v }
func (a QPAttr) HopLimit() uint8            { return a[QPAttrHopLimit] }
func (a QPAttr) SetHopLimit(v uint8)        { a[QPAttrHopLimit] = v }
func (a QPAttr) TrafficClass() uint8        { return a[QPAttrTrafficClass] }
func (a QPAttr) SetTrafficClass(v uint8)    { a[QPAttrTrafficClass] = v }
func (a QPAttr) PortNum() uint8             { return a[QPAttrPortNum] }
func (a QPAttr) SetPortNum(v uint8)         { a[QPAttrPortNum] = v }
func (a QPAttr) SQDrainNotify() uint8       { return a[QPAttrSQDrainNotify] }
func (a QPAttr) SetSQDrainNotify(v uint8)   { a[QPAttrSQDrainNotify] = v }
func (a QPAttr) PKeyIndex() uint16          { return get16(a[QPAttrPKeyIndex:]) }
func (a QPAttr) SetPKeyIndex(v uint16)      { put16(a[QPAttrPKeyIndex:], v) }
func (a QPAttr) AccessFlags() uint32        { return get32(a[QPAttrAccessFlags:]) }
func (a QPAttr) SetAccessFlags(v uint32)    { put32(a[QPAttrAccessFlags:], v) }
func (a QPAttr) DestQPN() uint32            { return get32(a[QPAttrDestQPN:]) }
func (a QPAttr) SetDestQPN(v uint32)        { put32(a[QPAttrDestQPN:], v) }
func (a QPAttr) RQPSN() uint32              { return get32(a[QPAttrRQPSN:]) }
func (a QPAttr) SetRQPSN(v uint32)          { put32(a[QPAttrRQPSN:], v) }
func (a QPAttr) SQPSN() uint32              { return get32(a[QPAttrSQPSN:]) }
func (a QPAttr) SetSQPSN(v uint32)          { put32(a[QPAttrSQPSN:], v) }
func (a QPAttr) FlowLabel() uint32          { return get32(a[QPAttrFlowLabel:]) }
func (a QPAttr) SetFlowLabel(v uint32)      { put32(a[QPAttrFlowLabel:], v) }
func (a QPAttr) DGID() []byte               { return part(a, QPAttrDGID, 16) }
func (a QPAttr) DMAC() []byte               { return part(a, QPAttrDMAC, 6) }
func (a QPAttr) MaxSendWR() uint32          { return get32(a[QPAttrMaxSendWR:]) }
func (a QPAttr) SetMaxSendWR(v uint32)      { put32(a[QPAttrMaxSendWR:], v) }
func (a QPAttr) MaxRecvWR() uint32          { return get32(a[QPAttrMaxRecvWR:]) }
func (a QPAttr) SetMaxRecvWR(v uint32)      { put32(a[QPAttrMaxRecvWR:], v) }
func (a QPAttr) MaxSendSGE() uint16         { return get16(a[QPAttrMaxSendSGE:]) }
func (a QPAttr) SetMaxSendSGE(v uint16)     { put16(a[QPAttrMaxSendSGE:], v) }
func (a QPAttr) MaxRecvSGE() uint16         { return get16(a[QPAttrMaxRecvSGE:]) }
func (a QPAttr) SetMaxRecvSGE(v uint16)     { put16(a[QPAttrMaxRecvSGE:], v) }
func (a QPAttr) MaxInline() uint32          { return get32(a[QPAttrMaxInline:]) }
func (a QPAttr) SetMaxInline(v uint32)      { put32(a[QPAttrMaxInline:], v) }
func (a QPAttr) QKey() uint32               { return get32(a[QPAttrQKey:]) }
func (a QPAttr) SetQKey(v uint32)           { put32(a[QPAttrQKey:], v) }

// Views of the rings' elements: the work queues' WQEs and SGEs in rxe's layout, the CQEs, the
// event queues' entries, the address-vector table's entries and the Ethernet descriptors. The
// device reads a guest's WQE into a buffer of what its slot holds at least (SendWQESize or
// RecvWQESize and the SGEs or inline bytes the QP takes), and checks an SGE count against that
// before it reads the SGEs.

// SendWQE is a view of a struct rxe_send_wqe and what follows it in its slot.
type SendWQE []byte

func (w SendWQE) WRID() uint64            { return get64(w[SendWRID:]) }
func (w SendWQE) SetWRID(v uint64)        { put64(w[SendWRID:], v) }
func (w SendWQE) Opcode() uint32          { return get32(w[SendOpcode:]) }
func (w SendWQE) SetOpcode(v uint32)      { put32(w[SendOpcode:], v) }
func (w SendWQE) Flags() uint32           { return get32(w[SendFlags:]) }
func (w SendWQE) SetFlags(v uint32)       { put32(w[SendFlags:], v) }
func (w SendWQE) Imm() uint32             { return get32(w[SendImm:]) }
func (w SendWQE) SetImm(v uint32)         { put32(w[SendImm:], v) }
func (w SendWQE) RemoteAddr() uint64      { return get64(w[SendRemote:]) }
func (w SendWQE) SetRemoteAddr(v uint64)  { put64(w[SendRemote:], v) }
func (w SendWQE) RKey() uint32            { return get32(w[SendRKey:]) }
func (w SendWQE) SetRKey(v uint32)        { put32(w[SendRKey:], v) }
func (w SendWQE) CompareAdd() uint64      { return get64(w[SendCompare:]) }
func (w SendWQE) SetCompareAdd(v uint64)  { put64(w[SendCompare:], v) }
func (w SendWQE) Swap() uint64            { return get64(w[SendSwap:]) }
func (w SendWQE) SetSwap(v uint64)        { put64(w[SendSwap:], v) }
func (w SendWQE) AtomicRKey() uint32      { return get32(w[SendAtomRKey:]) }
func (w SendWQE) SetAtomicRKey(v uint32)  { put32(w[SendAtomRKey:], v) }
func (w SendWQE) RemoteQPN() uint32       { return get32(w[SendRemoteQPN:]) }
func (w SendWQE) SetRemoteQPN(v uint32)   { put32(w[SendRemoteQPN:], v) }
func (w SendWQE) RemoteQKey() uint32      { return get32(w[SendRemoteQKey:]) }
func (w SendWQE) SetRemoteQKey(v uint32)  { put32(w[SendRemoteQKey:], v) }
func (w SendWQE) PKeyIndex() uint16       { return get16(w[SendPKeyIndex:]) }
func (w SendWQE) SetPKeyIndex(v uint16)   { put16(w[SendPKeyIndex:], v) }
func (w SendWQE) AHNum() uint32           { return get32(w[SendAHNum:]) }
func (w SendWQE) SetAHNum(v uint32)       { put32(w[SendAHNum:], v) }
func (w SendWQE) AV() RXEAV               { return RXEAV(part(w, SendAV, RXEAVSize)) }
func (w SendWQE) MWAddr() uint64          { return get64(w[SendMWAddr:]) }
func (w SendWQE) SetMWAddr(v uint64)      { put64(w[SendMWAddr:], v) }
func (w SendWQE) MWLength() uint64        { return get64(w[SendMWLength:]) }
func (w SendWQE) SetMWLength(v uint64)    { put64(w[SendMWLength:], v) }
func (w SendWQE) MWMRLKey() uint32        { return get32(w[SendMWMRLKey:]) }
func (w SendWQE) SetMWMRLKey(v uint32)    { put32(w[SendMWMRLKey:], v) }
func (w SendWQE) MWRKey() uint32          { return get32(w[SendMWRKey:]) }
func (w SendWQE) SetMWRKey(v uint32)      { put32(w[SendMWRKey:], v) }
func (w SendWQE) MWNewRKey() uint32       { return get32(w[SendMWNewRKey:]) }
func (w SendWQE) SetMWNewRKey(v uint32)   { put32(w[SendMWNewRKey:], v) }
func (w SendWQE) MWAccess() uint32        { return get32(w[SendMWAccess:]) }
func (w SendWQE) SetMWAccess(v uint32)    { put32(w[SendMWAccess:], v) }
func (w SendWQE) FlushLength() uint32     { return get32(w[SendFlushLen:]) }
func (w SendWQE) SetFlushLength(v uint32) { put32(w[SendFlushLen:], v) }
func (w SendWQE) FlushRKey() uint32       { return get32(w[SendFlushRKey:]) }
func (w SendWQE) SetFlushRKey(v uint32)   { put32(w[SendFlushRKey:], v) }
func (w SendWQE) FlushType() uint8        { return w[SendFlushType] }
func (w SendWQE) SetFlushType(v uint8)    { w[SendFlushType] = v }
func (w SendWQE) FlushLevel() uint8       { return w[SendFlushLvl] }
func (w SendWQE) SetFlushLevel(v uint8)   { w[SendFlushLvl] = v }
func (w SendWQE) RegKey() uint32          { return get32(w[RegWRKey:]) }
func (w SendWQE) SetRegKey(v uint32)      { put32(w[RegWRKey:], v) }
func (w SendWQE) RegAccess() uint32       { return get32(w[RegWRAccess:]) }
func (w SendWQE) SetRegAccess(v uint32)   { put32(w[RegWRAccess:], v) }
func (w SendWQE) RegIOVA() uint64         { return get64(w[RegWRIOVA:]) }
func (w SendWQE) SetRegIOVA(v uint64)     { put64(w[RegWRIOVA:], v) }
func (w SendWQE) RegLength() uint64       { return get64(w[RegWRLength:]) }
func (w SendWQE) SetRegLength(v uint64)   { put64(w[RegWRLength:], v) }
func (w SendWQE) RegOffset() uint64       { return get64(w[RegWROffset:]) }
func (w SendWQE) SetRegOffset(v uint64)   { put64(w[RegWROffset:], v) }
func (w SendWQE) RegPages() PageList      { return pageList(w, RegWRPages) }
func (w SendWQE) IOVA() uint64            { return get64(w[SendIOVA:]) }
func (w SendWQE) SetIOVA(v uint64)        { put64(w[SendIOVA:], v) }
func (w SendWQE) DMALength() uint32       { return get32(w[SendDMALength:]) }
func (w SendWQE) SetDMALength(v uint32)   { put32(w[SendDMALength:], v) }
func (w SendWQE) DMAResid() uint32        { return get32(w[SendDMAResid:]) }
func (w SendWQE) SetDMAResid(v uint32)    { put32(w[SendDMAResid:], v) }
func (w SendWQE) NumSGE() uint32          { return get32(w[SendDMANumSGE:]) }
func (w SendWQE) SetNumSGE(v uint32)      { put32(w[SendDMANumSGE:], v) }

// AtomicWrite is an ATOMIC_WRITE's 8 bytes (dma.atomic_wr), where SGEs would start.
func (w SendWQE) AtomicWrite() []byte { return part(w, SendAtomicWr, 8) }

// Payload is what follows the WQE in its slot: the inline data or the SGEs.
func (w SendWQE) Payload() []byte { return w[SendSGEs:] }

// SGE is SGE i of the WQE's list.
func (w SendWQE) SGE(i int) SGE { return SGE(part(w, SendSGEs+i*SGESize, SGESize)) }

// RecvWQE is a view of a struct rxe_recv_wqe and its SGEs.
type RecvWQE []byte

func (w RecvWQE) WRID() uint64          { return get64(w[RecvWRID:]) }
func (w RecvWQE) SetWRID(v uint64)      { put64(w[RecvWRID:], v) }
func (w RecvWQE) DMALength() uint32     { return get32(w[RecvDMALength:]) }
func (w RecvWQE) SetDMALength(v uint32) { put32(w[RecvDMALength:], v) }
func (w RecvWQE) NumSGE() uint32        { return get32(w[RecvDMANumSGE:]) }
func (w RecvWQE) SetNumSGE(v uint32)    { put32(w[RecvDMANumSGE:], v) }

// SGE is SGE i of the WQE's list.
func (w RecvWQE) SGE(i int) SGE { return SGE(part(w, RecvSGEs+i*SGESize, SGESize)) }

// SGE is a view of a struct rxe_sge.
type SGE []byte

func (s SGE) Addr() uint64       { return get64(s[SGEAddr:]) }
func (s SGE) SetAddr(v uint64)   { put64(s[SGEAddr:], v) }
func (s SGE) Length() uint32     { return get32(s[SGELength:]) }
func (s SGE) SetLength(v uint32) { put32(s[SGELength:], v) }
func (s SGE) LKey() uint32       { return get32(s[SGELKey:]) }
func (s SGE) SetLKey(v uint32)   { put32(s[SGELKey:], v) }

// RXEAV is a view of a struct rxe_av.
type RXEAV []byte

func (a RXEAV) PortNum() uint8          { return a[RXEAVPortNum] }
func (a RXEAV) SetPortNum(v uint8)      { a[RXEAVPortNum] = v }
func (a RXEAV) NetworkType() uint8      { return a[RXEAVNetworkType] }
func (a RXEAV) SetNetworkType(v uint8)  { a[RXEAVNetworkType] = v }
func (a RXEAV) DMAC() []byte            { return part(a, RXEAVDMAC, 6) }
func (a RXEAV) DGID() []byte            { return part(a, RXEAVDGID, 16) }
func (a RXEAV) FlowLabel() uint32       { return get32(a[RXEAVFlowLabel:]) }
func (a RXEAV) SetFlowLabel(v uint32)   { put32(a[RXEAVFlowLabel:], v) }
func (a RXEAV) SGIDIndex() uint8        { return a[RXEAVSGIDIndex] }
func (a RXEAV) SetSGIDIndex(v uint8)    { a[RXEAVSGIDIndex] = v }
func (a RXEAV) HopLimit() uint8         { return a[RXEAVHopLimit] }
func (a RXEAV) SetHopLimit(v uint8)     { a[RXEAVHopLimit] = v }
func (a RXEAV) TrafficClass() uint8     { return a[RXEAVTrafficClass] }
func (a RXEAV) SetTrafficClass(v uint8) { a[RXEAVTrafficClass] = v }
func (a RXEAV) SGIDAddr() []byte        { return part(a, RXEAVSGIDAddr, 28) }
func (a RXEAV) DGIDAddr() []byte        { return part(a, RXEAVDGIDAddr, 28) }

// CQE is a view of a struct ib_uverbs_wc.
type CQE []byte

func (c CQE) WRID() uint64              { return get64(c[CQEWRID:]) }
func (c CQE) SetWRID(v uint64)          { put64(c[CQEWRID:], v) }
func (c CQE) Status() uint32            { return get32(c[CQEStatus:]) }
func (c CQE) SetStatus(v uint32)        { put32(c[CQEStatus:], v) }
func (c CQE) Opcode() uint32            { return get32(c[CQEOpcode:]) }
func (c CQE) SetOpcode(v uint32)        { put32(c[CQEOpcode:], v) }
func (c CQE) VendorErr() uint32         { return get32(c[CQEVendorErr:]) }
func (c CQE) SetVendorErr(v uint32)     { put32(c[CQEVendorErr:], v) }
func (c CQE) ByteLen() uint32           { return get32(c[CQEByteLen:]) }
func (c CQE) SetByteLen(v uint32)       { put32(c[CQEByteLen:], v) }
func (c CQE) Imm() uint32               { return get32(c[CQEImm:]) }
func (c CQE) SetImm(v uint32)           { put32(c[CQEImm:], v) }
func (c CQE) QPNum() uint32             { return get32(c[CQEQPNum:]) }
func (c CQE) SetQPNum(v uint32)         { put32(c[CQEQPNum:], v) }
func (c CQE) SrcQP() uint32             { return get32(c[CQESrcQP:]) }
func (c CQE) SetSrcQP(v uint32)         { put32(c[CQESrcQP:], v) }
func (c CQE) WCFlags() uint32           { return get32(c[CQEWCFlags:]) }
func (c CQE) SetWCFlags(v uint32)       { put32(c[CQEWCFlags:], v) }
func (c CQE) PKeyIndex() uint16         { return get16(c[CQEPKeyIndex:]) }
func (c CQE) SetPKeyIndex(v uint16)     { put16(c[CQEPKeyIndex:], v) }
func (c CQE) SLID() uint16              { return get16(c[CQESLID:]) }
func (c CQE) SetSLID(v uint16)          { put16(c[CQESLID:], v) }
func (c CQE) SL() uint8                 { return c[CQESL] }
func (c CQE) SetSL(v uint8)             { c[CQESL] = v }
func (c CQE) DLIDPathBits() uint8       { return c[CQEDLIDPath] }
func (c CQE) SetDLIDPathBits(v uint8)   { c[CQEDLIDPath] = v }
func (c CQE) PortNum() uint8            { return c[CQEPortNum] }
func (c CQE) SetPortNum(v uint8)        { c[CQEPortNum] = v }
func (c CQE) NetworkHdrType() uint8     { return c[CQENetHdr] }
func (c CQE) SetNetworkHdrType(v uint8) { c[CQENetHdr] = v }

// MapPagesArgs views OpMapPages's arguments.
type MapPagesArgs []byte

func (a MapPagesArgs) STag() uint32     { return get32(a[MapPagesSTag:]) }
func (a MapPagesArgs) SetSTag(v uint32) { put32(a[MapPagesSTag:], v) }
func (a MapPagesArgs) VA() uint64       { return get64(a[MapPagesVA:]) }
func (a MapPagesArgs) SetVA(v uint64)   { put64(a[MapPagesVA:], v) }
func (a MapPagesArgs) Pages() PageList  { return pageList(a, MapPagesList) }

// UnmapPagesArgs views OpUnmapPages's arguments.
type UnmapPagesArgs []byte

func (a UnmapPagesArgs) STag() uint32       { return get32(a[UnmapPagesSTag:]) }
func (a UnmapPagesArgs) SetSTag(v uint32)   { put32(a[UnmapPagesSTag:], v) }
func (a UnmapPagesArgs) VA() uint64         { return get64(a[UnmapPagesVA:]) }
func (a UnmapPagesArgs) SetVA(v uint64)     { put64(a[UnmapPagesVA:], v) }
func (a UnmapPagesArgs) Length() uint64     { return get64(a[UnmapPagesLength:]) }
func (a UnmapPagesArgs) SetLength(v uint64) { put64(a[UnmapPagesLength:], v) }

// ResumeQPArgs views OpResumeQP's arguments.
type ResumeQPArgs []byte

func (a ResumeQPArgs) QPN() uint32        { return get32(a[ResumeQPNum:]) }
func (a ResumeQPArgs) SetQPN(v uint32)    { put32(a[ResumeQPNum:], v) }
func (a ResumeQPArgs) Status() uint32     { return get32(a[ResumeQPStatus:]) }
func (a ResumeQPArgs) SetStatus(v uint32) { put32(a[ResumeQPStatus:], v) }

// FaultEntry is a view of a page-fault EQ's entry.
type FaultEntry []byte

func (e FaultEntry) Flags() uint8      { return e[FaultFlags] }
func (e FaultEntry) SetFlags(v uint8)  { e[FaultFlags] = v }
func (e FaultEntry) QPN() uint32       { return get32(e[FaultQPN:]) }
func (e FaultEntry) SetQPN(v uint32)   { put32(e[FaultQPN:], v) }
func (e FaultEntry) Seq() uint64       { return get64(e[FaultSeq:]) }
func (e FaultEntry) SetSeq(v uint64)   { put64(e[FaultSeq:], v) }
func (e FaultEntry) VA() uint64        { return get64(e[FaultVA:]) }
func (e FaultEntry) SetVA(v uint64)    { put64(e[FaultVA:], v) }
func (e FaultEntry) STag() uint32      { return get32(e[FaultSTag:]) }
func (e FaultEntry) SetSTag(v uint32)  { put32(e[FaultSTag:], v) }
func (e FaultEntry) Pages() uint32     { return get32(e[FaultPages:]) }
func (e FaultEntry) SetPages(v uint32) { put32(e[FaultPages:], v) }

// EQEntry is a view of an event queue's entry.
type EQEntry []byte

func (e EQEntry) Type() uint8     { return e[EQType] }
func (e EQEntry) SetType(v uint8) { e[EQType] = v }
func (e EQEntry) Num() uint32     { return get32(e[EQNum:]) }
func (e EQEntry) SetNum(v uint32) { put32(e[EQNum:], v) }
func (e EQEntry) Seq() uint64     { return get64(e[EQSeq:]) }
func (e EQEntry) SetSeq(v uint64) { put64(e[EQSeq:], v) }

// AVEntry is a view of an entry of the address-vector table.
type AVEntry []byte

func (a AVEntry) Flags() uint32           { return get32(a[AVFlags:]) }
func (a AVEntry) SetFlags(v uint32)       { put32(a[AVFlags:], v) }
func (a AVEntry) PD() uint32              { return get32(a[AVPD:]) }
func (a AVEntry) SetPD(v uint32)          { put32(a[AVPD:], v) }
func (a AVEntry) DGID() []byte            { return part(a, AVDGID, 16) }
func (a AVEntry) FlowLabel() uint32       { return get32(a[AVFlowLabel:]) }
func (a AVEntry) SetFlowLabel(v uint32)   { put32(a[AVFlowLabel:], v) }
func (a AVEntry) SGIDIndex() uint8        { return a[AVSGIDIndex] }
func (a AVEntry) SetSGIDIndex(v uint8)    { a[AVSGIDIndex] = v }
func (a AVEntry) HopLimit() uint8         { return a[AVHopLimit] }
func (a AVEntry) SetHopLimit(v uint8)     { a[AVHopLimit] = v }
func (a AVEntry) TrafficClass() uint8     { return a[AVTrafficClass] }
func (a AVEntry) SetTrafficClass(v uint8) { a[AVTrafficClass] = v }
func (a AVEntry) NetworkType() uint8      { return a[AVNetworkType] }
func (a AVEntry) SetNetworkType(v uint8)  { a[AVNetworkType] = v }
func (a AVEntry) DMAC() []byte            { return part(a, AVDMAC, 6) }

// EthDesc is a view of an Ethernet ring's descriptor.
type EthDesc []byte

func (d EthDesc) Addr() uint64      { return get64(d[EthDescAddr:]) }
func (d EthDesc) SetAddr(v uint64)  { put64(d[EthDescAddr:], v) }
func (d EthDesc) Len() uint32       { return get32(d[EthDescLen:]) }
func (d EthDesc) SetLen(v uint32)   { put32(d[EthDescLen:], v) }
func (d EthDesc) Flags() uint32     { return get32(d[EthDescFlags:]) }
func (d EthDesc) SetFlags(v uint32) { put32(d[EthDescFlags:], v) }
