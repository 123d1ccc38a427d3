// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Shared receive queues: a ring of rxe receive WQEs, made, resized, limited, queried and
 * destroyed by control commands. A process's provider posts into the ring itself (as it does an
 * RQ); a kernel SRQ's receives are written here (sirdma_put_recvs). A resize gives the process
 * the new ring's mminfo at the address its command names, as rxe does, and only then the device
 * the new ring (it moves the posted receives over). A kernel SRQ keeps the ring it was made
 * with: no kernel user resizes one.
 */
#include <linux/uaccess.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>
#include <rdma/uverbs_ioctl.h>

#include "softirdma.h"

/* srq_ring allocates a ring for max_wr receives of max_sge SGEs; max_wr becomes what it holds. */
static struct sirdma_queue *srq_ring(struct sirdma_dev *sdev, u32 *max_wr, u32 max_sge)
{
	u32 count = roundup_pow_of_two(max(*max_wr, 1U) + 1);
	u32 elem = roundup_pow_of_two(sizeof(struct rxe_recv_wqe) +
				      max_sge * sizeof(struct rxe_sge));
	struct sirdma_queue *q;

	q = sirdma_queue_alloc(sdev, count, elem);
	if (!IS_ERR(q))
		*max_wr = count - 1;
	return q;
}

/*
 * The ring is mappable before the device has it. What fails after CREATE_SRQ (the event table,
 * the reply) is unwound by DESTROY_SRQ: the process never hears of the SRQ.
 */
int sirdma_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		      struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibsrq->device);
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	struct ib_srq_attr *attr = &init->attr;
	struct softirdma_create_srq_args a = {};
	struct rxe_create_srq_resp resp = {};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	int err;

	if (init->srq_type != IB_SRQT_BASIC || (udata && udata->outlen < sizeof(resp)))
		return -EOPNOTSUPP;
	if (attr->max_wr > sdev->caps.max_srq_wr || attr->max_sge > sdev->caps.max_sge ||
	    attr->srq_limit > attr->max_wr)
		return -EINVAL;
	attr->max_sge = max(attr->max_sge, 1U);
	srq->q = srq_ring(sdev, &attr->max_wr, attr->max_sge);
	if (IS_ERR(srq->q))
		return PTR_ERR(srq->q);
	srq->max_sge = attr->max_sge;
	mutex_init(&srq->lock);
	spin_lock_init(&srq->post_lock);
	srq->prod = 0;
	if (udata) {
		err = sirdma_queue_expose(sirdma_uctx(udata), srq->q, &resp.mi);
		if (err)
			goto err_release;
	}
	a.pd = cpu_to_le32(to_pdn(ibsrq->pd));
	a.max_sge = cpu_to_le32(attr->max_sge);
	a.limit = cpu_to_le32(attr->srq_limit);
	sirdma_queue_args(srq->q, a.queue);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_SRQ, &a, sizeof(a), res, NULL, 0);
	if (err)
		goto err_release;
	srq->srqn = res[SOFTIRDMA_RESULT_NUM];
	err = sirdma_enter(sdev, &sdev->srqs, SOFTIRDMA_OP_DESTROY_SRQ, srq->srqn, srq, true);
	if (err)
		goto err_release;
	if (!udata)
		return 0;
	resp.srq_num = srq->srqn;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_unmake;
	return 0;

err_unmake:
	sirdma_unmake(sdev, &sdev->srqs, SOFTIRDMA_OP_DESTROY_SRQ, srq->srqn, srq);
err_release:
	sirdma_queue_release(srq->q);
	return err;
}

/*
 * modify_srq changes the limit, or moves the SRQ to a new ring. The provider keeps posting into
 * the ring it maps until it has the new one's mminfo, so everything that can fail (the ring, its
 * mmap entry, the mminfo's copy to the address the provider's command names) goes before
 * MODIFY_SRQ moves the device: past the move nothing may fail. A call that fails leaves the
 * device on the old ring.
 */
static int modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		      enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibsrq->device);
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	struct softirdma_modify_srq_args a = {};
	struct rxe_modify_srq_cmd cmd = {};
	struct sirdma_queue *q = NULL;
	struct mminfo mi = {};
	u32 dev_mask = 0;
	int err;

	if (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT))
		return -EOPNOTSUPP;
	if (mask & IB_SRQ_LIMIT) {
		u32 max_wr = (1U << srq->q->log_count) - 1;

		if (attr->srq_limit > ((mask & IB_SRQ_MAX_WR) ? attr->max_wr : max_wr))
			return -EINVAL;
		dev_mask |= SOFTIRDMA_SRQ_MODIFY_LIMIT;
		a.limit = cpu_to_le32(attr->srq_limit);
	}
	if (mask & IB_SRQ_MAX_WR) {
		if (!udata)
			return -EOPNOTSUPP;
		if (udata->inlen < sizeof(cmd))
			return -EINVAL;
		err = ib_copy_from_udata(&cmd, udata, sizeof(cmd));
		if (err)
			return err;
		if (attr->max_wr > sdev->caps.max_srq_wr)
			return -EINVAL;
		q = srq_ring(sdev, &attr->max_wr, srq->max_sge);
		if (IS_ERR(q))
			return PTR_ERR(q);
		err = sirdma_queue_expose(sirdma_uctx(udata), q, &mi);
		if (err)
			goto err_release;
		if (copy_to_user(u64_to_user_ptr(cmd.mmap_info_addr), &mi, sizeof(mi))) {
			err = -EFAULT;
			goto err_release;
		}
		dev_mask |= SOFTIRDMA_SRQ_MODIFY_MAX_WR;
		sirdma_queue_args(q, a.queue);
	}
	a.srqn = cpu_to_le32(srq->srqn);
	a.mask = cpu_to_le32(dev_mask);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_MODIFY_SRQ, &a, sizeof(a), NULL, NULL, 0);
	if (err)
		goto err_release;
	if (q) {
		/* The device reads the new ring; the old one goes once the process unmaps it. */
		sirdma_queue_release(srq->q);
		srq->q = q;
	}
	return 0;

err_release:
	sirdma_queue_release(q);
	return err;
}

/*
 * The RDMA core runs two modifies of one SRQ at once (it looks the SRQ up shared): a resize
 * replaces srq->q, which a limit change reads.
 */
int sirdma_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		      enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	int err;

	mutex_lock(&srq->lock);
	err = modify_srq(ibsrq, attr, mask, udata);
	mutex_unlock(&srq->lock);
	return err;
}

int sirdma_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct softirdma_num_args a = { .num = cpu_to_le32(to_ssrq(ibsrq)->srqn) };
	u32 res[SOFTIRDMA_CMD_RESULTS];
	int err;

	err = sirdma_cmd(to_sdev(ibsrq->device), SOFTIRDMA_OP_QUERY_SRQ, &a, sizeof(a), res,
			 NULL, 0);
	if (err)
		return err;
	attr->max_wr = res[SOFTIRDMA_RESULT_SRQ_MAX_WR];
	attr->max_sge = res[SOFTIRDMA_RESULT_SRQ_MAX_SGE];
	attr->srq_limit = res[SOFTIRDMA_RESULT_SRQ_LIMIT];
	return 0;
}

int sirdma_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibsrq->device);
	struct sirdma_srq *srq = to_ssrq(ibsrq);

	return sirdma_destroy_queued(sdev, &sdev->srqs, SOFTIRDMA_OP_DESTROY_SRQ, srq->srqn, srq,
				     srq->q, NULL);
}

int sirdma_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			 const struct ib_recv_wr **bad)
{
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	unsigned long flags;
	int err;

	if (ibsrq->uobject) { /* the process posts in the ring itself */
		*bad = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&srq->post_lock, flags);
	err = sirdma_put_recvs(srq->q, &srq->prod, srq->max_sge, wr, bad);
	spin_unlock_irqrestore(&srq->post_lock, flags);
	return err;
}
