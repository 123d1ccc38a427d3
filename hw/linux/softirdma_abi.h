/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/* Generated from the Go package hw/abi by `go generate ./hw/abi`; do not edit. */
#ifndef SOFTIRDMA_ABI_H
#define SOFTIRDMA_ABI_H

#include <linux/types.h>
#ifdef __KERNEL__
#include <linux/build_bug.h>
#include <linux/stddef.h>
#else
#include <assert.h>
#include <stddef.h>
#endif
#ifndef __packed
#define __packed __attribute__((packed))
#endif

#define SOFTIRDMA_VERSION_MAJOR 0x1
#define SOFTIRDMA_VERSION_MINOR 0x3
#define SOFTIRDMA_VERSION 0x10003
#define SOFTIRDMA_PCI_VENDOR_ID 0x1234
#define SOFTIRDMA_PCI_DEVICE_ID 0x5352
#define SOFTIRDMA_PCI_SUBSYSTEM_VENDOR_ID 0x1234
#define SOFTIRDMA_PCI_SUBSYSTEM_ID 0x1
#define SOFTIRDMA_PCI_REVISION 0x1
#define SOFTIRDMA_PCI_CLASS_CODE 0x20000
#define SOFTIRDMA_BAR_REGS 0x0
#define SOFTIRDMA_BAR_REGS_SIZE 0x4000
#define SOFTIRDMA_BAR_DOORBELL 0x2
#define SOFTIRDMA_BAR_DOORBELLS 0x10000
#define SOFTIRDMA_MSIX_BAR 0x4
#define SOFTIRDMA_MSIX_BAR_SIZE 0x2000
#define SOFTIRDMA_MSIX_TABLE_OFFSET 0x0
#define SOFTIRDMA_PBA_OFFSET 0x1000
#define SOFTIRDMA_NUM_VECTORS 0x10
#define SOFTIRDMA_REG_MAGIC 0x0
#define SOFTIRDMA_REG_VERSION 0x4
#define SOFTIRDMA_REG_CAPS 0x8
#define SOFTIRDMA_REG_PAGE_SIZES 0xc
#define SOFTIRDMA_REG_MAX_QP 0x10
#define SOFTIRDMA_REG_MAX_QP_WR 0x14
#define SOFTIRDMA_REG_MAX_SGE 0x18
#define SOFTIRDMA_REG_MAX_INLINE 0x1c
#define SOFTIRDMA_REG_MAX_CQ 0x20
#define SOFTIRDMA_REG_MAX_CQE 0x24
#define SOFTIRDMA_REG_MAX_SRQ 0x28
#define SOFTIRDMA_REG_MAX_SRQ_WR 0x2c
#define SOFTIRDMA_REG_MAX_MR 0x30
#define SOFTIRDMA_REG_MAX_MW 0x34
#define SOFTIRDMA_REG_MAX_PD 0x38
#define SOFTIRDMA_REG_MAX_RD_ATOM 0x3c
#define SOFTIRDMA_REG_MAX_MSG_SIZE 0x40
#define SOFTIRDMA_REG_MAX_MTU 0x44
#define SOFTIRDMA_REG_MAX_EQ 0x48
#define SOFTIRDMA_REG_MAX_AH 0x4c
#define SOFTIRDMA_REG_GID_TBL_LEN 0x50
#define SOFTIRDMA_REG_CTRL_Q_MAX 0x54
#define SOFTIRDMA_REG_DEV_CTRL 0x100
#define SOFTIRDMA_REG_DEV_STATUS 0x104
#define SOFTIRDMA_REG_FATAL_CODE 0x108
#define SOFTIRDMA_REG_PORT_STATE 0x10c
#define SOFTIRDMA_REG_MAC_LO 0x110
#define SOFTIRDMA_REG_MAC_HI 0x114
#define SOFTIRDMA_REG_CTRL_Q_BASE_L 0x120
#define SOFTIRDMA_REG_CTRL_Q_BASE_H 0x124
#define SOFTIRDMA_REG_CTRL_Q_LOG 0x128
#define SOFTIRDMA_REG_CTRL_Q_PROD 0x12c
#define SOFTIRDMA_REG_CTRL_Q_CONS 0x130
#define SOFTIRDMA_REG_GID_VALID 0x1f0
#define SOFTIRDMA_REG_GID_TABLE 0x200
#define SOFTIRDMA_MAGIC_VALUE 0x4d445253
#define SOFTIRDMA_GID_TABLE_LEN 0x10
#define SOFTIRDMA_CAP_MW_TYPE1 0x1
#define SOFTIRDMA_CAP_MW_TYPE2_A 0x2
#define SOFTIRDMA_CAP_MW_TYPE2_B 0x4
#define SOFTIRDMA_CAP_ATOMICS 0x8
#define SOFTIRDMA_CAP_SRQ 0x10
#define SOFTIRDMA_CAP_FLUSH 0x20
#define SOFTIRDMA_CAP_ATOMIC_WRITE 0x40
#define SOFTIRDMA_CAP_FAST_REG 0x80
#define SOFTIRDMA_CAP_ZERO_BASED 0x100
#define SOFTIRDMA_CAP_CQ_MODERATION 0x200
#define SOFTIRDMA_CAP_ON_DEMAND 0x400
#define SOFTIRDMA_CAP_ETHERNET 0x10000
#define SOFTIRDMA_CAP_UD 0x20000
#define SOFTIRDMA_DEV_CTRL_ENABLE 0x1
#define SOFTIRDMA_DEV_CTRL_RESET 0x2
#define SOFTIRDMA_DEV_STATUS_READY 0x1
#define SOFTIRDMA_DEV_STATUS_FATAL 0x2
#define SOFTIRDMA_FATAL_NONE 0x0
#define SOFTIRDMA_FATAL_CTRL_QDMA 0x1
#define SOFTIRDMA_FATAL_CTRL_Q_SETUP 0x2
#define SOFTIRDMA_FATAL_BUS_MASTER 0x3
#define SOFTIRDMA_SQ_DOORBELL_BASE 0x0
#define SOFTIRDMA_CQ_ARM_BASE 0x8000
#define SOFTIRDMA_DOORBELL_STRIDE 0x8
#define SOFTIRDMA_MAX_QP_SLOTS 0x1000
#define SOFTIRDMA_MAX_CQ_SLOTS 0x1000
#define SOFTIRDMA_ARM_NEXT 0x1
#define SOFTIRDMA_ARM_SOLICITED 0x2
#define SOFTIRDMA_CTRL_ENTRY_SIZE 0x80
#define SOFTIRDMA_CTRL_Q_MAX_LOG 0x8
#define SOFTIRDMA_CTRL_VECTOR 0x0
#define SOFTIRDMA_CTRL_OPCODE 0x0
#define SOFTIRDMA_CTRL_FLAGS 0x2
#define SOFTIRDMA_CTRL_STATUS 0x4
#define SOFTIRDMA_CTRL_COOKIE 0x8
#define SOFTIRDMA_CTRL_RESULT 0x10
#define SOFTIRDMA_CTRL_ARGS 0x20
#define SOFTIRDMA_CTRL_DONE 0x80000000
#define SOFTIRDMA_OP_NOP 0x1
#define SOFTIRDMA_OP_QUERY_DEVICE 0x2
#define SOFTIRDMA_OP_QUERY_PORT 0x3
#define SOFTIRDMA_OP_QUERY_GID 0x4
#define SOFTIRDMA_OP_CREATE_EQ 0x10
#define SOFTIRDMA_OP_DESTROY_EQ 0x11
#define SOFTIRDMA_OP_SET_AV_TABLE 0x12
#define SOFTIRDMA_OP_ALLOC_PD 0x20
#define SOFTIRDMA_OP_DEALLOC_PD 0x21
#define SOFTIRDMA_OP_ALLOC_STAG 0x30
#define SOFTIRDMA_OP_REG_MR 0x31
#define SOFTIRDMA_OP_REREG_MR 0x32
#define SOFTIRDMA_OP_DEALLOC_STAG 0x33
#define SOFTIRDMA_OP_REG_DMA_MR 0x34
#define SOFTIRDMA_OP_MAP_PAGES 0x35
#define SOFTIRDMA_OP_UNMAP_PAGES 0x36
#define SOFTIRDMA_OP_CREATE_CQ 0x40
#define SOFTIRDMA_OP_RESIZE_CQ 0x41
#define SOFTIRDMA_OP_DESTROY_CQ 0x42
#define SOFTIRDMA_OP_MODIFY_CQ 0x43
#define SOFTIRDMA_OP_CREATE_QP 0x50
#define SOFTIRDMA_OP_MODIFY_QP 0x51
#define SOFTIRDMA_OP_QUERY_QP 0x52
#define SOFTIRDMA_OP_DESTROY_QP 0x53
#define SOFTIRDMA_OP_ATTACH_MCAST 0x54
#define SOFTIRDMA_OP_DETACH_MCAST 0x55
#define SOFTIRDMA_OP_RESUME_QP 0x56
#define SOFTIRDMA_OP_CREATE_SRQ 0x60
#define SOFTIRDMA_OP_MODIFY_SRQ 0x61
#define SOFTIRDMA_OP_QUERY_SRQ 0x62
#define SOFTIRDMA_OP_DESTROY_SRQ 0x63
#define SOFTIRDMA_MAX_MR_PAGES 0x100000
#define SOFTIRDMA_CQ_MAX_LOG 0x14
#define SOFTIRDMA_EQ_MAX_LOG 0x14
#define SOFTIRDMA_ETH_MAX_LOG 0x10
#define SOFTIRDMA_QUEUE_MAX_LOG 0x1f
#define SOFTIRDMA_ELEM_MAX_LOG 0x10
#define SOFTIRDMA_MAX_AH 0x10000
#define SOFTIRDMA_RESULT_NUM 0x0
#define SOFTIRDMA_RESULT_SLOT 0x1
#define SOFTIRDMA_RESULT_VERSION 0x0
#define SOFTIRDMA_RESULT_PORT_STATE 0x0
#define SOFTIRDMA_RESULT_PORT_MAX_MTU 0x1
#define SOFTIRDMA_RESULT_PORT_ACTIVE_MTU 0x2
#define SOFTIRDMA_RESULT_PORT_GID_LEN 0x3
#define SOFTIRDMA_RESULT_GID_VALID 0x0
#define SOFTIRDMA_RESULT_SRQ_MAX_WR 0x0
#define SOFTIRDMA_RESULT_SRQ_MAX_SGE 0x1
#define SOFTIRDMA_RESULT_SRQ_LIMIT 0x2
#define SOFTIRDMA_RESULT_ETH_DROPPED 0x0
#define SOFTIRDMA_NUM_ARGS_SIZE 0x4
#define SOFTIRDMA_NUM_ARGS_NUM 0x0
#define SOFTIRDMA_QUERY_PORT_ARGS_SIZE 0x4
#define SOFTIRDMA_QUERY_PORT_PORT 0x0
#define SOFTIRDMA_QUERY_GID_ARGS_SIZE 0x18
#define SOFTIRDMA_QUERY_GID_PORT 0x0
#define SOFTIRDMA_QUERY_GID_INDEX 0x4
#define SOFTIRDMA_QUERY_GID_GID 0x8
#define SOFTIRDMA_CREATE_EQ_ARGS_SIZE 0x14
#define SOFTIRDMA_CREATE_EQ_PAGES 0x0
#define SOFTIRDMA_CREATE_EQ_LOG_COUNT 0x10
#define SOFTIRDMA_CREATE_EQ_KIND 0x11
#define SOFTIRDMA_CREATE_EQ_VECTOR 0x12
#define SOFTIRDMA_SET_AV_ARGS_SIZE 0x14
#define SOFTIRDMA_SET_AV_PAGES 0x0
#define SOFTIRDMA_SET_AV_ENTRIES 0x10
#define SOFTIRDMA_ALLOC_STAG_ARGS_SIZE 0xc
#define SOFTIRDMA_ALLOC_STAG_PD 0x0
#define SOFTIRDMA_ALLOC_STAG_KIND 0x4
#define SOFTIRDMA_ALLOC_STAG_MAX_PAGES 0x8
#define SOFTIRDMA_REREG_MR_ARGS_SIZE 0x38
#define SOFTIRDMA_REREG_MR_STAG 0x0
#define SOFTIRDMA_REREG_MR_FLAGS 0x4
#define SOFTIRDMA_REREG_MR_REG 0x8
#define SOFTIRDMA_CREATE_CQ_ARGS_SIZE 0x1c
#define SOFTIRDMA_CREATE_CQ_QUEUE 0x0
#define SOFTIRDMA_CREATE_CQ_EQ 0x18
#define SOFTIRDMA_CQ_NO_EQ 0xffffffff
#define SOFTIRDMA_RESIZE_CQ_ARGS_SIZE 0x20
#define SOFTIRDMA_RESIZE_CQ_NUM 0x0
#define SOFTIRDMA_RESIZE_CQ_QUEUE 0x8
#define SOFTIRDMA_MODIFY_CQ_ARGS_SIZE 0x8
#define SOFTIRDMA_MODIFY_CQ_NUM 0x0
#define SOFTIRDMA_MODIFY_CQ_COUNT 0x4
#define SOFTIRDMA_MODIFY_CQ_PERIOD 0x6
#define SOFTIRDMA_CQ_MOD_MAX_COUNT 0xffff
#define SOFTIRDMA_CQ_MOD_MAX_PERIOD 0xfff
#define SOFTIRDMA_MODIFY_QP_ARGS_SIZE 0x58
#define SOFTIRDMA_MODIFY_QP_NUM 0x0
#define SOFTIRDMA_MODIFY_QP_MASK 0x4
#define SOFTIRDMA_MODIFY_QP_ATTR 0x8
#define SOFTIRDMA_QUERY_QP_ARGS_SIZE 0x58
#define SOFTIRDMA_QUERY_QP_NUM 0x0
#define SOFTIRDMA_QUERY_QP_ATTR 0x8
#define SOFTIRDMA_CREATE_SRQ_ARGS_SIZE 0x28
#define SOFTIRDMA_CREATE_SRQ_PD 0x0
#define SOFTIRDMA_CREATE_SRQ_MAX_SGE 0x4
#define SOFTIRDMA_CREATE_SRQ_LIMIT 0x8
#define SOFTIRDMA_CREATE_SRQ_QUEUE 0x10
#define SOFTIRDMA_MODIFY_SRQ_ARGS_SIZE 0x28
#define SOFTIRDMA_MODIFY_SRQ_NUM 0x0
#define SOFTIRDMA_MODIFY_SRQ_MASK 0x4
#define SOFTIRDMA_MODIFY_SRQ_LIMIT 0x8
#define SOFTIRDMA_MODIFY_SRQ_QUEUE 0x10
#define SOFTIRDMA_SRQ_MODIFY_MAX_WR 0x1
#define SOFTIRDMA_SRQ_MODIFY_LIMIT 0x2
#define SOFTIRDMA_QUERY_DEVICE_WORDS 0x14
#define SOFTIRDMA_QUERY_GID_OFFSET 0x8
#define SOFTIRDMA_STAG_FAST_REG_MR 0x1
#define SOFTIRDMA_STAG_MW_TYPE1 0x2
#define SOFTIRDMA_STAG_MW_TYPE2_A 0x3
#define SOFTIRDMA_STAG_MW_TYPE2_B 0x4
#define SOFTIRDMA_REREG_TRANSLATION 0x1
#define SOFTIRDMA_REREG_PD 0x2
#define SOFTIRDMA_REREG_ACCESS 0x4
#define SOFTIRDMA_PAGE_LIST_SIZE 0x10
#define SOFTIRDMA_PL_ADDR 0x0
#define SOFTIRDMA_PL_PAGES 0x8
#define SOFTIRDMA_PL_SHIFT 0xc
#define SOFTIRDMA_PL_LEVELS 0xd
#define SOFTIRDMA_PL_ENTRIES_PER_PAGE 0x200
#define SOFTIRDMA_REG_MR_ARGS_SIZE 0x30
#define SOFTIRDMA_REG_MR_PD 0x0
#define SOFTIRDMA_REG_MR_ACCESS 0x4
#define SOFTIRDMA_REG_MR_IOVA 0x8
#define SOFTIRDMA_REG_MR_LENGTH 0x10
#define SOFTIRDMA_REG_MR_OFFSET 0x18
#define SOFTIRDMA_REG_MR_PAGES 0x20
#define SOFTIRDMA_MAP_PAGES_ARGS_SIZE 0x20
#define SOFTIRDMA_MAP_PAGES_STAG 0x0
#define SOFTIRDMA_MAP_PAGES_VA 0x8
#define SOFTIRDMA_MAP_PAGES_LIST 0x10
#define SOFTIRDMA_UNMAP_PAGES_ARGS_SIZE 0x18
#define SOFTIRDMA_UNMAP_PAGES_STAG 0x0
#define SOFTIRDMA_UNMAP_PAGES_VA 0x8
#define SOFTIRDMA_UNMAP_PAGES_LENGTH 0x10
#define SOFTIRDMA_RESUME_QP_ARGS_SIZE 0x8
#define SOFTIRDMA_RESUME_QP_NUM 0x0
#define SOFTIRDMA_RESUME_QP_STATUS 0x4
#define SOFTIRDMA_RESUME_MAX_STATUS 0x15
#define SOFTIRDMA_QUEUE_ARGS_SIZE 0x18
#define SOFTIRDMA_QUEUE_LOG_COUNT 0x0
#define SOFTIRDMA_QUEUE_LOG_ELEM 0x1
#define SOFTIRDMA_QUEUE_PAGES 0x8
#define SOFTIRDMA_CREATE_QP_PD 0x0
#define SOFTIRDMA_CREATE_QP_TYPE 0x4
#define SOFTIRDMA_CREATE_QP_SIG_ALL 0x5
#define SOFTIRDMA_CREATE_QP_SEND_CQ 0x8
#define SOFTIRDMA_CREATE_QP_RECV_CQ 0xc
#define SOFTIRDMA_CREATE_QP_SRQ 0x10
#define SOFTIRDMA_CREATE_QP_MAX_INLINE 0x14
#define SOFTIRDMA_CREATE_QP_SEND_SGE 0x18
#define SOFTIRDMA_CREATE_QP_RECV_SGE 0x1a
#define SOFTIRDMA_CREATE_QP_SQ 0x20
#define SOFTIRDMA_CREATE_QP_RQ 0x38
#define SOFTIRDMA_CREATE_QP_ARGS_SIZE 0x50
#define SOFTIRDMA_QP_TYPE_GSI 0x1
#define SOFTIRDMA_QP_TYPE_RC 0x2
#define SOFTIRDMA_QP_TYPE_UC 0x3
#define SOFTIRDMA_QP_TYPE_UD 0x4
#define SOFTIRDMA_PORT_DOWN 0x1
#define SOFTIRDMA_PORT_ACTIVE 0x4
#define SOFTIRDMA_QP_ATTR_SIZE 0x50
#define SOFTIRDMA_QP_ATTR_STATE 0x0
#define SOFTIRDMA_QP_ATTR_CUR_STATE 0x1
#define SOFTIRDMA_QP_ATTR_PATH_MTU 0x2
#define SOFTIRDMA_QP_ATTR_TIMEOUT 0x3
#define SOFTIRDMA_QP_ATTR_RETRY_CNT 0x4
#define SOFTIRDMA_QP_ATTR_RNR_RETRY 0x5
#define SOFTIRDMA_QP_ATTR_MIN_RNR_TIMER 0x6
#define SOFTIRDMA_QP_ATTR_MAX_RD_ATOMIC 0x7
#define SOFTIRDMA_QP_ATTR_MAX_DEST_RD_ATOM 0x8
#define SOFTIRDMA_QP_ATTR_SGID_INDEX 0x9
#define SOFTIRDMA_QP_ATTR_HOP_LIMIT 0xa
#define SOFTIRDMA_QP_ATTR_TRAFFIC_CLASS 0xb
#define SOFTIRDMA_QP_ATTR_PORT_NUM 0xc
#define SOFTIRDMA_QP_ATTR_SQ_DRAIN_NOTIFY 0xd
#define SOFTIRDMA_QP_ATTR_PKEY_INDEX 0xe
#define SOFTIRDMA_QP_ATTR_ACCESS_FLAGS 0x10
#define SOFTIRDMA_QP_ATTR_DEST_QPN 0x14
#define SOFTIRDMA_QP_ATTR_RQ_PSN 0x18
#define SOFTIRDMA_QP_ATTR_SQ_PSN 0x1c
#define SOFTIRDMA_QP_ATTR_FLOW_LABEL 0x20
#define SOFTIRDMA_QP_ATTR_DGID 0x24
#define SOFTIRDMA_QP_ATTR_DMAC 0x34
#define SOFTIRDMA_QP_ATTR_MAX_SEND_WR 0x3c
#define SOFTIRDMA_QP_ATTR_MAX_RECV_WR 0x40
#define SOFTIRDMA_QP_ATTR_MAX_SEND_SGE 0x44
#define SOFTIRDMA_QP_ATTR_MAX_RECV_SGE 0x46
#define SOFTIRDMA_QP_ATTR_MAX_INLINE 0x48
#define SOFTIRDMA_QP_ATTR_QKEY 0x4c
#define SOFTIRDMA_REG_DMA_ARGS_SIZE 0x8
#define SOFTIRDMA_REG_DMA_PD 0x0
#define SOFTIRDMA_REG_DMA_ACCESS 0x4
#define SOFTIRDMA_MCAST_ARGS_SIZE 0x18
#define SOFTIRDMA_MCAST_QPN 0x0
#define SOFTIRDMA_MCAST_GID 0x8
#define SOFTIRDMA_EQ_COMPLETION 0x0
#define SOFTIRDMA_EQ_ASYNC 0x1
#define SOFTIRDMA_EQ_ENTRY_SIZE 0x10
#define SOFTIRDMA_EQ_TYPE 0x0
#define SOFTIRDMA_EQ_NUM 0x4
#define SOFTIRDMA_EQ_SEQ 0x8
#define SOFTIRDMA_EQ_PAGE_FAULT 0x2
#define SOFTIRDMA_FAULT_ENTRY_SIZE 0x20
#define SOFTIRDMA_FAULT_FLAGS 0x0
#define SOFTIRDMA_FAULT_QPN 0x4
#define SOFTIRDMA_FAULT_SEQ 0x8
#define SOFTIRDMA_FAULT_VA 0x10
#define SOFTIRDMA_FAULT_STAG 0x18
#define SOFTIRDMA_FAULT_PAGES 0x1c
#define SOFTIRDMA_FAULT_WRITE 0x1
#define SOFTIRDMA_FAULT_HELD 0x2
#define SOFTIRDMA_AV_ENTRY_SIZE 0x40
#define SOFTIRDMA_AV_FLAGS 0x0
#define SOFTIRDMA_AV_PD 0x4
#define SOFTIRDMA_AV_DGID 0x8
#define SOFTIRDMA_AV_FLOW_LABEL 0x18
#define SOFTIRDMA_AV_SGID_INDEX 0x1c
#define SOFTIRDMA_AV_HOP_LIMIT 0x1d
#define SOFTIRDMA_AV_TRAFFIC_CLASS 0x1e
#define SOFTIRDMA_AV_NETWORK_TYPE 0x1f
#define SOFTIRDMA_AV_DMAC 0x20
#define SOFTIRDMA_AV_VALID 0x1
#define SOFTIRDMA_WR_OP_REG_MR 0x20
#define SOFTIRDMA_REG_WR_KEY 0x18
#define SOFTIRDMA_REG_WR_ACCESS 0x1c
#define SOFTIRDMA_REG_WR_IOVA 0x20
#define SOFTIRDMA_REG_WR_LENGTH 0x28
#define SOFTIRDMA_REG_WR_OFFSET 0x30
#define SOFTIRDMA_REG_WR_PAGES 0x38
#define SOFTIRDMA_OP_CREATE_ETH_RING 0x70
#define SOFTIRDMA_OP_DESTROY_ETH_RING 0x71
#define SOFTIRDMA_ETH_RING_ARGS_SIZE 0x20
#define SOFTIRDMA_ETH_RING_KIND 0x0
#define SOFTIRDMA_ETH_RING_VECTOR 0x2
#define SOFTIRDMA_ETH_RING_FLAGS 0x4
#define SOFTIRDMA_ETH_RING_QUEUE 0x8
#define SOFTIRDMA_ETH_TX 0x0
#define SOFTIRDMA_ETH_RX 0x1
#define SOFTIRDMA_ETH_RING_PROMISC 0x1
#define SOFTIRDMA_ETH_DESC_SIZE 0x10
#define SOFTIRDMA_ETH_DESC_ADDR 0x0
#define SOFTIRDMA_ETH_DESC_LEN 0x8
#define SOFTIRDMA_ETH_DESC_FLAGS 0xc
#define SOFTIRDMA_ETH_DESC_DONE 0x80000000
#define SOFTIRDMA_ETH_MIN_FRAME 0xe
#define SOFTIRDMA_ETH_MAX_FRAME 0x2400
#define SOFTIRDMA_REG_ETH_TX_PROD 0x140
#define SOFTIRDMA_QUEUE_HEADER_SIZE 0x180
#define SOFTIRDMA_QH_LOG_ELEM_SIZE 0x0
#define SOFTIRDMA_QH_INDEX_MASK 0x4
#define SOFTIRDMA_QH_PRODUCER 0x80
#define SOFTIRDMA_QH_CONSUMER 0x100
#define SOFTIRDMA_SEND_WQE_SIZE 0xd0
#define SOFTIRDMA_SEND_WR_ID 0x0
#define SOFTIRDMA_SEND_RESERVED 0x8
#define SOFTIRDMA_SEND_OPCODE 0xc
#define SOFTIRDMA_SEND_FLAGS 0x10
#define SOFTIRDMA_SEND_IMM 0x14
#define SOFTIRDMA_SEND_WR_UNION 0x18
#define SOFTIRDMA_SEND_REMOTE 0x18
#define SOFTIRDMA_SEND_RKEY 0x20
#define SOFTIRDMA_SEND_COMPARE 0x20
#define SOFTIRDMA_SEND_SWAP 0x28
#define SOFTIRDMA_SEND_ATOM_RKEY 0x30
#define SOFTIRDMA_SEND_REMOTE_QPN 0x18
#define SOFTIRDMA_SEND_REMOTE_QKEY 0x1c
#define SOFTIRDMA_SEND_PKEY_INDEX 0x20
#define SOFTIRDMA_SEND_AH_NUM 0x24
#define SOFTIRDMA_SEND_AV 0x38
#define SOFTIRDMA_SEND_MW_ADDR 0x18
#define SOFTIRDMA_SEND_MW_LENGTH 0x20
#define SOFTIRDMA_SEND_MW_MR_LKEY 0x28
#define SOFTIRDMA_SEND_MW_RKEY 0x2c
#define SOFTIRDMA_SEND_MW_NEW_RKEY 0x30
#define SOFTIRDMA_SEND_MW_ACCESS 0x34
#define SOFTIRDMA_SEND_FLUSH_LEN 0x20
#define SOFTIRDMA_SEND_FLUSH_RKEY 0x24
#define SOFTIRDMA_SEND_FLUSH_TYPE 0x28
#define SOFTIRDMA_SEND_FLUSH_LVL 0x29
#define SOFTIRDMA_SEND_ATOMIC_WR 0xd0
#define SOFTIRDMA_SEND_STATUS 0x90
#define SOFTIRDMA_SEND_STATE 0x94
#define SOFTIRDMA_SEND_IOVA 0x98
#define SOFTIRDMA_SEND_MASK 0xa0
#define SOFTIRDMA_SEND_FIRST_PSN 0xa4
#define SOFTIRDMA_SEND_LAST_PSN 0xa8
#define SOFTIRDMA_SEND_ACK_LENGTH 0xac
#define SOFTIRDMA_SEND_SSN 0xb0
#define SOFTIRDMA_SEND_RD_ATOMIC 0xb4
#define SOFTIRDMA_SEND_DMA 0xb8
#define SOFTIRDMA_SEND_DMA_LENGTH 0xb8
#define SOFTIRDMA_SEND_DMA_RESID 0xbc
#define SOFTIRDMA_SEND_DMA_CUR_SGE 0xc0
#define SOFTIRDMA_SEND_DMA_NUM_SGE 0xc4
#define SOFTIRDMA_SEND_DMA_OFFSET 0xc8
#define SOFTIRDMA_SEND_SG_ES 0xd0
#define SOFTIRDMA_RECV_WQE_SIZE 0x28
#define SOFTIRDMA_RECV_WR_ID 0x0
#define SOFTIRDMA_RECV_RESERVED 0x8
#define SOFTIRDMA_RECV_DMA_LENGTH 0x10
#define SOFTIRDMA_RECV_DMA_NUM_SGE 0x1c
#define SOFTIRDMA_RECV_SG_ES 0x28
#define SOFTIRDMA_SGE_SIZE 0x10
#define SOFTIRDMA_SGE_ADDR 0x0
#define SOFTIRDMA_SGE_LENGTH 0x8
#define SOFTIRDMA_SGE_LKEY 0xc
#define SOFTIRDMA_RXEAV_SIZE 0x58
#define SOFTIRDMA_RXEAV_PORT_NUM 0x0
#define SOFTIRDMA_RXEAV_NETWORK_TYPE 0x1
#define SOFTIRDMA_RXEAVDMAC 0x2
#define SOFTIRDMA_RXEAVDGID 0x8
#define SOFTIRDMA_RXEAV_FLOW_LABEL 0x18
#define SOFTIRDMA_RXEAVSGID_INDEX 0x1c
#define SOFTIRDMA_RXEAV_HOP_LIMIT 0x1d
#define SOFTIRDMA_RXEAV_TRAFFIC_CLASS 0x1e
#define SOFTIRDMA_RXEAVSGID_ADDR 0x20
#define SOFTIRDMA_RXEAVDGID_ADDR 0x3c
#define SOFTIRDMA_CQE_SIZE 0x30
#define SOFTIRDMA_CQE_WR_ID 0x0
#define SOFTIRDMA_CQE_STATUS 0x8
#define SOFTIRDMA_CQE_OPCODE 0xc
#define SOFTIRDMA_CQE_VENDOR_ERR 0x10
#define SOFTIRDMA_CQE_BYTE_LEN 0x14
#define SOFTIRDMA_CQE_IMM 0x18
#define SOFTIRDMA_CQE_QP_NUM 0x1c
#define SOFTIRDMA_CQE_SRC_QP 0x20
#define SOFTIRDMA_CQE_WC_FLAGS 0x24
#define SOFTIRDMA_CQE_PKEY_INDEX 0x28
#define SOFTIRDMA_CQE_SLID 0x2a
#define SOFTIRDMA_CQE_SL 0x2c
#define SOFTIRDMA_CQE_DLID_PATH 0x2d
#define SOFTIRDMA_CQE_PORT_NUM 0x2e
#define SOFTIRDMA_CQE_NET_HDR 0x2f

struct softirdma_ctrl_entry {
	__le16 opcode;
	__le16 flags;
	__le32 status;
	__le64 cookie;
	__u8 result[16];
	__u8 args[96];
} __packed;
static_assert(sizeof(struct softirdma_ctrl_entry) == 128);
static_assert(offsetof(struct softirdma_ctrl_entry, opcode) == 0);
static_assert(offsetof(struct softirdma_ctrl_entry, flags) == 2);
static_assert(offsetof(struct softirdma_ctrl_entry, status) == 4);
static_assert(offsetof(struct softirdma_ctrl_entry, cookie) == 8);
static_assert(offsetof(struct softirdma_ctrl_entry, result) == 16);
static_assert(offsetof(struct softirdma_ctrl_entry, args) == 32);

struct softirdma_page_list {
	__le64 addr;
	__le32 pages;
	__u8 shift;
	__u8 levels;
	__u8 rsvd0[2];
} __packed;
static_assert(sizeof(struct softirdma_page_list) == 16);
static_assert(offsetof(struct softirdma_page_list, addr) == 0);
static_assert(offsetof(struct softirdma_page_list, pages) == 8);
static_assert(offsetof(struct softirdma_page_list, shift) == 12);
static_assert(offsetof(struct softirdma_page_list, levels) == 13);

struct softirdma_num_args {
	__le32 num;
} __packed;
static_assert(sizeof(struct softirdma_num_args) == 4);
static_assert(offsetof(struct softirdma_num_args, num) == 0);

struct softirdma_query_port_args {
	__le32 port;
} __packed;
static_assert(sizeof(struct softirdma_query_port_args) == 4);
static_assert(offsetof(struct softirdma_query_port_args, port) == 0);

struct softirdma_query_gid_args {
	__le32 port;
	__le32 index;
	__u8 gid[16];
} __packed;
static_assert(sizeof(struct softirdma_query_gid_args) == 24);
static_assert(offsetof(struct softirdma_query_gid_args, port) == 0);
static_assert(offsetof(struct softirdma_query_gid_args, index) == 4);
static_assert(offsetof(struct softirdma_query_gid_args, gid) == 8);

struct softirdma_create_eq_args {
	__u8 pages[16];
	__u8 log_count;
	__u8 kind;
	__le16 vector;
} __packed;
static_assert(sizeof(struct softirdma_create_eq_args) == 20);
static_assert(offsetof(struct softirdma_create_eq_args, pages) == 0);
static_assert(offsetof(struct softirdma_create_eq_args, log_count) == 16);
static_assert(offsetof(struct softirdma_create_eq_args, kind) == 17);
static_assert(offsetof(struct softirdma_create_eq_args, vector) == 18);

struct softirdma_set_av_args {
	__u8 pages[16];
	__le32 entries;
} __packed;
static_assert(sizeof(struct softirdma_set_av_args) == 20);
static_assert(offsetof(struct softirdma_set_av_args, pages) == 0);
static_assert(offsetof(struct softirdma_set_av_args, entries) == 16);

struct softirdma_alloc_stag_args {
	__le32 pd;
	__le32 kind;
	__le32 max_pages;
} __packed;
static_assert(sizeof(struct softirdma_alloc_stag_args) == 12);
static_assert(offsetof(struct softirdma_alloc_stag_args, pd) == 0);
static_assert(offsetof(struct softirdma_alloc_stag_args, kind) == 4);
static_assert(offsetof(struct softirdma_alloc_stag_args, max_pages) == 8);

struct softirdma_rereg_mr_args {
	__le32 stag;
	__le32 flags;
	__u8 reg[48];
} __packed;
static_assert(sizeof(struct softirdma_rereg_mr_args) == 56);
static_assert(offsetof(struct softirdma_rereg_mr_args, stag) == 0);
static_assert(offsetof(struct softirdma_rereg_mr_args, flags) == 4);
static_assert(offsetof(struct softirdma_rereg_mr_args, reg) == 8);

struct softirdma_create_cq_args {
	__u8 queue[24];
	__le32 eqn;
} __packed;
static_assert(sizeof(struct softirdma_create_cq_args) == 28);
static_assert(offsetof(struct softirdma_create_cq_args, queue) == 0);
static_assert(offsetof(struct softirdma_create_cq_args, eqn) == 24);

struct softirdma_resize_cq_args {
	__le32 cqn;
	__u8 rsvd0[4];
	__u8 queue[24];
} __packed;
static_assert(sizeof(struct softirdma_resize_cq_args) == 32);
static_assert(offsetof(struct softirdma_resize_cq_args, cqn) == 0);
static_assert(offsetof(struct softirdma_resize_cq_args, queue) == 8);

struct softirdma_modify_cq_args {
	__le32 cqn;
	__le16 count;
	__le16 period;
} __packed;
static_assert(sizeof(struct softirdma_modify_cq_args) == 8);
static_assert(offsetof(struct softirdma_modify_cq_args, cqn) == 0);
static_assert(offsetof(struct softirdma_modify_cq_args, count) == 4);
static_assert(offsetof(struct softirdma_modify_cq_args, period) == 6);

struct softirdma_modify_qp_args {
	__le32 qpn;
	__le32 mask;
	__u8 attr[80];
} __packed;
static_assert(sizeof(struct softirdma_modify_qp_args) == 88);
static_assert(offsetof(struct softirdma_modify_qp_args, qpn) == 0);
static_assert(offsetof(struct softirdma_modify_qp_args, mask) == 4);
static_assert(offsetof(struct softirdma_modify_qp_args, attr) == 8);

struct softirdma_query_qp_args {
	__le32 qpn;
	__u8 rsvd0[4];
	__u8 attr[80];
} __packed;
static_assert(sizeof(struct softirdma_query_qp_args) == 88);
static_assert(offsetof(struct softirdma_query_qp_args, qpn) == 0);
static_assert(offsetof(struct softirdma_query_qp_args, attr) == 8);

struct softirdma_create_srq_args {
	__le32 pd;
	__le32 max_sge;
	__le32 limit;
	__u8 rsvd0[4];
	__u8 queue[24];
} __packed;
static_assert(sizeof(struct softirdma_create_srq_args) == 40);
static_assert(offsetof(struct softirdma_create_srq_args, pd) == 0);
static_assert(offsetof(struct softirdma_create_srq_args, max_sge) == 4);
static_assert(offsetof(struct softirdma_create_srq_args, limit) == 8);
static_assert(offsetof(struct softirdma_create_srq_args, queue) == 16);

struct softirdma_modify_srq_args {
	__le32 srqn;
	__le32 mask;
	__le32 limit;
	__u8 rsvd0[4];
	__u8 queue[24];
} __packed;
static_assert(sizeof(struct softirdma_modify_srq_args) == 40);
static_assert(offsetof(struct softirdma_modify_srq_args, srqn) == 0);
static_assert(offsetof(struct softirdma_modify_srq_args, mask) == 4);
static_assert(offsetof(struct softirdma_modify_srq_args, limit) == 8);
static_assert(offsetof(struct softirdma_modify_srq_args, queue) == 16);

struct softirdma_reg_mr_args {
	__le32 pd;
	__le32 access;
	__le64 iova;
	__le64 length;
	__le64 offset;
	__u8 pages[16];
} __packed;
static_assert(sizeof(struct softirdma_reg_mr_args) == 48);
static_assert(offsetof(struct softirdma_reg_mr_args, pd) == 0);
static_assert(offsetof(struct softirdma_reg_mr_args, access) == 4);
static_assert(offsetof(struct softirdma_reg_mr_args, iova) == 8);
static_assert(offsetof(struct softirdma_reg_mr_args, length) == 16);
static_assert(offsetof(struct softirdma_reg_mr_args, offset) == 24);
static_assert(offsetof(struct softirdma_reg_mr_args, pages) == 32);

struct softirdma_queue_args {
	__u8 log_count;
	__u8 log_elem;
	__u8 rsvd0[6];
	__u8 pages[16];
} __packed;
static_assert(sizeof(struct softirdma_queue_args) == 24);
static_assert(offsetof(struct softirdma_queue_args, log_count) == 0);
static_assert(offsetof(struct softirdma_queue_args, log_elem) == 1);
static_assert(offsetof(struct softirdma_queue_args, pages) == 8);

struct softirdma_create_qp_args {
	__le32 pd;
	__u8 type;
	__u8 sig_all;
	__u8 rsvd0[2];
	__le32 send_cq;
	__le32 recv_cq;
	__le32 srq;
	__le32 max_inline;
	__le16 max_send_sge;
	__le16 max_recv_sge;
	__u8 rsvd1[4];
	__u8 sq[24];
	__u8 rq[24];
} __packed;
static_assert(sizeof(struct softirdma_create_qp_args) == 80);
static_assert(offsetof(struct softirdma_create_qp_args, pd) == 0);
static_assert(offsetof(struct softirdma_create_qp_args, type) == 4);
static_assert(offsetof(struct softirdma_create_qp_args, sig_all) == 5);
static_assert(offsetof(struct softirdma_create_qp_args, send_cq) == 8);
static_assert(offsetof(struct softirdma_create_qp_args, recv_cq) == 12);
static_assert(offsetof(struct softirdma_create_qp_args, srq) == 16);
static_assert(offsetof(struct softirdma_create_qp_args, max_inline) == 20);
static_assert(offsetof(struct softirdma_create_qp_args, max_send_sge) == 24);
static_assert(offsetof(struct softirdma_create_qp_args, max_recv_sge) == 26);
static_assert(offsetof(struct softirdma_create_qp_args, sq) == 32);
static_assert(offsetof(struct softirdma_create_qp_args, rq) == 56);

struct softirdma_qp_attr {
	__u8 state;
	__u8 cur_state;
	__u8 path_mtu;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 min_rnr_timer;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 port_num;
	__u8 sq_drain_notify;
	__le16 pkey_index;
	__le32 access_flags;
	__le32 dest_qpn;
	__le32 rq_psn;
	__le32 sq_psn;
	__le32 flow_label;
	__u8 dgid[16];
	__u8 dmac[6];
	__u8 rsvd0[2];
	__le32 max_send_wr;
	__le32 max_recv_wr;
	__le16 max_send_sge;
	__le16 max_recv_sge;
	__le32 max_inline;
	__le32 qkey;
} __packed;
static_assert(sizeof(struct softirdma_qp_attr) == 80);
static_assert(offsetof(struct softirdma_qp_attr, state) == 0);
static_assert(offsetof(struct softirdma_qp_attr, cur_state) == 1);
static_assert(offsetof(struct softirdma_qp_attr, path_mtu) == 2);
static_assert(offsetof(struct softirdma_qp_attr, timeout) == 3);
static_assert(offsetof(struct softirdma_qp_attr, retry_cnt) == 4);
static_assert(offsetof(struct softirdma_qp_attr, rnr_retry) == 5);
static_assert(offsetof(struct softirdma_qp_attr, min_rnr_timer) == 6);
static_assert(offsetof(struct softirdma_qp_attr, max_rd_atomic) == 7);
static_assert(offsetof(struct softirdma_qp_attr, max_dest_rd_atomic) == 8);
static_assert(offsetof(struct softirdma_qp_attr, sgid_index) == 9);
static_assert(offsetof(struct softirdma_qp_attr, hop_limit) == 10);
static_assert(offsetof(struct softirdma_qp_attr, traffic_class) == 11);
static_assert(offsetof(struct softirdma_qp_attr, port_num) == 12);
static_assert(offsetof(struct softirdma_qp_attr, sq_drain_notify) == 13);
static_assert(offsetof(struct softirdma_qp_attr, pkey_index) == 14);
static_assert(offsetof(struct softirdma_qp_attr, access_flags) == 16);
static_assert(offsetof(struct softirdma_qp_attr, dest_qpn) == 20);
static_assert(offsetof(struct softirdma_qp_attr, rq_psn) == 24);
static_assert(offsetof(struct softirdma_qp_attr, sq_psn) == 28);
static_assert(offsetof(struct softirdma_qp_attr, flow_label) == 32);
static_assert(offsetof(struct softirdma_qp_attr, dgid) == 36);
static_assert(offsetof(struct softirdma_qp_attr, dmac) == 52);
static_assert(offsetof(struct softirdma_qp_attr, max_send_wr) == 60);
static_assert(offsetof(struct softirdma_qp_attr, max_recv_wr) == 64);
static_assert(offsetof(struct softirdma_qp_attr, max_send_sge) == 68);
static_assert(offsetof(struct softirdma_qp_attr, max_recv_sge) == 70);
static_assert(offsetof(struct softirdma_qp_attr, max_inline) == 72);
static_assert(offsetof(struct softirdma_qp_attr, qkey) == 76);

struct softirdma_reg_dma_args {
	__le32 pd;
	__le32 access;
} __packed;
static_assert(sizeof(struct softirdma_reg_dma_args) == 8);
static_assert(offsetof(struct softirdma_reg_dma_args, pd) == 0);
static_assert(offsetof(struct softirdma_reg_dma_args, access) == 4);

struct softirdma_mcast_args {
	__le32 qpn;
	__u8 rsvd0[4];
	__u8 gid[16];
} __packed;
static_assert(sizeof(struct softirdma_mcast_args) == 24);
static_assert(offsetof(struct softirdma_mcast_args, qpn) == 0);
static_assert(offsetof(struct softirdma_mcast_args, gid) == 8);

struct softirdma_map_pages_args {
	__le32 stag;
	__u8 rsvd0[4];
	__le64 va;
	__u8 pages[16];
} __packed;
static_assert(sizeof(struct softirdma_map_pages_args) == 32);
static_assert(offsetof(struct softirdma_map_pages_args, stag) == 0);
static_assert(offsetof(struct softirdma_map_pages_args, va) == 8);
static_assert(offsetof(struct softirdma_map_pages_args, pages) == 16);

struct softirdma_unmap_pages_args {
	__le32 stag;
	__u8 rsvd0[4];
	__le64 va;
	__le64 length;
} __packed;
static_assert(sizeof(struct softirdma_unmap_pages_args) == 24);
static_assert(offsetof(struct softirdma_unmap_pages_args, stag) == 0);
static_assert(offsetof(struct softirdma_unmap_pages_args, va) == 8);
static_assert(offsetof(struct softirdma_unmap_pages_args, length) == 16);

struct softirdma_resume_qp_args {
	__le32 qpn;
	__le32 status;
} __packed;
static_assert(sizeof(struct softirdma_resume_qp_args) == 8);
static_assert(offsetof(struct softirdma_resume_qp_args, qpn) == 0);
static_assert(offsetof(struct softirdma_resume_qp_args, status) == 4);

struct softirdma_fault_entry {
	__u8 flags;
	__u8 rsvd0[3];
	__le32 qpn;
	__le64 seq;
	__le64 va;
	__le32 stag;
	__le32 pages;
} __packed;
static_assert(sizeof(struct softirdma_fault_entry) == 32);
static_assert(offsetof(struct softirdma_fault_entry, flags) == 0);
static_assert(offsetof(struct softirdma_fault_entry, qpn) == 4);
static_assert(offsetof(struct softirdma_fault_entry, seq) == 8);
static_assert(offsetof(struct softirdma_fault_entry, va) == 16);
static_assert(offsetof(struct softirdma_fault_entry, stag) == 24);
static_assert(offsetof(struct softirdma_fault_entry, pages) == 28);

struct softirdma_rxe_av {
	__u8 port_num;
	__u8 network_type;
	__u8 dmac[6];
	__u8 dgid[16];
	__le32 flow_label;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 rsvd0[1];
	__u8 sgid_addr[28];
	__u8 dgid_addr[28];
} __packed;
static_assert(sizeof(struct softirdma_rxe_av) == 88);
static_assert(offsetof(struct softirdma_rxe_av, port_num) == 0);
static_assert(offsetof(struct softirdma_rxe_av, network_type) == 1);
static_assert(offsetof(struct softirdma_rxe_av, dmac) == 2);
static_assert(offsetof(struct softirdma_rxe_av, dgid) == 8);
static_assert(offsetof(struct softirdma_rxe_av, flow_label) == 24);
static_assert(offsetof(struct softirdma_rxe_av, sgid_index) == 28);
static_assert(offsetof(struct softirdma_rxe_av, hop_limit) == 29);
static_assert(offsetof(struct softirdma_rxe_av, traffic_class) == 30);
static_assert(offsetof(struct softirdma_rxe_av, sgid_addr) == 32);
static_assert(offsetof(struct softirdma_rxe_av, dgid_addr) == 60);

struct softirdma_eq_entry {
	__u8 type;
	__u8 rsvd0[3];
	__le32 num;
	__le64 seq;
} __packed;
static_assert(sizeof(struct softirdma_eq_entry) == 16);
static_assert(offsetof(struct softirdma_eq_entry, type) == 0);
static_assert(offsetof(struct softirdma_eq_entry, num) == 4);
static_assert(offsetof(struct softirdma_eq_entry, seq) == 8);

struct softirdma_av_entry {
	__le32 flags;
	__le32 pd;
	__u8 dgid[16];
	__le32 flow_label;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 network_type;
	__u8 dmac[6];
	__u8 rsvd0[26];
} __packed;
static_assert(sizeof(struct softirdma_av_entry) == 64);
static_assert(offsetof(struct softirdma_av_entry, flags) == 0);
static_assert(offsetof(struct softirdma_av_entry, pd) == 4);
static_assert(offsetof(struct softirdma_av_entry, dgid) == 8);
static_assert(offsetof(struct softirdma_av_entry, flow_label) == 24);
static_assert(offsetof(struct softirdma_av_entry, sgid_index) == 28);
static_assert(offsetof(struct softirdma_av_entry, hop_limit) == 29);
static_assert(offsetof(struct softirdma_av_entry, traffic_class) == 30);
static_assert(offsetof(struct softirdma_av_entry, network_type) == 31);
static_assert(offsetof(struct softirdma_av_entry, dmac) == 32);

struct softirdma_eth_desc {
	__le64 addr;
	__le32 len;
	__le32 flags;
} __packed;
static_assert(sizeof(struct softirdma_eth_desc) == 16);
static_assert(offsetof(struct softirdma_eth_desc, addr) == 0);
static_assert(offsetof(struct softirdma_eth_desc, len) == 8);
static_assert(offsetof(struct softirdma_eth_desc, flags) == 12);

struct softirdma_eth_ring_args {
	__u8 kind;
	__u8 rsvd0[1];
	__le16 vector;
	__le32 flags;
	__u8 queue[24];
} __packed;
static_assert(sizeof(struct softirdma_eth_ring_args) == 32);
static_assert(offsetof(struct softirdma_eth_ring_args, kind) == 0);
static_assert(offsetof(struct softirdma_eth_ring_args, vector) == 2);
static_assert(offsetof(struct softirdma_eth_ring_args, flags) == 4);
static_assert(offsetof(struct softirdma_eth_ring_args, queue) == 8);

struct softirdma_rxe_queue_buf {
	__le32 log2_elem_size;
	__le32 index_mask;
	__u8 rsvd0[120];
	__le32 producer_index;
	__u8 rsvd1[124];
	__le32 consumer_index;
	__u8 rsvd2[124];
} __packed;
static_assert(sizeof(struct softirdma_rxe_queue_buf) == 384);
static_assert(offsetof(struct softirdma_rxe_queue_buf, log2_elem_size) == 0);
static_assert(offsetof(struct softirdma_rxe_queue_buf, index_mask) == 4);
static_assert(offsetof(struct softirdma_rxe_queue_buf, producer_index) == 128);
static_assert(offsetof(struct softirdma_rxe_queue_buf, consumer_index) == 256);

struct softirdma_rxe_send_wqe {
	__le64 wr_id;
	__le32 reserved;
	__le32 opcode;
	__le32 send_flags;
	__le32 ex;
	union {
		struct {
			__le64 remote_addr;
			__le32 rkey;
		} rdma;
		struct {
			__le64 atomic_remote_addr;
			__le64 compare_add;
			__le64 swap;
			__le32 atomic_rkey;
		} atomic;
		struct {
			__le32 remote_qpn;
			__le32 remote_qkey;
			__le16 pkey_index;
			__u8 rsvd0[2];
			__le32 ah_num;
			__u8 rsvd1[16];
			__u8 av[88];
		} ud;
		struct {
			__le64 mw_addr;
			__le64 mw_length;
			__le32 mw_mr_lkey;
			__le32 mw_mw_rkey;
			__le32 mw_rkey;
			__le32 mw_access;
		} mw;
		struct {
			__le64 flush_remote_addr;
			__le32 flush_length;
			__le32 flush_rkey;
			__u8 flush_type;
			__u8 flush_level;
		} flush;
		struct {
			__le32 reg_key;
			__le32 reg_access;
			__le64 reg_iova;
			__le64 reg_length;
			__le64 reg_offset;
			__u8 reg_pages[16];
		} reg;
	};
	__le32 status;
	__le32 state;
	__le64 iova;
	__le32 mask;
	__le32 first_psn;
	__le32 last_psn;
	__le32 ack_length;
	__le32 ssn;
	__le32 has_rd_atomic;
	__le32 dma_length;
	__le32 dma_resid;
	__le32 dma_cur_sge;
	__le32 dma_num_sge;
	__le32 dma_sge_offset;
	__u8 rsvd0[4];
} __packed;
static_assert(sizeof(struct softirdma_rxe_send_wqe) == 208);
static_assert(offsetof(struct softirdma_rxe_send_wqe, wr_id) == 0);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reserved) == 8);
static_assert(offsetof(struct softirdma_rxe_send_wqe, opcode) == 12);
static_assert(offsetof(struct softirdma_rxe_send_wqe, send_flags) == 16);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ex) == 20);
static_assert(offsetof(struct softirdma_rxe_send_wqe, rdma.remote_addr) == 24);
static_assert(offsetof(struct softirdma_rxe_send_wqe, atomic.atomic_remote_addr) == 24);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ud.remote_qpn) == 24);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mw.mw_addr) == 24);
static_assert(offsetof(struct softirdma_rxe_send_wqe, flush.flush_remote_addr) == 24);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reg.reg_key) == 24);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ud.remote_qkey) == 28);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reg.reg_access) == 28);
static_assert(offsetof(struct softirdma_rxe_send_wqe, rdma.rkey) == 32);
static_assert(offsetof(struct softirdma_rxe_send_wqe, atomic.compare_add) == 32);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ud.pkey_index) == 32);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mw.mw_length) == 32);
static_assert(offsetof(struct softirdma_rxe_send_wqe, flush.flush_length) == 32);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reg.reg_iova) == 32);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ud.ah_num) == 36);
static_assert(offsetof(struct softirdma_rxe_send_wqe, flush.flush_rkey) == 36);
static_assert(offsetof(struct softirdma_rxe_send_wqe, atomic.swap) == 40);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mw.mw_mr_lkey) == 40);
static_assert(offsetof(struct softirdma_rxe_send_wqe, flush.flush_type) == 40);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reg.reg_length) == 40);
static_assert(offsetof(struct softirdma_rxe_send_wqe, flush.flush_level) == 41);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mw.mw_mw_rkey) == 44);
static_assert(offsetof(struct softirdma_rxe_send_wqe, atomic.atomic_rkey) == 48);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mw.mw_rkey) == 48);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reg.reg_offset) == 48);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mw.mw_access) == 52);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ud.av) == 56);
static_assert(offsetof(struct softirdma_rxe_send_wqe, reg.reg_pages) == 56);
static_assert(offsetof(struct softirdma_rxe_send_wqe, status) == 144);
static_assert(offsetof(struct softirdma_rxe_send_wqe, state) == 148);
static_assert(offsetof(struct softirdma_rxe_send_wqe, iova) == 152);
static_assert(offsetof(struct softirdma_rxe_send_wqe, mask) == 160);
static_assert(offsetof(struct softirdma_rxe_send_wqe, first_psn) == 164);
static_assert(offsetof(struct softirdma_rxe_send_wqe, last_psn) == 168);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ack_length) == 172);
static_assert(offsetof(struct softirdma_rxe_send_wqe, ssn) == 176);
static_assert(offsetof(struct softirdma_rxe_send_wqe, has_rd_atomic) == 180);
static_assert(offsetof(struct softirdma_rxe_send_wqe, dma_length) == 184);
static_assert(offsetof(struct softirdma_rxe_send_wqe, dma_resid) == 188);
static_assert(offsetof(struct softirdma_rxe_send_wqe, dma_cur_sge) == 192);
static_assert(offsetof(struct softirdma_rxe_send_wqe, dma_num_sge) == 196);
static_assert(offsetof(struct softirdma_rxe_send_wqe, dma_sge_offset) == 200);

struct softirdma_rxe_recv_wqe {
	__le64 wr_id;
	__le32 reserved;
	__u8 rsvd0[4];
	__le32 dma_length;
	__u8 rsvd1[8];
	__le32 dma_num_sge;
	__u8 rsvd2[8];
} __packed;
static_assert(sizeof(struct softirdma_rxe_recv_wqe) == 40);
static_assert(offsetof(struct softirdma_rxe_recv_wqe, wr_id) == 0);
static_assert(offsetof(struct softirdma_rxe_recv_wqe, reserved) == 8);
static_assert(offsetof(struct softirdma_rxe_recv_wqe, dma_length) == 16);
static_assert(offsetof(struct softirdma_rxe_recv_wqe, dma_num_sge) == 28);

struct softirdma_rxe_sge {
	__le64 addr;
	__le32 length;
	__le32 lkey;
} __packed;
static_assert(sizeof(struct softirdma_rxe_sge) == 16);
static_assert(offsetof(struct softirdma_rxe_sge, addr) == 0);
static_assert(offsetof(struct softirdma_rxe_sge, length) == 8);
static_assert(offsetof(struct softirdma_rxe_sge, lkey) == 12);

struct softirdma_ib_uverbs_wc {
	__le64 wr_id;
	__le32 status;
	__le32 opcode;
	__le32 vendor_err;
	__le32 byte_len;
	__le32 ex;
	__le32 qp_num;
	__le32 src_qp;
	__le32 wc_flags;
	__le16 pkey_index;
	__le16 slid;
	__u8 sl;
	__u8 dlid_path_bits;
	__u8 port_num;
	__u8 network_hdr_type;
} __packed;
static_assert(sizeof(struct softirdma_ib_uverbs_wc) == 48);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, wr_id) == 0);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, status) == 8);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, opcode) == 12);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, vendor_err) == 16);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, byte_len) == 20);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, ex) == 24);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, qp_num) == 28);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, src_qp) == 32);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, wc_flags) == 36);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, pkey_index) == 40);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, slid) == 42);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, sl) == 44);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, dlid_path_bits) == 45);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, port_num) == 46);
static_assert(offsetof(struct softirdma_ib_uverbs_wc, network_hdr_type) == 47);

#endif /* SOFTIRDMA_ABI_H */
