// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Kernel verbs: the data path of kernel CQs and QPs (the MAD layer's GSI QP and CQ, ib_cm's and
 * rdma_cm's, the kernel's RDMA users). The rings are the same rxe-layout rings a process maps;
 * here the driver is the provider: it writes send and receive WQEs, moves the producer indices
 * (store-release, after the WQE), rings the send queue's doorbell, and reads CQEs up to the
 * device's producer index (load-acquire) into ib_wc.
 */
#include <rdma/ib_verbs.h>

#include "softirdma.h"

static void *ring_elem(struct sirdma_queue *q, u32 i)
{
	return q->mem + SOFTIRDMA_QUEUE_HEADER_SIZE + ((size_t)i << q->log_elem);
}

static u32 ring_mask(struct sirdma_queue *q)
{
	return (1U << q->log_count) - 1;
}

static struct softirdma_rxe_queue_buf *ring_hdr(struct sirdma_queue *q)
{
	return q->mem;
}

/*
 * A CQE's flags are libibverbs' IBV_WC_*, which the kernel has no names for: its IB_WC_* number
 * WITH_INV differently.
 */
#define SIRDMA_UWC_GRH BIT(0) /* IBV_WC_GRH */
#define SIRDMA_UWC_WITH_IMM BIT(1) /* IBV_WC_WITH_IMM */
#define SIRDMA_UWC_WITH_INV BIT(3) /* IBV_WC_WITH_INV */

/* The CQE's IBV_WC_* flags as the kernel's IB_WC_*. */
static int wc_flags(u32 f)
{
	int out = 0;

	if (f & SIRDMA_UWC_GRH)
		out |= IB_WC_GRH;
	if (f & SIRDMA_UWC_WITH_IMM)
		out |= IB_WC_WITH_IMM;
	if (f & SIRDMA_UWC_WITH_INV)
		out |= IB_WC_WITH_INVALIDATE;
	return out;
}

/*
 * The CQE's IBV_WC_* opcode (and the function's REG_MR) as the kernel's IB_WC_*, which numbers
 * the opcodes after LOCAL_INV differently in each kernel. One it does not know is reported as a
 * send's: the status says whether it went well.
 */
static enum ib_wc_opcode wc_opcode(u32 op)
{
	switch (op) {
	case SOFTIRDMA_WR_OP_REG_MR:
		return IB_WC_REG_MR;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
	case IB_UVERBS_WC_FLUSH:
		return IB_WC_FLUSH;
	case IB_UVERBS_WC_ATOMIC_WRITE:
		return IB_WC_ATOMIC_WRITE;
#endif
	case IB_WC_RECV:
	case IB_WC_RECV_RDMA_WITH_IMM:
		return op;
	default: /* up to LOCAL_INV both number alike */
		return op <= IB_WC_LOCAL_INV ? op : IB_WC_SEND;
	}
}

/* The kernel's completion opcode for a flushed send WQE's IB_WR_* opcode. */
static enum ib_wc_opcode flushed_opcode(u32 op)
{
	switch (op) {
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
		return IB_WC_RDMA_WRITE;
	case IB_WR_RDMA_READ:
		return IB_WC_RDMA_READ;
	case IB_WR_ATOMIC_CMP_AND_SWP:
		return IB_WC_COMP_SWAP;
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		return IB_WC_FETCH_ADD;
	case IB_WR_LOCAL_INV:
		return IB_WC_LOCAL_INV;
	case IB_WR_REG_MR:
		return IB_WC_REG_MR;
	default:
		return IB_WC_SEND;
	}
}

/*
 * flush_ring completes the WQEs of one of a QP's rings from *from to its producer index as
 * IB_WC_WR_FLUSH_ERR, at most n of them. The first call starts where the function left off:
 * the send queue's consumer index (it moves it as it retires a WQE, before the completion), the
 * receive queue's next completion (rq_comp).
 */
static int flush_ring(struct sirdma_qp *qp, bool send, struct ib_wc *wc, int n)
{
	struct sirdma_queue *q = send ? qp->sq : qp->rq;
	struct softirdma_rxe_queue_buf *h = ring_hdr(q);
	u32 mask = ring_mask(q), prod, *from = send ? &qp->sq_flush : &qp->rq_flush;
	bool *started = send ? &qp->sq_flushing : &qp->rq_flushing;
	int got = 0;

	if (!*started) {
		*from = send ? le32_to_cpu(READ_ONCE(h->consumer_index)) & mask : qp->rq_comp;
		*started = true;
	}
	prod = le32_to_cpu(smp_load_acquire(&h->producer_index)) & mask;
	for (; got < n && *from != prod; got++, *from = (*from + 1) & mask) {
		struct ib_wc *w = &wc[got];

		memset(w, 0, sizeof(*w));
		if (send) {
			const struct softirdma_rxe_send_wqe *e = ring_elem(q, *from);

			w->wr_id = le64_to_cpu(e->wr_id);
			w->opcode = flushed_opcode(le32_to_cpu(e->opcode));
		} else {
			const struct softirdma_rxe_recv_wqe *e = ring_elem(q, *from);

			w->wr_id = le64_to_cpu(e->wr_id);
			w->opcode = IB_WC_RECV;
		}
		w->status = IB_WC_WR_FLUSH_ERR;
		w->qp = &qp->ibqp;
		w->port_num = 1;
	}
	return got;
}

/*
 * flush_cq: a failed function completes nothing more, yet the kernel's users wait for what
 * they posted (ib_drain_qp, a ULP tearing down its queues). As a NIC's driver does when its
 * device is lost, the driver completes every WQE still in the rings of the kernel QPs on this
 * CQ as flushed.
 */
static int flush_cq(struct sirdma_dev *sdev, struct ib_cq *ibcq, struct ib_wc *wc, int n)
{
	struct sirdma_qp *qp;
	unsigned long i;
	int got = 0;

	rcu_read_lock();
	xa_for_each(&sdev->qps, i, qp) {
		if (got == n)
			break;
		if (qp->ibqp.uobject)
			continue;
		if (qp->ibqp.send_cq == ibcq)
			got += flush_ring(qp, true, wc + got, n - got);
		if (qp->rq && qp->ibqp.recv_cq == ibcq && got < n)
			got += flush_ring(qp, false, wc + got, n - got);
	}
	rcu_read_unlock();
	return got;
}

/*
 * sirdma_kick_cqs calls every kernel CQ's completion handler, so that its user polls the
 * flushed completions of a failed function (IB_POLL_DIRECT CQs are polled by their users).
 */
void sirdma_kick_cqs(struct sirdma_dev *sdev)
{
	struct sirdma_cq *cq;
	unsigned long i;

	rcu_read_lock();
	xa_for_each(&sdev->cqs, i, cq) {
		if (!cq->ibcq.uobject && cq->ibcq.comp_handler && cq->ibcq.poll_ctx != IB_POLL_DIRECT)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	}
	rcu_read_unlock();
}

void sirdma_kick_cqs_work(struct work_struct *work)
{
	sirdma_kick_cqs(container_of(work, struct sirdma_dev, kick_cqs));
}

/*
 * sirdma_poll_cq reads a kernel CQ's completions. A CQE naming a QP the driver does not have
 * (the function's mistake) is consumed and not reported: the core would dereference its QP.
 */
int sirdma_poll_cq(struct ib_cq *ibcq, int n, struct ib_wc *wc)
{
	struct sirdma_cq *cq = to_scq(ibcq);
	struct sirdma_dev *sdev = to_sdev(ibcq->device);
	struct sirdma_queue *q = cq->q;
	struct softirdma_rxe_queue_buf *h = ring_hdr(q);
	u32 mask = ring_mask(q), cons, prod;
	unsigned long flags;
	int got = 0;

	if (ibcq->uobject)
		return 0; /* a process polls its own ring */
	spin_lock_irqsave(&cq->poll_lock, flags);
	cons = le32_to_cpu(READ_ONCE(h->consumer_index)) & mask;
	prod = le32_to_cpu(smp_load_acquire(&h->producer_index)) & mask;
	while (got < n && cons != prod) {
		const struct softirdma_ib_uverbs_wc *e = ring_elem(q, cons);
		struct ib_wc *w = &wc[got];
		struct sirdma_qp *qp = xa_load(&sdev->qps, le32_to_cpu(e->qp_num));

		cons = (cons + 1) & mask;
		if (!qp)
			continue;
		memset(w, 0, sizeof(*w));
		w->wr_id = le64_to_cpu(e->wr_id);
		w->status = le32_to_cpu(e->status);
		w->opcode = wc_opcode(le32_to_cpu(e->opcode));
		w->vendor_err = le32_to_cpu(e->vendor_err);
		w->byte_len = le32_to_cpu(e->byte_len);
		w->qp = &qp->ibqp;
		w->src_qp = le32_to_cpu(e->src_qp) & IB_QPN_MASK;
		w->wc_flags = wc_flags(le32_to_cpu(e->wc_flags));
		if (w->wc_flags & IB_WC_WITH_IMM)
			memcpy(&w->ex.imm_data, &e->ex, sizeof(w->ex.imm_data)); /* network order */
		else
			w->ex.invalidate_rkey = le32_to_cpu(e->ex);
		if ((w->opcode & IB_WC_RECV) && qp->rq)
			qp->rq_comp = (qp->rq_comp + 1) & ring_mask(qp->rq);
		w->pkey_index = le16_to_cpu(e->pkey_index);
		w->port_num = 1;
		if (e->network_hdr_type == RDMA_NETWORK_IPV4 || e->network_hdr_type == RDMA_NETWORK_IPV6) {
			w->network_hdr_type = e->network_hdr_type;
			w->wc_flags |= IB_WC_WITH_NETWORK_HDR_TYPE;
		}
		got++;
	}
	smp_store_release(&h->consumer_index, cpu_to_le32(cons));
	if (got < n && READ_ONCE(sdev->failed))
		got += flush_cq(sdev, ibcq, wc + got, n - got);
	spin_unlock_irqrestore(&cq->poll_lock, flags);
	return got;
}

/* sirdma_kqp_reset follows the function's reset of a QP's rings to empty. */
void sirdma_kqp_reset(struct sirdma_qp *qp)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->sq_lock, flags);
	qp->sq_prod = 0;
	spin_unlock_irqrestore(&qp->sq_lock, flags);
	spin_lock_irqsave(&qp->rq_lock, flags);
	qp->rq_prod = 0;
	qp->rq_comp = 0;
	spin_unlock_irqrestore(&qp->rq_lock, flags);
}

/* put_sges writes a work request's SGEs after its WQE, and returns their total length. */
static u32 put_sges(struct softirdma_rxe_sge *s, const struct ib_sge *sg, int n)
{
	u32 total = 0;
	int i;

	for (i = 0; i < n; i++) {
		s[i].addr = cpu_to_le64(sg[i].addr);
		s[i].length = cpu_to_le32(sg[i].length);
		s[i].lkey = cpu_to_le32(sg[i].lkey);
		total += sg[i].length;
	}
	return total;
}

static int write_send(struct sirdma_qp *qp, struct softirdma_rxe_send_wqe *w,
		      const struct ib_send_wr *wr)
{
	u32 flags = wr->send_flags, total = 0;
	void *payload = w + 1;
	int i;

	memset(w, 0, sizeof(*w));
	w->wr_id = cpu_to_le64(wr->wr_id);
	w->opcode = cpu_to_le32(wr->opcode);
	if (qp->sig_all)
		flags |= IB_SEND_SIGNALED;
	w->send_flags = cpu_to_le32(flags);
	switch (wr->opcode) {
	case IB_WR_SEND_WITH_IMM:
	case IB_WR_RDMA_WRITE_WITH_IMM:
		memcpy(&w->ex, &wr->ex.imm_data, sizeof(w->ex)); /* network order */
		break;
	case IB_WR_SEND_WITH_INV:
	case IB_WR_LOCAL_INV:
		w->ex = cpu_to_le32(wr->ex.invalidate_rkey);
		break;
	case IB_WR_REG_MR:
		return sirdma_put_reg(w, reg_wr(wr));
	default:
		break;
	}
	switch (wr->opcode) {
	case IB_WR_SEND:
	case IB_WR_SEND_WITH_IMM:
	case IB_WR_SEND_WITH_INV:
		if (qp->type == IB_QPT_UD || qp->type == IB_QPT_GSI) {
			const struct ib_ud_wr *ud = ud_wr(wr);
			u32 num = to_sah(ud->ah)->num;

			if (!num)
				return -EINVAL;
			w->ud.remote_qpn = cpu_to_le32(ud->remote_qpn);
			w->ud.remote_qkey = cpu_to_le32(ud->remote_qkey);
			w->ud.pkey_index = cpu_to_le16(ud->pkey_index);
			w->ud.ah_num = cpu_to_le32(num);
		}
		break;
	case IB_WR_RDMA_WRITE:
	case IB_WR_RDMA_WRITE_WITH_IMM:
	case IB_WR_RDMA_READ:
		w->rdma.remote_addr = cpu_to_le64(rdma_wr(wr)->remote_addr);
		w->rdma.rkey = cpu_to_le32(rdma_wr(wr)->rkey);
		break;
	case IB_WR_ATOMIC_CMP_AND_SWP:
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		w->atomic.atomic_remote_addr = cpu_to_le64(atomic_wr(wr)->remote_addr);
		w->atomic.compare_add = cpu_to_le64(atomic_wr(wr)->compare_add);
		w->atomic.swap = cpu_to_le64(atomic_wr(wr)->swap);
		w->atomic.atomic_rkey = cpu_to_le32(atomic_wr(wr)->rkey);
		break;
	case IB_WR_LOCAL_INV:
		return 0; /* the key in ex is all it has */
	default:
		return -EOPNOTSUPP;
	}
	if (flags & IB_SEND_INLINE) {
		for (i = 0; i < wr->num_sge; i++) {
			if (total + wr->sg_list[i].length > qp->cap.max_inline_data)
				return -EINVAL;
			memcpy(payload + total, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			total += wr->sg_list[i].length;
		}
	} else {
		if (wr->num_sge > qp->cap.max_send_sge)
			return -EINVAL;
		total = put_sges(payload, wr->sg_list, wr->num_sge);
		w->dma_num_sge = cpu_to_le32(wr->num_sge);
	}
	w->dma_length = cpu_to_le32(total);
	w->dma_resid = cpu_to_le32(total);
	return 0;
}

int sirdma_kpost_send(struct sirdma_qp *qp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad)
{
	struct sirdma_dev *sdev = to_sdev(qp->ibqp.device);
	struct sirdma_queue *q = qp->sq;
	struct softirdma_rxe_queue_buf *h = ring_hdr(q);
	u32 mask = ring_mask(q), cons;
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(&qp->sq_lock, flags);
	cons = le32_to_cpu(smp_load_acquire(&h->consumer_index)) & mask;
	for (; wr; wr = wr->next) {
		if (((qp->sq_prod + 1) & mask) == cons) {
			err = -ENOMEM;
			break;
		}
		err = write_send(qp, ring_elem(q, qp->sq_prod), wr);
		if (err)
			break;
		qp->sq_prod = (qp->sq_prod + 1) & mask;
	}
	smp_store_release(&h->producer_index, cpu_to_le32(qp->sq_prod));
	if (READ_ONCE(sdev->failed))
		queue_work(system_wq, &sdev->kick_cqs); /* poll_cq completes them flushed */
	else
		writel(0, sdev->db + SOFTIRDMA_SQ_DOORBELL_BASE +
			  SOFTIRDMA_DOORBELL_STRIDE * qp->slot);
	spin_unlock_irqrestore(&qp->sq_lock, flags);
	if (err)
		*bad = wr;
	return err;
}

/*
 * sirdma_put_recvs writes receive WQEs into a ring whose producer index is *prod (the caller
 * holds the lock that guards it), then publishes the index. On an error *bad is the request
 * that was not posted; the ones before it are.
 */
int sirdma_put_recvs(struct sirdma_queue *q, u32 *prod, u32 max_sge, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad)
{
	struct softirdma_rxe_queue_buf *h = ring_hdr(q);
	u32 mask = ring_mask(q), cons;
	int err = 0;

	cons = le32_to_cpu(smp_load_acquire(&h->consumer_index)) & mask;
	for (; wr; wr = wr->next) {
		struct softirdma_rxe_recv_wqe *w = ring_elem(q, *prod);
		u32 total;

		if (((*prod + 1) & mask) == cons) {
			err = -ENOMEM;
			break;
		}
		if (wr->num_sge > max_sge) {
			err = -EINVAL;
			break;
		}
		memset(w, 0, sizeof(*w));
		w->wr_id = cpu_to_le64(wr->wr_id);
		total = put_sges((void *)(w + 1), wr->sg_list, wr->num_sge);
		w->dma_length = cpu_to_le32(total);
		w->dma_num_sge = cpu_to_le32(wr->num_sge);
		*prod = (*prod + 1) & mask;
	}
	smp_store_release(&h->producer_index, cpu_to_le32(*prod));
	if (err)
		*bad = wr;
	return err;
}

int sirdma_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad)
{
	struct sirdma_qp *qp = to_sqp(ibqp);
	unsigned long flags;
	int err;

	if (ibqp->uobject || !qp->rq) { /* a process posts in its ring; a QP on an SRQ has none */
		*bad = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&qp->rq_lock, flags);
	err = sirdma_put_recvs(qp->rq, &qp->rq_prod, qp->cap.max_recv_sge, wr, bad);
	/* The receive queue has no doorbell: a QP in ERR flushes what is posted to it when its
	 * send queue's rings (ib_drain_rq waits for that).
	 */
	if (READ_ONCE(to_sdev(ibqp->device)->failed))
		queue_work(system_wq, &to_sdev(ibqp->device)->kick_cqs);
	else if (READ_ONCE(qp->state) == IB_QPS_ERR)
		writel(0, to_sdev(ibqp->device)->db + SOFTIRDMA_SQ_DOORBELL_BASE +
			  SOFTIRDMA_DOORBELL_STRIDE * qp->slot);
	spin_unlock_irqrestore(&qp->rq_lock, flags);
	return err;
}
