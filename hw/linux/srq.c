// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Shared receive queues from user space: a ring of rxe receive WQEs the provider posts into
 * itself (as it does an RQ), made, resized, limited, queried and destroyed by control
 * commands. A resize gives the process the new ring's mminfo at the address its command names,
 * as rxe does, and only then the device the new ring (it moves the posted receives over).
 */
#include <linux/uaccess.h>
#include <linux/unaligned.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>
#include <rdma/uverbs_ioctl.h>

#include "softirdma.h"

#define SRQ_ARGS_SIZE (16 + SOFTIRDMA_QUEUE_ARGS_SIZE)

static struct sirdma_srq *to_ssrq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct sirdma_srq, ibsrq);
}

/* srq_ring allocates a ring for max_wr receives of max_sge SGEs; max_wr becomes what it holds. */
static struct sirdma_queue *srq_ring(struct sirdma_dev *sdev, u32 *max_wr, u32 max_sge)
{
	u32 count = roundup_pow_of_two(max(*max_wr, 1U) + 1);
	struct sirdma_queue *q;

	q = sirdma_queue_alloc(sdev, count,
			       roundup_pow_of_two(sizeof(struct rxe_recv_wqe) + max_sge * sizeof(struct rxe_sge)));
	if (!IS_ERR(q))
		*max_wr = count - 1;
	return q;
}

int sirdma_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibsrq->device);
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	struct ib_srq_attr *attr = &init->attr;
	struct rxe_create_srq_resp resp = {};
	u8 args[SRQ_ARGS_SIZE] = {};
	u32 res[4];
	int err;

	if (!udata)
		return -EOPNOTSUPP; /* kernel SRQs are not there yet */
	if (init->srq_type != IB_SRQT_BASIC || udata->outlen < sizeof(resp))
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
	put_unaligned_le32(container_of(ibsrq->pd, struct sirdma_pd, ibpd)->pdn, args);
	put_unaligned_le32(attr->max_sge, args + 4);
	put_unaligned_le32(attr->srq_limit, args + 8);
	sirdma_queue_args(srq->q, args + 16);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_SRQ, args, sizeof(args), res, NULL, 0);
	if (err) {
		sirdma_queue_free(srq->q);
		return err;
	}
	srq->srqn = res[0];
	err = xa_insert(&sdev->srqs, srq->srqn, srq, GFP_KERNEL);
	if (err)
		goto err_cmd;
	err = sirdma_queue_expose(sirdma_uctx(udata), srq->q, &resp.mi);
	if (err)
		goto err_cmd;
	resp.srq_num = srq->srqn;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err) {
		sirdma_unmake(sdev, &sdev->srqs, SOFTIRDMA_OP_DESTROY_SRQ, srq->srqn, srq);
		sirdma_queue_release(srq->q);
	}
	return err;

err_cmd:
	sirdma_unmake(sdev, &sdev->srqs, SOFTIRDMA_OP_DESTROY_SRQ, srq->srqn, srq);
	sirdma_queue_free(srq->q);
	return err;
}

/*
 * modify_srq changes the limit, or moves the SRQ to a new ring. The provider keeps posting into
 * the ring it maps until it has the new one's mminfo, so everything that can fail (the ring, its
 * mmap entry, the mminfo's copy to the address the provider's command names) goes before
 * MODIFY_SRQ moves the device: past the move nothing may fail. A call that fails leaves the
 * device on the old ring.
 */
static int modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr, enum ib_srq_attr_mask mask,
		      struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibsrq->device);
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	struct sirdma_queue *q = NULL;
	struct rxe_modify_srq_cmd cmd = {};
	u8 args[SRQ_ARGS_SIZE] = {};
	struct mminfo mi = {};
	u32 dev_mask = 0;
	int err;

	if (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT))
		return -EOPNOTSUPP;
	put_unaligned_le32(srq->srqn, args);
	if (mask & IB_SRQ_LIMIT) {
		u32 max_wr = (1U << srq->q->log_count) - 1;

		if (attr->srq_limit > ((mask & IB_SRQ_MAX_WR) ? attr->max_wr : max_wr))
			return -EINVAL;
		dev_mask |= SOFTIRDMA_SRQ_MODIFY_LIMIT;
		put_unaligned_le32(attr->srq_limit, args + 8);
	}
	if (mask & IB_SRQ_MAX_WR) {
		/* The new ring's mminfo goes where the provider's command says. */
		if (!udata || udata->inlen < sizeof(cmd))
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
		sirdma_queue_args(q, args + 16);
	}
	put_unaligned_le32(dev_mask, args + 4);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_MODIFY_SRQ, args, sizeof(args), NULL, NULL, 0);
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
int sirdma_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr, enum ib_srq_attr_mask mask,
		      struct ib_udata *udata)
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
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	__le32 n = cpu_to_le32(srq->srqn);
	u32 res[4];
	int err;

	err = sirdma_cmd(to_sdev(ibsrq->device), SOFTIRDMA_OP_QUERY_SRQ, &n, sizeof(n), res, NULL, 0);
	if (err)
		return err;
	attr->max_wr = res[0];
	attr->max_sge = res[1];
	attr->srq_limit = res[2];
	return 0;
}

int sirdma_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibsrq->device);
	struct sirdma_srq *srq = to_ssrq(ibsrq);
	int err = sirdma_destroy_obj(sdev, &sdev->srqs, SOFTIRDMA_OP_DESTROY_SRQ, srq->srqn, srq);

	if (err)
		return err;
	sirdma_queue_release(srq->q);
	return 0;
}

int sirdma_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr, const struct ib_recv_wr **bad)
{
	*bad = wr;
	return -EOPNOTSUPP; /* user space posts receives in the ring itself */
}
