// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The verbs of user space's objects: CQs and RC QPs whose rings the rxe provider maps and
 * drives itself (a post_send with no work requests is the send queue's doorbell), MRs from
 * ib_umem page lists, memory windows. Each object is made and destroyed by a control command.
 */
#include <linux/dma-mapping.h>
#include <rdma/ib_umem.h>
#include <rdma/iter.h>
#include <rdma/rdma_user_rxe.h>
#include <rdma/uverbs_ioctl.h>

#include "softirdma.h"

static struct sirdma_cq *to_scq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct sirdma_cq, ibcq);
}

static struct sirdma_qp *to_sqp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct sirdma_qp, ibqp);
}

static u32 to_pdn(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct sirdma_pd, ibpd)->pdn;
}

/* sirdma_num_cmd runs a command whose only argument is an object's number. */
int sirdma_num_cmd(struct sirdma_dev *sdev, u16 op, u32 num)
{
	struct softirdma_num_args a = { .num = cpu_to_le32(num) };

	return sirdma_cmd(sdev, op, &a, sizeof(a), NULL, NULL, 0);
}

/*
 * sirdma_unmake unwinds a creation that fails after the device made the object: out of the
 * table the event handlers look it up in (if it got there: obj's entry only), a handler that
 * may still hold it waited out, then destroyed by the device. A device that refuses the
 * destroy is failed, its DMA stopped, so that the caller may free what the object used.
 */
void sirdma_unmake(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj)
{
	struct softirdma_num_args a = { .num = cpu_to_le32(num) };

	xa_cmpxchg(xa, num, obj, NULL, 0);
	synchronize_rcu();
	sirdma_let_go(sdev, op, &a, sizeof(a), NULL);
}

/*
 * sirdma_destroy_obj has the device destroy an object, then takes it out of the event
 * handlers' table and waits out a handler that may still hold it. A failed device keeps
 * nothing: its -EIO lets the object go all the same; any other error keeps it.
 */
int sirdma_destroy_obj(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj)
{
	int err = sirdma_num_cmd(sdev, op, num);

	if (err && err != -EIO)
		return err;
	xa_cmpxchg(xa, num, obj, NULL, 0);
	synchronize_rcu();
	return 0;
}

/*
 * sirdma_slot_ok says whether a doorbell slot the device gave lies in the doorbell BAR: the
 * driver writes there without further checks.
 */
bool sirdma_slot_ok(struct sirdma_dev *sdev, u32 base, u32 slot, u32 max)
{
	u64 end = base + (u64)SOFTIRDMA_DOORBELL_STRIDE * slot + sizeof(u32);

	if (slot < max && end <= pci_resource_len(sdev->pdev, SOFTIRDMA_BAR_DOORBELL))
		return true;
	dev_err(&sdev->pdev->dev, "doorbell slot %u out of range\n", slot);
	return false;
}

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
	if (!sirdma_slot_ok(sdev, SOFTIRDMA_CQ_ARM_BASE, cq->slot, SOFTIRDMA_MAX_CQ_SLOTS)) {
		err = -EIO;
		goto err_unmake;
	}
	err = xa_insert(&sdev->cqs, cq->cqn, cq, GFP_KERNEL);
	if (err)
		goto err_unmake;
	ibcq->cqe = count - 1;
	return 0;

err_unmake:
	sirdma_unmake(sdev, &sdev->cqs, SOFTIRDMA_OP_DESTROY_CQ, cq->cqn, cq);
err_release:
	sirdma_queue_release(cq->q);
	return err;
}

int sirdma_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	struct sirdma_cq *cq = to_scq(ibcq);
	int err = sirdma_destroy_obj(sdev, &sdev->cqs, SOFTIRDMA_OP_DESTROY_CQ, cq->cqn, cq);

	if (err)
		return err;
	sirdma_queue_release(cq->q);
	return 0;
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

/*
 * The rings are mappable, and the process told where, before the device has them: what fails
 * after CREATE_QP (a doorbell slot outside the BAR, the event table) is unwound by DESTROY_QP.
 */
int sirdma_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibqp->device);
	struct sirdma_qp *qp = to_sqp(ibqp);
	struct ib_qp_cap *cap = &init->cap;
	struct softirdma_create_qp_args a = {};
	struct rxe_create_qp_resp resp = {};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	u32 payload, sq_count, rq_count, elem;
	int err;

	switch (init->qp_type) {
	case IB_QPT_RC:
		a.type = SOFTIRDMA_QP_TYPE_RC;
		break;
	case IB_QPT_GSI: /* the MAD layer's, QPN 1 */
		if (udata || !(sdev->caps.caps & SOFTIRDMA_CAP_UD))
			return -EOPNOTSUPP;
		a.type = SOFTIRDMA_QP_TYPE_GSI;
		break;
	case IB_QPT_UC:
	case IB_QPT_UD:
		if (!(sdev->caps.caps & SOFTIRDMA_CAP_UD))
			return -EOPNOTSUPP;
		a.type = init->qp_type == IB_QPT_UC ? SOFTIRDMA_QP_TYPE_UC : SOFTIRDMA_QP_TYPE_UD;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (init->create_flags)
		return -EOPNOTSUPP;
	if ((udata && udata->outlen < sizeof(resp)) || cap->max_send_wr > sdev->caps.max_qp_wr ||
	    cap->max_recv_wr > sdev->caps.max_qp_wr || cap->max_send_sge > sdev->caps.max_sge ||
	    cap->max_recv_sge > sdev->caps.max_sge || cap->max_inline_data > sdev->caps.max_inline)
		return -EINVAL;

	/* A send WQE holds its SGEs or its inline data: report what the slot takes, as rxe does. */
	payload = max_t(u32, max(cap->max_send_sge, 1U) * sizeof(struct rxe_sge),
			cap->max_inline_data);
	cap->max_send_sge = min_t(u32, payload / sizeof(struct rxe_sge), sdev->caps.max_sge);
	cap->max_inline_data = min(payload, sdev->caps.max_inline);
	sq_count = roundup_pow_of_two(max(cap->max_send_wr, 1U) + 1);
	rq_count = roundup_pow_of_two(max(cap->max_recv_wr, 1U) + 1);
	cap->max_send_wr = sq_count - 1;
	cap->max_recv_wr = rq_count - 1;
	cap->max_recv_sge = max(cap->max_recv_sge, 1U);
	if (init->srq) { /* its receives come from the SRQ */
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	}

	elem = roundup_pow_of_two(sizeof(struct rxe_send_wqe) + payload);
	qp->sq = sirdma_queue_alloc(sdev, sq_count, elem);
	if (IS_ERR(qp->sq))
		return PTR_ERR(qp->sq);
	if (!init->srq) {
		elem = roundup_pow_of_two(sizeof(struct rxe_recv_wqe) +
					  cap->max_recv_sge * sizeof(struct rxe_sge));
		qp->rq = sirdma_queue_alloc(sdev, rq_count, elem);
		if (IS_ERR(qp->rq)) {
			err = PTR_ERR(qp->rq);
			qp->rq = NULL;
			goto err_sq;
		}
	}
	spin_lock_init(&qp->sq_lock);
	spin_lock_init(&qp->rq_lock);
	if (udata) { /* a kernel QP's rings are written here (kverbs.c) */
		err = sirdma_queue_expose(sirdma_uctx(udata), qp->sq, &resp.sq_mi);
		if (err)
			goto err_rq;
		if (qp->rq) {
			err = sirdma_queue_expose(sirdma_uctx(udata), qp->rq, &resp.rq_mi);
			if (err)
				goto err_rq;
		}
		err = ib_copy_to_udata(udata, &resp, sizeof(resp));
		if (err)
			goto err_rq;
	}

	a.pd = cpu_to_le32(to_pdn(ibqp->pd));
	a.sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	a.send_cq = cpu_to_le32(to_scq(init->send_cq)->cqn);
	a.recv_cq = cpu_to_le32(to_scq(init->recv_cq)->cqn);
	a.max_inline = cpu_to_le32(cap->max_inline_data);
	a.max_send_sge = cpu_to_le16(cap->max_send_sge);
	a.max_recv_sge = cpu_to_le16(cap->max_recv_sge);
	if (init->srq)
		a.srq = cpu_to_le32(container_of(init->srq, struct sirdma_srq, ibsrq)->srqn);
	sirdma_queue_args(qp->sq, a.sq);
	if (qp->rq)
		sirdma_queue_args(qp->rq, a.rq);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_QP, &a, sizeof(a), res, NULL, 0);
	if (err)
		goto err_rq;
	ibqp->qp_num = res[SOFTIRDMA_RESULT_NUM];
	qp->slot = res[SOFTIRDMA_RESULT_SLOT];
	if (!sirdma_slot_ok(sdev, SOFTIRDMA_SQ_DOORBELL_BASE, qp->slot, SOFTIRDMA_MAX_QP_SLOTS)) {
		err = -EIO;
		goto err_unmake;
	}
	err = xa_insert(&sdev->qps, ibqp->qp_num, qp, GFP_KERNEL);
	if (err)
		goto err_unmake;
	qp->cap = *cap;
	qp->sig_all = a.sig_all;
	qp->type = init->qp_type;
	return 0;

err_unmake:
	sirdma_unmake(sdev, &sdev->qps, SOFTIRDMA_OP_DESTROY_QP, ibqp->qp_num, qp);
err_rq:
	sirdma_queue_release(qp->rq);
err_sq:
	sirdma_queue_release(qp->sq);
	return err;
}

int sirdma_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_udata *udata)
{
	struct softirdma_modify_qp_args args = {};
	struct softirdma_qp_attr *a = (void *)args.attr;
	int err;

	BUILD_BUG_ON(sizeof(*a) != sizeof(args.attr));
	args.qpn = cpu_to_le32(ibqp->qp_num);
	/* ib_qp_attr_mask, ib_qp_state, ib_mtu and the access flags have libibverbs' values. */
	args.mask = cpu_to_le32(mask);
	a->state = attr->qp_state;
	a->cur_state = attr->cur_qp_state;
	a->path_mtu = attr->path_mtu;
	a->timeout = attr->timeout;
	a->retry_cnt = attr->retry_cnt;
	a->rnr_retry = attr->rnr_retry;
	a->min_rnr_timer = attr->min_rnr_timer;
	a->max_rd_atomic = attr->max_rd_atomic;
	a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	a->port_num = attr->port_num;
	a->sq_drain_notify = attr->en_sqd_async_notify;
	a->pkey_index = cpu_to_le16(attr->pkey_index);
	a->access_flags = cpu_to_le32(attr->qp_access_flags);
	a->dest_qpn = cpu_to_le32(attr->dest_qp_num);
	a->rq_psn = cpu_to_le32(attr->rq_psn);
	a->sq_psn = cpu_to_le32(attr->sq_psn);
	a->qkey = cpu_to_le32(attr->qkey);
	if ((mask & IB_QP_STATE) && attr->qp_state == IB_QPS_RESET)
		sirdma_kqp_reset(to_sqp(ibqp)); /* the function zeroes the rings' indices */
	if (mask & IB_QP_AV) {
		const struct ib_global_route *grh = rdma_ah_read_grh(&attr->ah_attr);

		memcpy(a->dgid, grh->dgid.raw, sizeof(a->dgid));
		a->sgid_index = grh->sgid_index;
		a->hop_limit = grh->hop_limit;
		a->traffic_class = grh->traffic_class;
		a->flow_label = cpu_to_le32(grh->flow_label);
		memcpy(a->dmac, attr->ah_attr.roce.dmac, sizeof(a->dmac));
	}
	err = sirdma_cmd(to_sdev(ibqp->device), SOFTIRDMA_OP_MODIFY_QP, &args, sizeof(args),
			 NULL, NULL, 0);
	/* A failed function's QPs are in error all the same: ib_drain_qp moves them there and
	 * then waits for its work requests, which poll_cq completes flushed.
	 */
	if (err == -EIO && READ_ONCE(to_sdev(ibqp->device)->failed) && (mask & IB_QP_STATE) &&
	    attr->qp_state == IB_QPS_ERR)
		err = 0;
	if (!err && (mask & IB_QP_STATE))
		WRITE_ONCE(to_sqp(ibqp)->state, attr->qp_state);
	return err;
}

int sirdma_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_qp_init_attr *init)
{
	struct softirdma_query_qp_args args = { .qpn = cpu_to_le32(ibqp->qp_num) };
	const struct softirdma_qp_attr *a = (void *)args.attr;
	struct sirdma_qp *qp = to_sqp(ibqp);
	int err;

	BUILD_BUG_ON(sizeof(*a) != sizeof(args.attr));
	/* The device answers in the arguments: the attributes at args.attr. */
	err = sirdma_cmd(to_sdev(ibqp->device), SOFTIRDMA_OP_QUERY_QP, &args, sizeof(args),
			 NULL, &args, sizeof(args));
	if (err)
		return err;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a->state;
	attr->cur_qp_state = a->cur_state;
	attr->path_mtu = a->path_mtu;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;
	attr->min_rnr_timer = a->min_rnr_timer;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	attr->port_num = a->port_num;
	attr->pkey_index = le16_to_cpu(a->pkey_index);
	attr->qp_access_flags = le32_to_cpu(a->access_flags);
	attr->dest_qp_num = le32_to_cpu(a->dest_qpn);
	attr->rq_psn = le32_to_cpu(a->rq_psn);
	attr->sq_psn = le32_to_cpu(a->sq_psn);
	attr->qkey = le32_to_cpu(a->qkey);
	attr->ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&attr->ah_attr, a->port_num);
	rdma_ah_set_grh(&attr->ah_attr, NULL, le32_to_cpu(a->flow_label), a->sgid_index,
			a->hop_limit, a->traffic_class);
	memcpy(attr->ah_attr.grh.dgid.raw, a->dgid, sizeof(a->dgid));
	attr->cap = qp->cap;
	memset(init, 0, sizeof(*init));
	init->qp_type = qp->type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->cap = qp->cap;
	init->sq_sig_type = qp->sig_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	return 0;
}

int sirdma_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibqp->device);
	struct sirdma_qp *qp = to_sqp(ibqp);
	int err = sirdma_destroy_obj(sdev, &sdev->qps, SOFTIRDMA_OP_DESTROY_QP, ibqp->qp_num, qp);

	if (err)
		return err;
	sirdma_queue_release(qp->sq);
	sirdma_queue_release(qp->rq);
	return 0;
}

int sirdma_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		     const struct ib_send_wr **bad)
{
	struct sirdma_dev *sdev = to_sdev(ibqp->device);
	u32 off = SOFTIRDMA_SQ_DOORBELL_BASE + SOFTIRDMA_DOORBELL_STRIDE * to_sqp(ibqp)->slot;

	/* A QP not yet ready to send refuses, as rxe's: the states before RTS change only here. */
	if (READ_ONCE(to_sqp(ibqp)->state) < IB_QPS_RTS) {
		if (wr)
			*bad = wr;
		return -EINVAL;
	}
	if (ibqp->uobject) {
		/* The provider's doorbell: it wrote the WQEs and the producer index itself. */
		if (wr) {
			*bad = wr;
			return -EINVAL;
		}
		writel(0, sdev->db + off);
		return 0;
	}
	return sirdma_kpost_send(to_sqp(ibqp), wr, bad);
}

/*
 * sirdma_get_dma_mr is a kernel PD's local DMA lkey: an MR over all of guest memory with local
 * access only (REG_DMA_MR); the kernel gives remote access through MRs of its own.
 */
struct ib_mr *sirdma_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct sirdma_dev *sdev = to_sdev(ibpd->device);
	struct softirdma_reg_dma_args a = { .pd = cpu_to_le32(to_pdn(ibpd)) };
	u32 res[SOFTIRDMA_CMD_RESULTS];
	struct sirdma_mr *mr;
	int err;

	if (!(sdev->caps.caps & SOFTIRDMA_CAP_UD))
		return ERR_PTR(-EOPNOTSUPP);
	if (access & ~IB_ACCESS_LOCAL_WRITE)
		return ERR_PTR(-EOPNOTSUPP);
	a.access = cpu_to_le32(access);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_REG_DMA_MR, &a, sizeof(a), res, NULL, 0);
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	mr->ibmr.lkey = res[SOFTIRDMA_RESULT_NUM];
	mr->ibmr.rkey = res[SOFTIRDMA_RESULT_NUM];
	return &mr->ibmr;
}

/* pbl_free gives back a page list's tables. */
static void pbl_free(struct sirdma_dev *sdev, __le64 **tables, dma_addr_t *dmas, u32 n)
{
	u32 i;

	for (i = 0; i < n; i++)
		dma_free_coherent(&sdev->pdev->dev, PAGE_SIZE, tables[i], dmas[i]);
	kfree(tables);
	kfree(dmas);
}

struct ib_mr *sirdma_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
				 int access, struct ib_dmah *dmah, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibpd->device);
	struct softirdma_reg_mr_args a = {};
	struct softirdma_page_list *pl = (void *)a.pages;
	struct ib_block_iter biter;
	struct sirdma_mr *mr;
	__le64 **tables = NULL;
	dma_addr_t *dmas = NULL;
	unsigned long pgsz;
	u32 res[SOFTIRDMA_CMD_RESULTS], i = 0, ntables = 0, leaves;
	size_t nblocks;
	int err;

	if (dmah)
		return ERR_PTR(-EOPNOTSUPP); /* the device has no DMA handles (no alloc_dmah) */
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->umem = ib_umem_get_va(ibpd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		err = PTR_ERR(mr->umem);
		goto err_free;
	}
	pgsz = ib_umem_find_best_pgsz(mr->umem, SZ_4K | SZ_2M, virt);
	nblocks = pgsz ? ib_umem_num_dma_blocks(mr->umem, pgsz) : 0;
	/* At most a two-level page list. */
	if (!nblocks || nblocks > min(SOFTIRDMA_PL_ENTRIES_PER_PAGE * SOFTIRDMA_PL_ENTRIES_PER_PAGE,
				      SOFTIRDMA_MAX_MR_PAGES)) {
		err = -EINVAL;
		goto err_umem;
	}
	/* Level 1 up to a page of addresses, level 2 beyond: a page of table addresses on top. */
	leaves = DIV_ROUND_UP(nblocks, SOFTIRDMA_PL_ENTRIES_PER_PAGE);
	ntables = leaves + (leaves > 1);
	tables = kcalloc(ntables, sizeof(*tables), GFP_KERNEL);
	dmas = kcalloc(ntables, sizeof(*dmas), GFP_KERNEL);
	if (!tables || !dmas) {
		err = -ENOMEM;
		goto err_tables;
	}
	for (i = 0; i < ntables; i++) {
		tables[i] = dma_alloc_coherent(&sdev->pdev->dev, PAGE_SIZE, &dmas[i], GFP_KERNEL);
		if (!tables[i]) {
			err = -ENOMEM;
			goto err_tables;
		}
	}
	i = 0;
	rdma_umem_for_each_dma_block(mr->umem, &biter, pgsz) {
		tables[i / SOFTIRDMA_PL_ENTRIES_PER_PAGE][i % SOFTIRDMA_PL_ENTRIES_PER_PAGE] =
			cpu_to_le64(rdma_block_iter_dma_address(&biter));
		i++;
	}
	if (leaves > 1) {
		for (i = 0; i < leaves; i++)
			tables[leaves][i] = cpu_to_le64(dmas[i]);
		pl->addr = cpu_to_le64(dmas[leaves]);
		pl->levels = 2;
	} else {
		pl->addr = cpu_to_le64(dmas[0]);
		pl->levels = 1;
	}
	pl->pages = cpu_to_le32(nblocks);
	pl->shift = ilog2(pgsz);
	a.pd = cpu_to_le32(to_pdn(ibpd));
	a.access = cpu_to_le32(access);
	a.iova = cpu_to_le64(virt);
	a.length = cpu_to_le64(length);
	a.offset = cpu_to_le64(ib_umem_dma_offset(mr->umem, pgsz));
	/* The device resolves the pages when it registers them: the tables may go after. */
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_REG_MR, &a, sizeof(a), res, NULL, 0);
	pbl_free(sdev, tables, dmas, ntables);
	if (err)
		goto err_umem;
	mr->ibmr.lkey = res[SOFTIRDMA_RESULT_NUM];
	mr->ibmr.rkey = res[SOFTIRDMA_RESULT_NUM];
	return &mr->ibmr;

err_tables:
	pbl_free(sdev, tables, dmas, i); /* the first i tables were allocated */
err_umem:
	ib_umem_release(mr->umem);
err_free:
	kfree(mr);
	return ERR_PTR(err);
}

#ifdef SIRDMA_REG_USER_MR_NODMAH
/* Before 6.17 reg_user_mr has no DMA handle. */
struct ib_mr *sirdma_reg_user_mr_nodmah(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
					int access, struct ib_udata *udata)
{
	return sirdma_reg_user_mr(ibpd, start, length, virt, access, NULL, udata);
}
#endif

int sirdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct sirdma_mr *mr = container_of(ibmr, struct sirdma_mr, ibmr);
	int err = sirdma_num_cmd(to_sdev(ibmr->device), SOFTIRDMA_OP_DEALLOC_STAG, ibmr->lkey);

	/* EBUSY: windows are bound to it, and the MR stays, as the verbs API says. */
	if (err && err != -EIO)
		return err;
	ib_umem_release(mr->umem);
	sirdma_fastreg_free(to_sdev(ibmr->device), mr);
	kfree(mr);
	return 0;
}

int sirdma_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct softirdma_alloc_stag_args a = {
		.pd = cpu_to_le32(to_pdn(ibmw->pd)),
		/* libibverbs' type 2 is type 2B */
		.kind = cpu_to_le32(ibmw->type == IB_MW_TYPE_1 ? SOFTIRDMA_STAG_MW_TYPE1 :
							       SOFTIRDMA_STAG_MW_TYPE2_B),
	};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	int err;

	err = sirdma_cmd(to_sdev(ibmw->device), SOFTIRDMA_OP_ALLOC_STAG, &a, sizeof(a), res,
			 NULL, 0);
	if (err)
		return err;
	ibmw->rkey = res[SOFTIRDMA_RESULT_NUM];
	return 0;
}

int sirdma_dealloc_mw(struct ib_mw *ibmw)
{
	int err = sirdma_num_cmd(to_sdev(ibmw->device), SOFTIRDMA_OP_DEALLOC_STAG, ibmw->rkey);

	return err == -EIO ? 0 : err;
}
