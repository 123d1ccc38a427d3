// SPDX-License-Identifier: MIT
/*
 * churn: one short-lived RDMA program, of the many `make interop-host` starts to see that
 * softirdma keeps nothing of the programs that are gone. It opens rxe0 and makes what a program
 * makes: a PD, an MR, a completion channel, a CQ, an RC QP it connects to itself and sends
 * through, a UD QP, an SRQ and an rdma_cm ID bound to 127.0.0.1; then, unless told to wait
 * (argument "wait": it prints "churn: ready" and sleeps until killed), it exits without freeing
 * anything. Exit status 0 and "churn: ok" when every step worked.
 */
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "churn"
#include "hostprog.h"

int main(int argc, char **argv)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr init;
	struct ibv_srq_init_attr sinit;
	struct sockaddr_in sin;
	struct ibv_comp_channel *ch;
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
	struct ibv_context *ctx;
	struct ibv_qp *qp, *ud;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_wc wc;
	union ibv_gid gid;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	static char buf[8192];
	int n = 0;

	CHECK(list && list[0], "ibv_get_device_list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr");
	ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "ibv_create_comp_channel");
	cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(cq && !ibv_req_notify_cq(cq, 0), "ibv_create_cq");
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 4;
	init.cap.max_recv_wr = 4;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &init);
	CHECK(qp, "ibv_create_qp RC");
	init.qp_type = IBV_QPT_UD;
	ud = ibv_create_qp(pd, &init);
	CHECK(ud, "ibv_create_qp UD");
	memset(&sinit, 0, sizeof(sinit));
	sinit.attr.max_wr = 8;
	sinit.attr.max_sge = 1;
	srq = ibv_create_srq(pd, &sinit);
	CHECK(srq, "ibv_create_srq");

	/* The RC QP connected to itself: a SEND into its own receive. */
	rc_connect(qp, qp->qp_num, &gid);
	sge.addr = (uintptr_t)buf + 4096;
	sge.length = 4096;
	sge.lkey = mr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	CHECK(!ibv_post_recv(qp, &rwr, &rbad), "ibv_post_recv");
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)buf;
	sge.length = 512;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	CHECK(!ibv_post_send(qp, &wr, &bad), "ibv_post_send");
	while (n < 2) {
		int r = ibv_poll_cq(cq, 1, &wc);

		CHECK(r >= 0 && (r == 0 || wc.status == IBV_WC_SUCCESS), "the SEND's completions");
		n += r;
	}

	ec = rdma_create_event_channel();
	CHECK(ec, "rdma_create_event_channel");
	CHECK(!rdma_create_id(ec, &id, NULL, RDMA_PS_TCP), "rdma_create_id");
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(!rdma_bind_addr(id, (struct sockaddr *)&sin), "rdma_bind_addr");

	if (argc > 1 && !strcmp(argv[1], "wait")) {
		printf("churn: ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	printf("churn: ok\n");
	return 0;
}
