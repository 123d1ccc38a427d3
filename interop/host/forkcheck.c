// SPDX-License-Identifier: MIT
/*
 * forkcheck: after fork both processes hold the device as with the kernel. The parent opens
 * rxe0, makes a PD, an MR and a CQ; the child uses the parent's context (a PD and a CQ of its
 * own, then its own MR over its own memory) and exits without freeing anything; meanwhile both
 * make and free PDs as fast as they can, each its own answers. The parent's objects are all
 * still there after the child (it destroys each, which fails if any went with the child).
 * Exit status 0 and "forkcheck: ok" on success.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROG "forkcheck"
#include "hostprog.h"

/* churn makes and frees PDs on ctx, 500 times. */
static void churn(struct ibv_context *ctx, const char *who)
{
	int i;

	for (i = 0; i < 500; i++) {
		struct ibv_pd *p = ibv_alloc_pd(ctx);

		if (!p || ibv_dealloc_pd(p)) {
			fprintf(stderr, "forkcheck: %s PD %d failed\n", who, i);
			exit(1);
		}
	}
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	static char buf[65536];
	int status;
	pid_t pid;

	CHECK(list && list[0], "ibv_get_device_list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "ibv_reg_mr");
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	pid = fork();
	CHECK(pid >= 0, "fork");
	churn(ctx, pid == 0 ? "the child's" : "the parent's");
	if (pid == 0) {
		struct ibv_pd *cpd = ibv_alloc_pd(ctx);
		struct ibv_cq *ccq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		char *mine = malloc(4096);

		CHECK(cpd && ccq && mine, "the child's PD and CQ on the parent's context");
		CHECK(ibv_reg_mr(cpd, mine, 4096, IBV_ACCESS_LOCAL_WRITE), "the child's MR");
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child");
	CHECK(ibv_destroy_cq(cq) == 0, "the parent's CQ after the child left");
	CHECK(ibv_dereg_mr(mr) == 0, "the parent's MR after the child left");
	CHECK(ibv_dealloc_pd(pd) == 0, "the parent's PD after the child left");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(list);
	printf("forkcheck: ok\n");
	return 0;
}
