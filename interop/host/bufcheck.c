// SPDX-License-Identifier: MIT
/*
 * bufcheck: RDMA on a program's buffer of a given kind. Two RC QPs of one process on rxe0,
 * connected to each other through GID 1, move 4 MiB with an RDMA WRITE, read it back with an
 * RDMA READ and send a message, every byte checked. The buffer (16 MiB) is
 *   heap      malloc's (run in an ASan build, its allocator's);
 *   hugetlb   mmap(MAP_HUGETLB): the machine's huge pages (vm.nr_hugepages);
 *   thp       mmap'd, 2 MiB aligned and madvise(MADV_HUGEPAGE): transparent huge pages.
 * Exit status 0 and "bufcheck: ok <kind>" on success; the first failure is named otherwise.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PROG "bufcheck"
#include "hostprog.h"

#define SIZE (16u << 20)
#define MOVE (4u << 20)


static unsigned char *buffer(const char *kind)
{
	void *p;

	if (!strcmp(kind, "heap"))
		return malloc(SIZE);
	if (!strcmp(kind, "hugetlb")) {
		p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	}
	if (!strcmp(kind, "thp")) {
		unsigned char *q;

		p = mmap(NULL, SIZE + (2u << 20), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		q = (unsigned char *)(((uintptr_t)p + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1));
		if (madvise(q, SIZE, MADV_HUGEPAGE))
			return NULL;
		return q;
	}
	return NULL;
}

/* complete waits for n successful completions on cq. */
static void complete(struct ibv_cq *cq, int n, const char *what)
{
	struct ibv_wc wc;
	int got = 0, r;

	while (got < n) {
		r = ibv_poll_cq(cq, 1, &wc);
		CHECK(r >= 0, "ibv_poll_cq");
		if (r == 0)
			continue;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "bufcheck: %s completed with %s\n", what,
				ibv_wc_status_str(wc.status));
			exit(1);
		}
		got++;
	}
}

static void post(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr, size_t from,
		 size_t to, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mr->addr + from, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + to;
	wr.wr.rdma.rkey = mr->rkey;
	CHECK(!ibv_post_send(qp, &wr, &bad), "ibv_post_send");
}

static void same(const unsigned char *a, const unsigned char *b, size_t n, const char *what)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (a[i] != b[i]) {
			fprintf(stderr, "bufcheck: %s: byte %zu is 0x%02x, want 0x%02x\n", what, i,
				b[i], a[i]);
			exit(1);
		}
	}
}

int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "heap";
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr init;
	struct ibv_context *ctx;
	struct ibv_qp *qa, *qb;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_sge rsge;
	union ibv_gid gid;
	struct ibv_cq *cq;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	unsigned char *buf;
	size_t i;

	buf = buffer(kind);
	CHECK(buf, kind);
	for (i = 0; i < SIZE; i++)
		buf[i] = (unsigned char)(i * 131 + (i >> 12));
	CHECK(list && list[0], "ibv_get_device_list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	CHECK(!ibv_query_gid(ctx, 1, 1, &gid), "ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ);
	if (!mr) {
		fprintf(stderr, "bufcheck: ibv_reg_mr of %u bytes failed: %s\n", SIZE, strerror(errno));
		exit(1);
	}
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	memset(&init, 0, sizeof(init));
	init.send_cq = cq;
	init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = 8;
	init.cap.max_recv_wr = 8;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	qa = ibv_create_qp(pd, &init);
	qb = ibv_create_qp(pd, &init);
	CHECK(qa && qb, "ibv_create_qp");
	rc_connect(qa, qb->qp_num, &gid);
	rc_connect(qb, qa->qp_num, &gid);

	/* WRITE the first 4 MiB over the second, READ the second back into the third. */
	post(qa, IBV_WR_RDMA_WRITE, mr, 0, MOVE, MOVE);
	complete(cq, 1, "RDMA WRITE");
	same(buf, buf + MOVE, MOVE, "RDMA WRITE");
	post(qb, IBV_WR_RDMA_READ, mr, 2 * MOVE, MOVE, MOVE);
	complete(cq, 1, "RDMA READ");
	same(buf, buf + 2 * MOVE, MOVE, "RDMA READ");

	/* SEND 64 KiB from the start into the last 4 MiB. */
	rsge.addr = (uintptr_t)buf + 3 * MOVE;
	rsge.length = MOVE;
	rsge.lkey = mr->lkey;
	memset(&rwr, 0, sizeof(rwr));
	rwr.sg_list = &rsge;
	rwr.num_sge = 1;
	CHECK(!ibv_post_recv(qb, &rwr, &rbad), "ibv_post_recv");
	post(qa, IBV_WR_SEND, mr, 0, 0, 64 << 10);
	complete(cq, 2, "SEND");
	same(buf, buf + 3 * MOVE, 64 << 10, "SEND");

	CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "ibv_destroy_qp");
	CHECK(!ibv_destroy_cq(cq), "ibv_destroy_cq");
	CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr");
	CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd");
	CHECK(!ibv_close_device(ctx), "ibv_close_device");
	ibv_free_device_list(list);
	if (!strcmp(kind, "heap"))
		free(buf);
	printf("bufcheck: ok %s\n", kind);
	return 0;
}
