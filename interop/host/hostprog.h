/* SPDX-License-Identifier: MIT */
/*
 * What the host-path test programs share (bufcheck, churn, forkcheck): CHECK, which ends the
 * program naming the step that failed (PROG, defined before this header, names the program),
 * and rc_connect, which takes an RC QP to RTS.
 */
#ifndef SOFTIRDMA_HOSTPROG_H
#define SOFTIRDMA_HOSTPROG_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, what)                                                                  \
	do {                                                                                \
		if (!(cond)) {                                                              \
			fprintf(stderr, PROG ": %s failed\n", what);                         \
			exit(1);                                                            \
		}                                                                           \
	} while (0)

/*
 * rc_connect takes qp through INIT and RTR (to QP peer at gid, from GID 1, MTU 4096, remote
 * READ and WRITE allowed) to RTS.
 */
static inline void rc_connect(struct ibv_qp *qp, uint32_t peer, const union ibv_gid *gid)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = peer;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					     IBV_QP_MIN_RNR_TIMER),
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS");
}

#endif
