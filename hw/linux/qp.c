// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Queue pairs: a send and a receive ring in rxe's user layout (none for receives on an SRQ), which
 * the rxe provider maps and drives itself (a post_send with no work requests is the send queue's
 * doorbell); a kernel QP's are written in kverbs.c. Each QP is made, moved between states,
 * queried and destroyed by control commands.
 */
#include <rdma/rdma_user_rxe.h>
#include <rdma/uverbs_ioctl.h>

#include "softirdma.h"

/* qp_type is the device's type of QP for the one the verbs ask for, or -EOPNOTSUPP. */
static int qp_type(struct sirdma_dev *sdev, enum ib_qp_type type, struct ib_udata *udata)
{
	bool ud = sdev->caps.caps & SOFTIRDMA_CAP_UD;

	switch (type) {
	case IB_QPT_RC:
		return SOFTIRDMA_QP_TYPE_RC;
	case IB_QPT_GSI: /* the MAD layer's, QPN 1 */
		return udata || !ud ? -EOPNOTSUPP : SOFTIRDMA_QP_TYPE_GSI;
	case IB_QPT_UC:
		return ud ? SOFTIRDMA_QP_TYPE_UC : -EOPNOTSUPP;
	case IB_QPT_UD:
		return ud ? SOFTIRDMA_QP_TYPE_UD : -EOPNOTSUPP;
	default:
		return -EOPNOTSUPP;
	}
}

/* qp_check refuses creation flags and capabilities beyond the device's. */
static int qp_check(struct sirdma_dev *sdev, const struct ib_qp_init_attr *init,
		    struct ib_udata *udata)
{
	const struct ib_qp_cap *cap = &init->cap;
	const struct sirdma_caps *c = &sdev->caps;

	if (init->create_flags)
		return -EOPNOTSUPP;
	if ((udata && udata->outlen < sizeof(struct rxe_create_qp_resp)) ||
	    cap->max_send_wr > c->max_qp_wr || cap->max_recv_wr > c->max_qp_wr ||
	    cap->max_send_sge > c->max_sge || cap->max_recv_sge > c->max_sge ||
	    cap->max_inline_data > c->max_inline)
		return -EINVAL;
	return 0;
}

/* The rings a QP's capabilities take: how many entries each has, and of what size. */
struct qp_rings {
	u32 sq_count, sq_elem, rq_count, rq_elem;
};

/*
 * qp_grant turns the capabilities asked for into those the rings give (what create_qp answers
 * with), and says what rings they are.
 */
static void qp_grant(struct sirdma_dev *sdev, struct ib_qp_init_attr *init, struct qp_rings *r)
{
	struct ib_qp_cap *cap = &init->cap;
	u32 payload;

	/* A send WQE holds its SGEs or its inline data: report what the slot takes, as rxe does. */
	payload = max_t(u32, max(cap->max_send_sge, 1U) * sizeof(struct rxe_sge),
			cap->max_inline_data);
	cap->max_send_sge = min_t(u32, payload / sizeof(struct rxe_sge), sdev->caps.max_sge);
	cap->max_inline_data = min(payload, sdev->caps.max_inline);
	r->sq_count = roundup_pow_of_two(max(cap->max_send_wr, 1U) + 1);
	r->rq_count = roundup_pow_of_two(max(cap->max_recv_wr, 1U) + 1);
	cap->max_send_wr = r->sq_count - 1;
	cap->max_recv_wr = r->rq_count - 1;
	cap->max_recv_sge = max(cap->max_recv_sge, 1U);
	r->sq_elem = roundup_pow_of_two(sizeof(struct rxe_send_wqe) + payload);
	r->rq_elem = roundup_pow_of_two(sizeof(struct rxe_recv_wqe) +
					cap->max_recv_sge * sizeof(struct rxe_sge));
	if (init->srq) { /* its receives come from the SRQ */
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	}
}

/* qp_alloc_rings allocates the send queue, and the receive queue unless the QP has an SRQ. */
static int qp_alloc_rings(struct sirdma_dev *sdev, struct sirdma_qp *qp,
			  const struct qp_rings *r, bool srq)
{
	int err;

	qp->sq = sirdma_queue_alloc(sdev, r->sq_count, r->sq_elem);
	if (IS_ERR(qp->sq))
		return PTR_ERR(qp->sq);
	if (srq)
		return 0;
	qp->rq = sirdma_queue_alloc(sdev, r->rq_count, r->rq_elem);
	if (!IS_ERR(qp->rq))
		return 0;
	err = PTR_ERR(qp->rq);
	qp->rq = NULL;
	sirdma_queue_release(qp->sq);
	return err;
}

static void qp_release_rings(struct sirdma_qp *qp)
{
	sirdma_queue_release(qp->rq);
	sirdma_queue_release(qp->sq);
}

/*
 * qp_expose makes a user QP's rings mappable and tells the process where. What fails is undone
 * by qp_release_rings (a ring's mmap entry owns it).
 */
static int qp_expose(struct sirdma_qp *qp, struct ib_udata *udata)
{
	struct rxe_create_qp_resp resp = {};
	int err;

	err = sirdma_queue_expose(sirdma_uctx(udata), qp->sq, &resp.sq_mi);
	if (err)
		return err;
	if (qp->rq) {
		err = sirdma_queue_expose(sirdma_uctx(udata), qp->rq, &resp.rq_mi);
		if (err)
			return err;
	}
	return ib_copy_to_udata(udata, &resp, sizeof(resp));
}

/* qp_args describes the QP to CREATE_QP: its PD, CQs and SRQ, what it was granted, its rings. */
static void qp_args(struct sirdma_qp *qp, const struct ib_qp_init_attr *init,
		    struct softirdma_create_qp_args *a)
{
	const struct ib_qp_cap *cap = &init->cap;

	a->pd = cpu_to_le32(to_pdn(qp->ibqp.pd));
	a->sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	a->send_cq = cpu_to_le32(to_scq(init->send_cq)->cqn);
	a->recv_cq = cpu_to_le32(to_scq(init->recv_cq)->cqn);
	a->max_inline = cpu_to_le32(cap->max_inline_data);
	a->max_send_sge = cpu_to_le16(cap->max_send_sge);
	a->max_recv_sge = cpu_to_le16(cap->max_recv_sge);
	if (init->srq)
		a->srq = cpu_to_le32(to_ssrq(init->srq)->srqn);
	sirdma_queue_args(qp->sq, a->sq);
	if (qp->rq)
		sirdma_queue_args(qp->rq, a->rq);
}

/*
 * qp_make has the device make the QP and enters it in the event handlers' table. What fails
 * after CREATE_QP (a doorbell slot outside the BAR, the table) is unwound by DESTROY_QP.
 */
static int qp_make(struct sirdma_dev *sdev, struct sirdma_qp *qp,
		   const struct softirdma_create_qp_args *a)
{
	u32 res[SOFTIRDMA_CMD_RESULTS];
	bool usable;
	int err;

	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_QP, a, sizeof(*a), res, NULL, 0);
	if (err)
		return err;
	qp->ibqp.qp_num = res[SOFTIRDMA_RESULT_NUM];
	qp->slot = res[SOFTIRDMA_RESULT_SLOT];
	usable = sirdma_slot_ok(sdev, SOFTIRDMA_SQ_DOORBELL_BASE, qp->slot, SOFTIRDMA_MAX_QP_SLOTS);
	return sirdma_enter(sdev, &sdev->qps, SOFTIRDMA_OP_DESTROY_QP, qp->ibqp.qp_num, qp, usable);
}

/* The rings are mappable, and the process told where, before the device has them. */
int sirdma_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibqp->device);
	struct sirdma_qp *qp = to_sqp(ibqp);
	struct softirdma_create_qp_args a = {};
	struct qp_rings rings;
	int err, type;

	type = qp_type(sdev, init->qp_type, udata);
	if (type < 0)
		return type;
	err = qp_check(sdev, init, udata);
	if (err)
		return err;
	qp_grant(sdev, init, &rings);
	err = qp_alloc_rings(sdev, qp, &rings, init->srq);
	if (err)
		return err;
	spin_lock_init(&qp->sq_lock);
	spin_lock_init(&qp->rq_lock);
	if (udata) { /* a kernel QP's rings are written here (kverbs.c) */
		err = qp_expose(qp, udata);
		if (err)
			goto err_rings;
	}
	a.type = type;
	qp_args(qp, init, &a);
	err = qp_make(sdev, qp, &a);
	if (err)
		goto err_rings;
	qp->cap = init->cap;
	qp->sig_all = a.sig_all;
	qp->type = init->qp_type;
	return 0;

err_rings:
	qp_release_rings(qp);
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

	return sirdma_destroy_queued(sdev, &sdev->qps, SOFTIRDMA_OP_DESTROY_QP, ibqp->qp_num, qp,
				     qp->sq, qp->rq);
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
