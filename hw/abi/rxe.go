package abi

// Work queues, CQs and SRQs in the layout of Linux rxe's user ABI (rdma/rdma_user_rxe.h, a
// stable UAPI that rdma-core's rxe provider reads and writes directly). The offsets are the
// UAPI's; a test checks the sizes the header fixes.

// struct rxe_queue_buf: the header at the start of every ring. The driver writes
// log2_elem_size and index_mask; the device never does. Indices are stored masked; one slot
// always stays empty (full when (prod+1)&mask == cons).
const (
	QueueHeaderSize = 384
	QHLogElemSize   = 0   // u32
	QHIndexMask     = 4   // u32
	QHProducer      = 128 // u32
	QHConsumer      = 256 // u32
)

// struct rxe_send_wqe (208 bytes before its SGEs or inline data).
const (
	SendWQESize    = 208
	SendWRID       = 0   // u64
	SendReserved   = 8   // u32: reserved; providers before Linux 6.x's rename wrote num_sge here, the count is dma.num_sge
	SendOpcode     = 12  // u32: IB_WR_* (IBV_WR_* for users; WROpRegMR for the kernel's REG_MR)
	SendFlags      = 16  // u32: IBV_SEND_*
	SendImm        = 20  // u32: imm_data (network order) or invalidate_rkey
	SendWRUnion    = 24  // the union below, 120 bytes
	SendRemote     = 24  // u64: rdma.remote_addr, atomic.remote_addr
	SendRKey       = 32  // u32: rdma.rkey
	SendCompare    = 32  // u64: atomic.compare_add
	SendSwap       = 40  // u64: atomic.swap
	SendAtomRKey   = 48  // u32: atomic.rkey
	SendRemoteQPN  = 24  // u32: ud.remote_qpn
	SendRemoteQKey = 28  // u32: ud.remote_qkey
	SendPKeyIndex  = 32  // u16: ud.pkey_index
	SendAHNum      = 36  // u32: ud.ah_num
	SendAV         = 56  // struct rxe_av, 88 bytes
	SendMWAddr     = 24  // u64: mw.addr
	SendMWLength   = 32  // u64: mw.length
	SendMWMRLKey   = 40  // u32: mw.mr_lkey
	SendMWRKey     = 44  // u32: mw.mw_rkey (the window's current rkey)
	SendMWNewRKey  = 48  // u32: mw.rkey (the rkey after the bind)
	SendMWAccess   = 52  // u32: mw.access
	SendFlushLen   = 32  // u32: flush.length; rxe sends dma.length, so the device takes this only when that is 0
	SendFlushRKey  = 36  // u32: flush.rkey
	SendFlushType  = 40  // u8: flush.type (IBV_FLUSH_GLOBAL 1, _PERSISTENT 2)
	SendFlushLvl   = 41  // u8: flush.level (IBV_FLUSH_RANGE 0, _MR 1)
	SendAtomicWr   = 208 // 8 bytes: an ATOMIC_WRITE value (dma.atomic_wr)
	SendStatus     = 144
	SendState      = 148
	SendIOVA       = 152 // u64
	SendMask       = 160
	SendFirstPSN   = 164
	SendLastPSN    = 168
	SendAckLength  = 172
	SendSSN        = 176
	SendRdAtomic   = 180
	SendDMA        = 184 // struct rxe_dma_info
	SendDMALength  = 184 // u32: the message's length
	SendDMAResid   = 188
	SendDMACurSGE  = 192
	SendDMANumSGE  = 196 // u32
	SendDMAOffset  = 200
	SendSGEs       = 208 // struct rxe_sge[] or inline data
)

// struct rxe_recv_wqe (40 bytes before its SGEs).
const (
	RecvWQESize   = 40
	RecvWRID      = 0  // u64
	RecvReserved  = 8  // u32: reserved (num_sge before the rename); the count is dma.num_sge
	RecvDMALength = 16 // u32
	RecvDMANumSGE = 28 // u32
	RecvSGEs      = 40
)

// struct rxe_sge.
const (
	SGESize   = 16
	SGEAddr   = 0 // u64
	SGELength = 8 // u32
	SGELKey   = 12
)

// struct rxe_av: in a UD send WQE of a provider that got no AH number (ah_num 0), the whole
// address; the device reads the GID, flow label, hop limit and traffic class, and resolves the
// destination MAC itself.
const (
	RXEAVSize         = 88
	RXEAVPortNum      = 0  // u8
	RXEAVNetworkType  = 1  // u8: RXE_NETWORK_TYPE_IPV4 1, _IPV6 2
	RXEAVDMAC         = 2  // 6 bytes
	RXEAVDGID         = 8  // grh.dgid, 16 bytes, network order
	RXEAVFlowLabel    = 24 // u32: grh.flow_label
	RXEAVSGIDIndex    = 28 // u8
	RXEAVHopLimit     = 29 // u8
	RXEAVTrafficClass = 30 // u8
	RXEAVSGIDAddr     = 32 // struct sockaddr_in6 (28 bytes)
	RXEAVDGIDAddr     = 60 // struct sockaddr_in6 (28 bytes)
)

// struct ib_uverbs_wc: a CQE.
const (
	CQESize      = 48
	CQEWRID      = 0  // u64
	CQEStatus    = 8  // u32: IBV_WC_*
	CQEOpcode    = 12 // u32: IBV_WC_*
	CQEVendorErr = 16 // u32
	CQEByteLen   = 20 // u32
	CQEImm       = 24 // u32: imm_data (network order) or invalidated rkey
	CQEQPNum     = 28 // u32
	CQESrcQP     = 32 // u32
	CQEWCFlags   = 36 // u32: IBV_WC_WITH_IMM 2, IBV_WC_WITH_INV 8, IBV_WC_GRH 1
	CQEPKeyIndex = 40 // u16
	CQESLID      = 42 // u16
	CQESL        = 44 // u8
	CQEDLIDPath  = 45 // u8
	CQEPortNum   = 46 // u8
	CQENetHdr    = 47 // u8: reserved in the UAPI; a datagram's network header type with IBV_WC_GRH (enum rdma_network_type: RDMA_NETWORK_IPV4 2, _IPV6 3), for the Linux driver's ib_wc.network_hdr_type
)
