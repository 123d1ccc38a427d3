// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * resize_fault: a process that resizes a CQ and an SRQ with the driver's part of the answer on
 * a page it cannot write, through the context's command file descriptor (the uverbs write()
 * interface), as libibverbs would but with the reply's address its own:
 *
 *   cq:  RESIZE_CQ whose response has the core's 8 bytes on a writable page and the driver's
 *        mminfo on the PROT_NONE page after it;
 *   srq: MODIFY_SRQ (max_wr) whose driver data names the PROT_NONE page as mmap_info_addr.
 *
 * Each call must fail, and the function must still use the ring the provider maps: RDMA WRITEs
 * on the CQ's RC pair, then SENDs into the SRQ's receives, all complete, in order and with
 * success. Then an ordinary ibv_resize_cq / ibv_modify_srq and more traffic, to show the object
 * is whole. Usage: resize_fault [DEVICE [GID_INDEX]] (softirdma0, 1): both QPs of a pair are on
 * the device, over its loopback. Prints "resize_fault: cq ok" and "resize_fault: srq ok", or
 * the FAIL that stopped a case; exits 0 when both are ok.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_rxe.h>

#define PORT 1
#define WAIT_SECONDS 15
#define BUF_SIZE 65536
#define MSG_SIZE 64

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char *buf;
static union ibv_gid gid;
static int gid_index = 1;
static unsigned char *guard; /* a PROT_NONE page, after a writable one */

#define FAIL(name, ...) do { \
	printf("resize_fault: %s FAIL: ", name); \
	printf(__VA_ARGS__); \
	printf("\n"); \
	fflush(stdout); \
	return -1; \
} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct ibv_qp *make_qp(struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = srq ? 0 : 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.port_num = PORT,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);

	if (!qp)
		return NULL;
	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS)) {
		ibv_destroy_qp(qp);
		return NULL;
	}
	return qp;
}

/* to_rts takes qp to RTS towards peer, a QP on the same device. */
static int to_rts(struct ibv_qp *qp, struct ibv_qp *peer)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qp_num,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 1,
		.ah_attr = {
			.is_global = 1,
			.grh = { .dgid = gid, .sgid_index = gid_index, .hop_limit = 1 },
			.port_num = PORT,
		},
	};

	if (ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* post_send posts a signaled WRITE (or SEND) of MSG_SIZE bytes with wr_id id. */
static int post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t id)
{
	size_t slot = (id % (BUF_SIZE / 2 / MSG_SIZE)) * MSG_SIZE;
	struct ibv_sge sge = {
		.addr = (uintptr_t)buf + slot, .length = MSG_SIZE, .lkey = mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;

	if (op == IBV_WR_RDMA_WRITE) {
		wr.wr.rdma.remote_addr = (uintptr_t)buf + BUF_SIZE / 2 + slot;
		wr.wr.rdma.rkey = mr->rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

static int post_srq_recv(struct ibv_srq *srq, uint64_t id)
{
	size_t slot = (id % (BUF_SIZE / 2 / MSG_SIZE)) * MSG_SIZE;
	struct ibv_sge sge = {
		.addr = (uintptr_t)buf + BUF_SIZE / 2 + slot, .length = MSG_SIZE, .lkey = mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_srq_recv(srq, &wr, &bad);
}

/*
 * poll_all waits for n completions: the sends' wr_ids from first on, in order, and (with
 * receives) as many receives, also in order; every one a success.
 */
static int poll_all(const char *name, struct ibv_cq *cq, uint64_t first, int n, int receives)
{
	uint64_t next_send = first, next_recv = first;
	int want = n * (receives ? 2 : 1), got = 0;
	double deadline = now() + WAIT_SECONDS;
	struct ibv_wc wc[16];

	while (got < want) {
		int k = ibv_poll_cq(cq, 16, wc), i;

		if (k < 0)
			FAIL(name, "ibv_poll_cq: %d", k);
		for (i = 0; i < k; i++) {
			uint64_t *next = wc[i].opcode & IBV_WC_RECV ? &next_recv : &next_send;

			if (wc[i].status != IBV_WC_SUCCESS)
				FAIL(name, "wr_id %llu: %s", (unsigned long long)wc[i].wr_id,
				     ibv_wc_status_str(wc[i].status));
			if (wc[i].wr_id != *next)
				FAIL(name, "wr_id %llu where %llu was next",
				     (unsigned long long)wc[i].wr_id, (unsigned long long)*next);
			(*next)++;
		}
		got += k;
		if (!k && now() > deadline)
			FAIL(name, "%d of %d completions in %d s", got, want, WAIT_SECONDS);
	}
	return 0;
}

/* writes sends n WRITEs from qp with wr_ids first.. and waits for them on cq. */
static int writes(const char *name, struct ibv_qp *qp, struct ibv_cq *cq, uint64_t first, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (post_send(qp, IBV_WR_RDMA_WRITE, first + i))
			FAIL(name, "ibv_post_send");
	return poll_all(name, cq, first, n, 0);
}

/* sends posts n receives on srq and n SENDs from qp to the SRQ's QP, and waits for all on cq. */
static int sends(const char *name, struct ibv_qp *qp, struct ibv_srq *srq, struct ibv_cq *cq,
		 uint64_t first, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (post_srq_recv(srq, first + i))
			FAIL(name, "ibv_post_srq_recv");
	for (i = 0; i < n; i++)
		if (post_send(qp, IBV_WR_SEND, first + i))
			FAIL(name, "ibv_post_send");
	return poll_all(name, cq, first, n, 1);
}

static int case_cq(void)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_resize_cq cmd;
	} req = {};
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
	ssize_t r;

	cq = ibv_create_cq(ctx, 15, NULL, NULL, 0);
	if (!cq)
		FAIL("cq", "ibv_create_cq: %s", strerror(errno));
	a = make_qp(cq, NULL);
	b = make_qp(cq, NULL);
	if (!a || !b || to_rts(a, b) || to_rts(b, a))
		FAIL("cq", "an RC pair: %s", strerror(errno));
	if (writes("cq", a, cq, 0, 8))
		return -1;

	/* The core's reply (8 bytes) is writable, the driver's mminfo after it is not. */
	req.hdr.command = IB_USER_VERBS_CMD_RESIZE_CQ;
	req.hdr.in_words = sizeof(req) / 4;
	req.hdr.out_words = (sizeof(struct ib_uverbs_resize_cq_resp) +
			     sizeof(struct rxe_resize_cq_resp)) / 4;
	req.cmd.response = (uintptr_t)guard - sizeof(struct ib_uverbs_resize_cq_resp);
	req.cmd.cq_handle = cq->handle;
	req.cmd.cqe = 63;
	r = write(ctx->cmd_fd, &req, sizeof(req));
	printf("resize_fault: RESIZE_CQ with the mminfo unwritable: %zd (%s)\n", r,
	       r < 0 ? strerror(errno) : "no error");
	if (r >= 0)
		FAIL("cq", "RESIZE_CQ succeeded with its reply unwritable");
	/* The provider still polls the ring it maps: the function must still write it. */
	if (writes("cq", a, cq, 8, 12))
		return -1;
	/* More than the old ring holds, unpolled until all are posted. */
	if (ibv_resize_cq(cq, 63))
		FAIL("cq", "ibv_resize_cq after the refused one: %s", strerror(errno));
	if (writes("cq", a, cq, 20, 40))
		return -1;
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	printf("resize_fault: cq ok\n");
	fflush(stdout);
	return 0;
}

static int case_srq(void)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		struct ib_uverbs_modify_srq cmd;
		struct rxe_modify_srq_cmd drv;
	} req = {};
	struct ibv_srq_init_attr init = { .attr = { .max_wr = 15, .max_sge = 1 } };
	struct ibv_srq_attr attr = { .max_wr = 63 };
	struct ibv_qp *a, *b;
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	ssize_t r;
	int i;

	cq = ibv_create_cq(ctx, 63, NULL, NULL, 0);
	srq = ibv_create_srq(pd, &init);
	if (!cq || !srq)
		FAIL("srq", "a CQ and an SRQ: %s", strerror(errno));
	a = make_qp(cq, NULL);
	b = make_qp(cq, srq);
	if (!a || !b || to_rts(a, b) || to_rts(b, a))
		FAIL("srq", "an RC pair: %s", strerror(errno));
	if (sends("srq", a, srq, cq, 0, 4))
		return -1;
	/* Receives posted and not yet taken: a resize carries them over. */
	for (i = 0; i < 4; i++)
		if (post_srq_recv(srq, 4 + i))
			FAIL("srq", "ibv_post_srq_recv");

	req.hdr.command = IB_USER_VERBS_CMD_MODIFY_SRQ;
	req.hdr.in_words = sizeof(req) / 4;
	req.hdr.out_words = 0;
	req.cmd.srq_handle = srq->handle;
	req.cmd.attr_mask = IBV_SRQ_MAX_WR;
	req.cmd.max_wr = 63;
	req.drv.mmap_info_addr = (uintptr_t)guard;
	r = write(ctx->cmd_fd, &req, sizeof(req));
	printf("resize_fault: MODIFY_SRQ with the mminfo unwritable: %zd (%s)\n", r,
	       r < 0 ? strerror(errno) : "no error");
	if (r >= 0)
		FAIL("srq", "MODIFY_SRQ succeeded with its mminfo unwritable");
	/* The 4 receives posted before, then 8 more into the ring the provider maps. */
	for (i = 0; i < 4; i++)
		if (post_send(a, IBV_WR_SEND, 4 + i))
			FAIL("srq", "ibv_post_send");
	if (poll_all("srq", cq, 4, 4, 1) || sends("srq", a, srq, cq, 8, 8))
		return -1;
	/* More receives than the old ring holds. */
	if (ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR))
		FAIL("srq", "ibv_modify_srq after the refused one: %s", strerror(errno));
	if (sends("srq", a, srq, cq, 16, 24))
		return -1;
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
	printf("resize_fault: srq ok\n");
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "softirdma0";
	struct ibv_device **list;
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *pages;
	int i, bad = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 2)
		gid_index = atoi(argv[2]);
	list = ibv_get_device_list(NULL);
	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		printf("resize_fault: FAIL: no device %s\n", name);
		return 1;
	}
	pages = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	buf = malloc(BUF_SIZE);
	pd = ibv_alloc_pd(ctx);
	if (pages == MAP_FAILED || !buf || !pd || mprotect(pages + page, page, PROT_NONE) ||
	    ibv_query_gid(ctx, PORT, gid_index, &gid)) {
		printf("resize_fault: FAIL: setup: %s\n", strerror(errno));
		return 1;
	}
	guard = pages + page;
	memset(buf, 0x5a, BUF_SIZE);
	mr = ibv_reg_mr(pd, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		printf("resize_fault: FAIL: ibv_reg_mr: %s\n", strerror(errno));
		return 1;
	}
	bad |= case_cq();
	bad |= case_srq();
	return bad ? 1 : 0;
}
