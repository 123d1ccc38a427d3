// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Completion queues: a ring of CQEs in rxe's user layout, which the rxe provider maps and polls
 * itself (a kernel CQ's is polled in kverbs.c), made, resized and destroyed by control commands,
 * and armed through its doorbell slot.
 */
#include <rdma/rdma_user_rxe.h>
#include <rdma/uverbs_ioctl.h>

#include "softirdma.h"

/* A CQ's ring holds CQEs in rxe's user layout, each in a power-of-two slot. */
#define CQ_ELEM_SIZE roundup_pow_of_two(sizeof(struct ib_uverbs_wc))

/* cq_count is the ring slots for cqe CQEs (one always stays empty), 0 if the device has none. */
static u32 cq_count(struct sirdma_dev *sdev, u32 cqe)
{
	if (!cqe || cqe > sdev->caps.max_cqe || order_base_2((u64)cqe + 1) > SOFTIRDMA_CQ_MAX_LOG)
		return 0;
	return roundup_pow_of_two(cqe + 1);
}

#ifdef SIRDMA_CREATE_CQ_UDATA
/* Before 6.11 the core hands create_cq a user CQ's udata, which lives in its bundle. */
int sirdma_create_cq_udata(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			   struct ib_udata *udata)
{
	return sirdma_create_cq(ibcq, attr,
				udata ? container_of(udata, struct uverbs_attr_bundle, driver_udata) : NULL);
}
#endif

/*
 * The ring is mappable, and the process told where, before the device has it: what fails after
 * CREATE_CQ (a doorbell slot outside the BAR, the event table) is unwound by DESTROY_CQ.
 */
int sirdma_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		     struct uverbs_attr_bundle *attrs)
{
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	struct ib_udata *udata = attrs ? &attrs->driver_udata : NULL;
	struct sirdma_cq *cq = to_scq(ibcq);
	struct softirdma_create_cq_args a = {};
	struct rxe_create_cq_resp resp = {};
	u32 res[SOFTIRDMA_CMD_RESULTS], count;
	bool usable;
	int err;

	if (attr->flags)
		return -EOPNOTSUPP; /* as rxe: no creation flags */
	count = cq_count(sdev, attr->cqe);
	if (!count || (udata && udata->outlen < sizeof(resp)))
		return -EINVAL;
	mutex_init(&cq->lock);
	spin_lock_init(&cq->poll_lock);
	cq->q = sirdma_queue_alloc(sdev, count, CQ_ELEM_SIZE);
	if (IS_ERR(cq->q))
		return PTR_ERR(cq->q);
	if (udata) { /* a kernel CQ's ring is polled here (kverbs.c) */
		err = sirdma_queue_expose(attrs->context, cq->q, &resp.mi);
		if (err)
			goto err_release;
		err = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (err)
			goto err_release;
	}
	sirdma_queue_args(cq->q, a.queue);
	a.eqn = cpu_to_le32(sdev->comp_eq.eqn);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_CQ, &a, sizeof(a), res, NULL, 0);
	if (err)
		goto err_release;
	cq->cqn = res[SOFTIRDMA_RESULT_NUM];
	cq->slot = res[SOFTIRDMA_RESULT_SLOT];
	usable = sirdma_slot_ok(sdev, SOFTIRDMA_CQ_ARM_BASE, cq->slot, SOFTIRDMA_MAX_CQ_SLOTS);
	err = sirdma_enter(sdev, &sdev->cqs, SOFTIRDMA_OP_DESTROY_CQ, cq->cqn, cq, usable);
	if (err)
		goto err_release;
	ibcq->cqe = count - 1;
	return 0;

err_release:
	sirdma_queue_release(cq->q);
	return err;
}

int sirdma_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	struct sirdma_cq *cq = to_scq(ibcq);

	return sirdma_destroy_queued(sdev, &sdev->cqs, SOFTIRDMA_OP_DESTROY_CQ, cq->cqn, cq, cq->q,
				     NULL);
}

/*
 * sirdma_resize_cq moves the CQ to a ring of at least cqe entries; the device carries the
 * completions not yet polled over (and refuses a ring they do not fit, as rxe does). The
 * provider, which holds its CQ lock meanwhile, maps the new ring from the reply and polls the
 * old one until then, so everything that can fail (the ring, its mmap entry, the reply) goes
 * before RESIZE_CQ moves the device: past the move nothing may fail. A call that fails leaves
 * the device on the old ring.
 */
int sirdma_resize_cq(struct ib_cq *ibcq, unsigned int cqe, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	struct sirdma_cq *cq = to_scq(ibcq);
	struct softirdma_resize_cq_args a = {};
	struct rxe_resize_cq_resp resp = {};
	struct sirdma_queue *q;
	u32 count;
	int err;

	if (!udata)
		return -EOPNOTSUPP;
	count = cq_count(sdev, cqe);
	if (!count || udata->outlen < sizeof(resp))
		return -EINVAL;
	mutex_lock(&cq->lock);
	q = sirdma_queue_alloc(sdev, count, CQ_ELEM_SIZE);
	if (IS_ERR(q)) {
		err = PTR_ERR(q);
		goto out;
	}
	err = sirdma_queue_expose(sirdma_uctx(udata), q, &resp.mi);
	if (err)
		goto err_release;
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err)
		goto err_release;
	a.cqn = cpu_to_le32(cq->cqn);
	sirdma_queue_args(q, a.queue);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_RESIZE_CQ, &a, sizeof(a), NULL, NULL, 0);
	if (err)
		goto err_release;
	/* The device writes the new ring now; the old one goes once the process unmaps it. */
	sirdma_queue_release(cq->q);
	cq->q = q;
	ibcq->cqe = count - 1;
	mutex_unlock(&cq->lock);
	return 0;

err_release:
	sirdma_queue_release(q);
out:
	mutex_unlock(&cq->lock);
	return err;
}

#ifdef SIRDMA_RESIZE_CQ_INT
/*
 * Before 7.1 the core hands resize_cq user space's u32 as an int; back to unsigned it is the
 * number user space gave again, which sirdma_resize_cq checks.
 */
int sirdma_resize_cq_int(struct ib_cq *ibcq, int cqe, struct ib_udata *udata)
{
	return sirdma_resize_cq(ibcq, cqe, udata);
}
#endif

/*
 * sirdma_modify_cq sets the CQ's event moderation: once armed and fired, its event waits for
 * cq_count completions or cq_period microseconds, whichever comes first (0 and 0: each at once).
 * The core's DIM calls it for the kernel's CQs when the cq_dim parameter turns DIM on.
 */
int sirdma_modify_cq(struct ib_cq *ibcq, u16 cq_count, u16 cq_period)
{
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	struct softirdma_modify_cq_args a = {};

	if (!(sdev->caps.caps & SOFTIRDMA_CAP_CQ_MODERATION))
		return -EOPNOTSUPP;
	if (cq_period > SOFTIRDMA_CQ_MOD_MAX_PERIOD)
		return -EINVAL;
	a.cqn = cpu_to_le32(to_scq(ibcq)->cqn);
	a.count = cpu_to_le16(cq_count);
	a.period = cpu_to_le16(cq_period);
	return sirdma_cmd(sdev, SOFTIRDMA_OP_MODIFY_CQ, &a, sizeof(a), NULL, NULL, 0);
}

int sirdma_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	u32 off = SOFTIRDMA_CQ_ARM_BASE + SOFTIRDMA_DOORBELL_STRIDE * to_scq(ibcq)->slot;
	u32 v = SOFTIRDMA_ARM_NEXT;

	if (READ_ONCE(sdev->failed))
		return 0; /* what is left is completed flushed by poll_cq, kicked by each post */
	if ((flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED)
		v = SOFTIRDMA_ARM_SOLICITED;
	writel(v, sdev->db + off);
	return 0;
}
