package abi

// Field is one field of a structure the device and its drivers share.
type Field struct {
	Name string
	Off  int
	Size int // 1, 2, 4, 8, or a byte array's length
	// Array says the field is Size bytes (an address, a GID, a MAC) rather than a number.
	Array bool
	// Union names the union the field belongs to; fields of different members of one union
	// may overlap.
	Union string
}

// Layout is a structure: its fields at their offsets in a Size-byte whole.
type Layout struct {
	Name   string
	Size   int
	Fields []Field
}

// Layouts are every structure of the ABI, for the tests that check them and for the generated C
// header, so that an offset is written down once, in the constants above.
var Layouts = []Layout{
	{"ctrl_entry", CtrlEntrySize, []Field{
		{Name: "opcode", Off: CtrlOpcode, Size: 2}, {Name: "flags", Off: CtrlFlags, Size: 2},
		{Name: "status", Off: CtrlStatus, Size: 4}, {Name: "cookie", Off: CtrlCookie, Size: 8},
		{Name: "result", Off: CtrlResult, Size: 16, Array: true}, {Name: "args", Off: CtrlArgs, Size: CtrlEntrySize - CtrlArgs, Array: true},
	}},
	{"page_list", PageListSize, []Field{
		{Name: "addr", Off: PLAddr, Size: 8}, {Name: "pages", Off: PLPages, Size: 4},
		{Name: "shift", Off: PLShift, Size: 1}, {Name: "levels", Off: PLLevels, Size: 1},
	}},
	{"num_args", NumArgsSize, []Field{{Name: "num", Off: NumArgsNum, Size: 4}}},
	{"query_port_args", QueryPortArgsSize, []Field{{Name: "port", Off: QueryPortPort, Size: 4}}},
	{"query_gid_args", QueryGIDArgsSize, []Field{
		{Name: "port", Off: QueryGIDPort, Size: 4}, {Name: "index", Off: QueryGIDIndex, Size: 4},
		{Name: "gid", Off: QueryGIDGID, Size: 16, Array: true},
	}},
	{"create_eq_args", CreateEQArgsSize, []Field{
		{Name: "pages", Off: CreateEQPages, Size: PageListSize, Array: true}, {Name: "log_count", Off: CreateEQLogCount, Size: 1},
		{Name: "kind", Off: CreateEQKind, Size: 1}, {Name: "vector", Off: CreateEQVector, Size: 2},
	}},
	{"set_av_args", SetAVArgsSize, []Field{
		{Name: "pages", Off: SetAVPages, Size: PageListSize, Array: true}, {Name: "entries", Off: SetAVEntries, Size: 4},
	}},
	{"alloc_stag_args", AllocSTagArgsSize, []Field{
		{Name: "pd", Off: AllocSTagPD, Size: 4}, {Name: "kind", Off: AllocSTagKind, Size: 4},
		{Name: "max_pages", Off: AllocSTagMaxPages, Size: 4},
	}},
	{"rereg_mr_args", ReregMRArgsSize, []Field{
		{Name: "stag", Off: ReregMRSTag, Size: 4}, {Name: "flags", Off: ReregMRFlags, Size: 4},
		{Name: "reg", Off: ReregMRReg, Size: RegMRArgsSize, Array: true},
	}},
	{"create_cq_args", CreateCQArgsSize, []Field{
		{Name: "queue", Off: CreateCQQueue, Size: QueueArgsSize, Array: true}, {Name: "eqn", Off: CreateCQEQ, Size: 4},
	}},
	{"resize_cq_args", ResizeCQArgsSize, []Field{
		{Name: "cqn", Off: ResizeCQNum, Size: 4}, {Name: "queue", Off: ResizeCQQueue, Size: QueueArgsSize, Array: true},
	}},
	{"modify_cq_args", ModifyCQArgsSize, []Field{
		{Name: "cqn", Off: ModifyCQNum, Size: 4}, {Name: "count", Off: ModifyCQCount, Size: 2},
		{Name: "period", Off: ModifyCQPeriod, Size: 2},
	}},
	{"modify_qp_args", ModifyQPArgsSize, []Field{
		{Name: "qpn", Off: ModifyQPNum, Size: 4}, {Name: "mask", Off: ModifyQPMask, Size: 4},
		{Name: "attr", Off: ModifyQPAttr, Size: QPAttrSize, Array: true},
	}},
	{"query_qp_args", QueryQPArgsSize, []Field{
		{Name: "qpn", Off: QueryQPNum, Size: 4}, {Name: "attr", Off: QueryQPAttr, Size: QPAttrSize, Array: true},
	}},
	{"create_srq_args", CreateSRQArgsSize, []Field{
		{Name: "pd", Off: CreateSRQPD, Size: 4}, {Name: "max_sge", Off: CreateSRQMaxSGE, Size: 4},
		{Name: "limit", Off: CreateSRQLimit, Size: 4}, {Name: "queue", Off: CreateSRQQueue, Size: QueueArgsSize, Array: true},
	}},
	{"modify_srq_args", ModifySRQArgsSize, []Field{
		{Name: "srqn", Off: ModifySRQNum, Size: 4}, {Name: "mask", Off: ModifySRQMask, Size: 4},
		{Name: "limit", Off: ModifySRQLimit, Size: 4}, {Name: "queue", Off: ModifySRQQueue, Size: QueueArgsSize, Array: true},
	}},
	{"reg_mr_args", RegMRArgsSize, []Field{
		{Name: "pd", Off: RegMRPD, Size: 4}, {Name: "access", Off: RegMRAccess, Size: 4},
		{Name: "iova", Off: RegMRIOVA, Size: 8}, {Name: "length", Off: RegMRLength, Size: 8},
		{Name: "offset", Off: RegMROffset, Size: 8}, {Name: "pages", Off: RegMRPages, Size: PageListSize, Array: true},
	}},
	{"queue_args", QueueArgsSize, []Field{
		{Name: "log_count", Off: QueueLogCount, Size: 1}, {Name: "log_elem", Off: QueueLogElem, Size: 1},
		{Name: "pages", Off: QueuePages, Size: PageListSize, Array: true},
	}},
	{"create_qp_args", CreateQPArgsSize, []Field{
		{Name: "pd", Off: CreateQPPD, Size: 4}, {Name: "type", Off: CreateQPType, Size: 1},
		{Name: "sig_all", Off: CreateQPSigAll, Size: 1}, {Name: "send_cq", Off: CreateQPSendCQ, Size: 4},
		{Name: "recv_cq", Off: CreateQPRecvCQ, Size: 4}, {Name: "srq", Off: CreateQPSRQ, Size: 4},
		{Name: "max_inline", Off: CreateQPMaxInline, Size: 4}, {Name: "max_send_sge", Off: CreateQPSendSGE, Size: 2},
		{Name: "max_recv_sge", Off: CreateQPRecvSGE, Size: 2},
		{Name: "sq", Off: CreateQPSQ, Size: QueueArgsSize, Array: true}, {Name: "rq", Off: CreateQPRQ, Size: QueueArgsSize, Array: true},
	}},
	{"qp_attr", QPAttrSize, []Field{
		{Name: "state", Off: QPAttrState, Size: 1}, {Name: "cur_state", Off: QPAttrCurState, Size: 1},
		{Name: "path_mtu", Off: QPAttrPathMTU, Size: 1}, {Name: "timeout", Off: QPAttrTimeout, Size: 1},
		{Name: "retry_cnt", Off: QPAttrRetryCnt, Size: 1}, {Name: "rnr_retry", Off: QPAttrRNRRetry, Size: 1},
		{Name: "min_rnr_timer", Off: QPAttrMinRNRTimer, Size: 1}, {Name: "max_rd_atomic", Off: QPAttrMaxRdAtomic, Size: 1},
		{Name: "max_dest_rd_atomic", Off: QPAttrMaxDestRdAtom, Size: 1}, {Name: "sgid_index", Off: QPAttrSGIDIndex, Size: 1},
		{Name: "hop_limit", Off: QPAttrHopLimit, Size: 1}, {Name: "traffic_class", Off: QPAttrTrafficClass, Size: 1},
		{Name: "port_num", Off: QPAttrPortNum, Size: 1}, {Name: "sq_drain_notify", Off: QPAttrSQDrainNotify, Size: 1},
		{Name: "pkey_index", Off: QPAttrPKeyIndex, Size: 2}, {Name: "access_flags", Off: QPAttrAccessFlags, Size: 4},
		{Name: "dest_qpn", Off: QPAttrDestQPN, Size: 4}, {Name: "rq_psn", Off: QPAttrRQPSN, Size: 4},
		{Name: "sq_psn", Off: QPAttrSQPSN, Size: 4}, {Name: "flow_label", Off: QPAttrFlowLabel, Size: 4},
		{Name: "dgid", Off: QPAttrDGID, Size: 16, Array: true}, {Name: "dmac", Off: QPAttrDMAC, Size: 6, Array: true},
		{Name: "max_send_wr", Off: QPAttrMaxSendWR, Size: 4}, {Name: "max_recv_wr", Off: QPAttrMaxRecvWR, Size: 4},
		{Name: "max_send_sge", Off: QPAttrMaxSendSGE, Size: 2}, {Name: "max_recv_sge", Off: QPAttrMaxRecvSGE, Size: 2},
		{Name: "max_inline", Off: QPAttrMaxInline, Size: 4}, {Name: "qkey", Off: QPAttrQKey, Size: 4},
	}},
	{"reg_dma_args", RegDMAArgsSize, []Field{{Name: "pd", Off: RegDMAPD, Size: 4}, {Name: "access", Off: RegDMAAccess, Size: 4}}},
	{"mcast_args", McastArgsSize, []Field{{Name: "qpn", Off: McastQPN, Size: 4}, {Name: "gid", Off: McastGID, Size: 16, Array: true}}},
	{"map_pages_args", MapPagesArgsSize, []Field{
		{Name: "stag", Off: MapPagesSTag, Size: 4}, {Name: "va", Off: MapPagesVA, Size: 8},
		{Name: "pages", Off: MapPagesList, Size: PageListSize, Array: true},
	}},
	{"unmap_pages_args", UnmapPagesArgsSize, []Field{
		{Name: "stag", Off: UnmapPagesSTag, Size: 4}, {Name: "va", Off: UnmapPagesVA, Size: 8},
		{Name: "length", Off: UnmapPagesLength, Size: 8},
	}},
	{"resume_qp_args", ResumeQPArgsSize, []Field{{Name: "qpn", Off: ResumeQPNum, Size: 4}, {Name: "status", Off: ResumeQPStatus, Size: 4}}},
	{"fault_entry", FaultEntrySize, []Field{
		{Name: "flags", Off: FaultFlags, Size: 1}, {Name: "qpn", Off: FaultQPN, Size: 4}, {Name: "seq", Off: FaultSeq, Size: 8},
		{Name: "va", Off: FaultVA, Size: 8}, {Name: "stag", Off: FaultSTag, Size: 4}, {Name: "pages", Off: FaultPages, Size: 4},
	}},
	{"rxe_av", RXEAVSize, []Field{
		{Name: "port_num", Off: RXEAVPortNum, Size: 1}, {Name: "network_type", Off: RXEAVNetworkType, Size: 1},
		{Name: "dmac", Off: RXEAVDMAC, Size: 6, Array: true}, {Name: "dgid", Off: RXEAVDGID, Size: 16, Array: true},
		{Name: "flow_label", Off: RXEAVFlowLabel, Size: 4}, {Name: "sgid_index", Off: RXEAVSGIDIndex, Size: 1},
		{Name: "hop_limit", Off: RXEAVHopLimit, Size: 1}, {Name: "traffic_class", Off: RXEAVTrafficClass, Size: 1},
		{Name: "sgid_addr", Off: RXEAVSGIDAddr, Size: 28, Array: true}, {Name: "dgid_addr", Off: RXEAVDGIDAddr, Size: 28, Array: true},
	}},
	{"eq_entry", EQEntrySize, []Field{
		{Name: "type", Off: EQType, Size: 1}, {Name: "num", Off: EQNum, Size: 4}, {Name: "seq", Off: EQSeq, Size: 8},
	}},
	{"av_entry", AVEntrySize, []Field{
		{Name: "flags", Off: AVFlags, Size: 4}, {Name: "pd", Off: AVPD, Size: 4},
		{Name: "dgid", Off: AVDGID, Size: 16, Array: true}, {Name: "flow_label", Off: AVFlowLabel, Size: 4},
		{Name: "sgid_index", Off: AVSGIDIndex, Size: 1}, {Name: "hop_limit", Off: AVHopLimit, Size: 1},
		{Name: "traffic_class", Off: AVTrafficClass, Size: 1}, {Name: "network_type", Off: AVNetworkType, Size: 1},
		{Name: "dmac", Off: AVDMAC, Size: 6, Array: true},
	}},
	{"eth_desc", EthDescSize, []Field{
		{Name: "addr", Off: EthDescAddr, Size: 8}, {Name: "len", Off: EthDescLen, Size: 4}, {Name: "flags", Off: EthDescFlags, Size: 4},
	}},
	{"eth_ring_args", EthRingArgsSize, []Field{
		{Name: "kind", Off: EthRingKind, Size: 1}, {Name: "vector", Off: EthRingVector, Size: 2},
		{Name: "flags", Off: EthRingFlags, Size: 4}, {Name: "queue", Off: EthRingQueue, Size: QueueArgsSize, Array: true},
	}},
	{"rxe_queue_buf", QueueHeaderSize, []Field{
		{Name: "log2_elem_size", Off: QHLogElemSize, Size: 4}, {Name: "index_mask", Off: QHIndexMask, Size: 4},
		{Name: "producer_index", Off: QHProducer, Size: 4}, {Name: "consumer_index", Off: QHConsumer, Size: 4},
	}},
	{"rxe_send_wqe", SendWQESize, []Field{
		{Name: "wr_id", Off: SendWRID, Size: 8}, {Name: "reserved", Off: SendReserved, Size: 4},
		{Name: "opcode", Off: SendOpcode, Size: 4}, {Name: "send_flags", Off: SendFlags, Size: 4},
		{Name: "ex", Off: SendImm, Size: 4},
		{Name: "remote_addr", Off: SendRemote, Size: 8, Union: "rdma"}, {Name: "rkey", Off: SendRKey, Size: 4, Union: "rdma"},
		{Name: "atomic_remote_addr", Off: SendRemote, Size: 8, Union: "atomic"}, {Name: "compare_add", Off: SendCompare, Size: 8, Union: "atomic"},
		{Name: "swap", Off: SendSwap, Size: 8, Union: "atomic"}, {Name: "atomic_rkey", Off: SendAtomRKey, Size: 4, Union: "atomic"},
		{Name: "remote_qpn", Off: SendRemoteQPN, Size: 4, Union: "ud"}, {Name: "remote_qkey", Off: SendRemoteQKey, Size: 4, Union: "ud"},
		{Name: "pkey_index", Off: SendPKeyIndex, Size: 2, Union: "ud"}, {Name: "ah_num", Off: SendAHNum, Size: 4, Union: "ud"},
		{Name: "av", Off: SendAV, Size: RXEAVSize, Array: true, Union: "ud"},
		{Name: "mw_addr", Off: SendMWAddr, Size: 8, Union: "mw"}, {Name: "mw_length", Off: SendMWLength, Size: 8, Union: "mw"},
		{Name: "mw_mr_lkey", Off: SendMWMRLKey, Size: 4, Union: "mw"}, {Name: "mw_mw_rkey", Off: SendMWRKey, Size: 4, Union: "mw"},
		{Name: "mw_rkey", Off: SendMWNewRKey, Size: 4, Union: "mw"}, {Name: "mw_access", Off: SendMWAccess, Size: 4, Union: "mw"},
		{Name: "flush_remote_addr", Off: SendRemote, Size: 8, Union: "flush"}, {Name: "flush_length", Off: SendFlushLen, Size: 4, Union: "flush"},
		{Name: "flush_rkey", Off: SendFlushRKey, Size: 4, Union: "flush"},
		{Name: "flush_type", Off: SendFlushType, Size: 1, Union: "flush"}, {Name: "flush_level", Off: SendFlushLvl, Size: 1, Union: "flush"},
		{Name: "reg_key", Off: RegWRKey, Size: 4, Union: "reg"}, {Name: "reg_access", Off: RegWRAccess, Size: 4, Union: "reg"},
		{Name: "reg_iova", Off: RegWRIOVA, Size: 8, Union: "reg"}, {Name: "reg_length", Off: RegWRLength, Size: 8, Union: "reg"},
		{Name: "reg_offset", Off: RegWROffset, Size: 8, Union: "reg"}, {Name: "reg_pages", Off: RegWRPages, Size: PageListSize, Array: true, Union: "reg"},
		{Name: "status", Off: SendStatus, Size: 4}, {Name: "state", Off: SendState, Size: 4},
		{Name: "iova", Off: SendIOVA, Size: 8}, {Name: "mask", Off: SendMask, Size: 4},
		{Name: "first_psn", Off: SendFirstPSN, Size: 4}, {Name: "last_psn", Off: SendLastPSN, Size: 4},
		{Name: "ack_length", Off: SendAckLength, Size: 4}, {Name: "ssn", Off: SendSSN, Size: 4},
		{Name: "has_rd_atomic", Off: SendRdAtomic, Size: 4},
		{Name: "dma_length", Off: SendDMALength, Size: 4}, {Name: "dma_resid", Off: SendDMAResid, Size: 4},
		{Name: "dma_cur_sge", Off: SendDMACurSGE, Size: 4}, {Name: "dma_num_sge", Off: SendDMANumSGE, Size: 4},
		{Name: "dma_sge_offset", Off: SendDMAOffset, Size: 4},
	}},
	{"rxe_recv_wqe", RecvWQESize, []Field{
		{Name: "wr_id", Off: RecvWRID, Size: 8}, {Name: "reserved", Off: RecvReserved, Size: 4},
		{Name: "dma_length", Off: RecvDMALength, Size: 4}, {Name: "dma_num_sge", Off: RecvDMANumSGE, Size: 4},
	}},
	{"rxe_sge", SGESize, []Field{
		{Name: "addr", Off: SGEAddr, Size: 8}, {Name: "length", Off: SGELength, Size: 4}, {Name: "lkey", Off: SGELKey, Size: 4},
	}},
	{"ib_uverbs_wc", CQESize, []Field{
		{Name: "wr_id", Off: CQEWRID, Size: 8}, {Name: "status", Off: CQEStatus, Size: 4},
		{Name: "opcode", Off: CQEOpcode, Size: 4}, {Name: "vendor_err", Off: CQEVendorErr, Size: 4},
		{Name: "byte_len", Off: CQEByteLen, Size: 4}, {Name: "ex", Off: CQEImm, Size: 4},
		{Name: "qp_num", Off: CQEQPNum, Size: 4}, {Name: "src_qp", Off: CQESrcQP, Size: 4},
		{Name: "wc_flags", Off: CQEWCFlags, Size: 4}, {Name: "pkey_index", Off: CQEPKeyIndex, Size: 2},
		{Name: "slid", Off: CQESLID, Size: 2}, {Name: "sl", Off: CQESL, Size: 1},
		{Name: "dlid_path_bits", Off: CQEDLIDPath, Size: 1}, {Name: "port_num", Off: CQEPortNum, Size: 1},
		{Name: "network_hdr_type", Off: CQENetHdr, Size: 1},
	}},
}
