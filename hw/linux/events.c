// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Event queues: the device's completion events (an armed CQ got a completion) and async events
 * (QP and CQ errors, SRQ limit, port state, device fatal) arrive as 16-byte entries in rings
 * the driver gives it, each ring with its MSI-X vector. The handlers hand them to the RDMA core:
 * a CQ's comp_handler, a QP's or CQ's event_handler, ib_dispatch_event for the port and device.
 */
#include <linux/interrupt.h>
#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

#include "softirdma.h"

/* The async EQ's entries; events past them are dropped (and counted) by the device. */
#define ASYNC_EQ_LOG 8
/*
 * The completion EQ has room for an event of every CQ the device may have, and the device keeps
 * at most one unread event of a CQ in it (an arm or a completion while the CQ's last event is
 * unread adds none), so however often a process arms its CQ the EQ does not fill. Should it
 * fill all the same, the device drops events and counts them; the next entry's running count
 * shows the gap, and the handler wakes every CQ (sirdma_comp_irq).
 */
#define COMP_EQ_MAX_LOG 16

int sirdma_eq_create(struct sirdma_dev *sdev, struct sirdma_eq *eq, u8 kind, u16 vector, u32 log,
		     u32 entry_size)
{
	struct softirdma_create_eq_args a = {};
	struct softirdma_page_list *pl = (void *)a.pages;
	u32 res[SOFTIRDMA_CMD_RESULTS];
	struct sirdma_queue *q;
	int err;

	q = sirdma_queue_alloc(sdev, 1U << log, entry_size);
	if (IS_ERR(q))
		return PTR_ERR(q);
	eq->entry_size = entry_size;
	eq->vector = vector;
	eq->cons = 0;
	eq->seq = 0;
	eq->log = log;
	WRITE_ONCE(eq->q, q); /* its handler reads nothing before this */
	pl->addr = cpu_to_le64(q->table_dma);
	pl->pages = cpu_to_le32(q->bytes / PAGE_SIZE);
	pl->shift = PAGE_SHIFT;
	pl->levels = q->levels;
	a.log_count = log;
	a.kind = kind;
	a.vector = cpu_to_le16(vector);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_EQ, &a, sizeof(a), res, NULL, 0);
	if (err) {
		WRITE_ONCE(eq->q, NULL);
		synchronize_irq(pci_irq_vector(sdev->pdev, vector));
		sirdma_queue_free(q);
		return err;
	}
	eq->eqn = res[SOFTIRDMA_RESULT_NUM];
	return 0;
}

/* Called with the EQ's interrupt freed. */
void sirdma_eq_destroy(struct sirdma_dev *sdev, struct sirdma_eq *eq)
{
	struct softirdma_num_args a = { .num = cpu_to_le32(eq->eqn) };

	if (!eq->q)
		return;
	sirdma_let_go(sdev, SOFTIRDMA_OP_DESTROY_EQ, &a, sizeof(a), NULL);
	sirdma_queue_free(eq->q);
	eq->q = NULL;
}

/*
 * sirdma_eq_next returns the next entry the device wrote, or NULL; *lost says how many the device
 * dropped before it (its queue was full).
 */
u8 *sirdma_eq_next(struct sirdma_eq *eq, u64 *lost)
{
	struct sirdma_queue *q = READ_ONCE(eq->q);
	u32 mask = (1U << eq->log) - 1;
	u32 prod;
	u64 seq;
	u8 *e;

	if (!q) /* an interrupt before the queue is there */
		return NULL;
	prod = le32_to_cpu(READ_ONCE(*(__le32 *)(q->mem + SOFTIRDMA_QH_PRODUCER))) & mask;
	if (eq->cons == prod)
		return NULL;
	dma_rmb(); /* the entry after the index that says it is there */
	e = q->mem + SOFTIRDMA_QUEUE_HEADER_SIZE + eq->cons * eq->entry_size;
	seq = get_unaligned_le64(e + SOFTIRDMA_EQ_SEQ);
	*lost = seq > eq->seq + 1 ? seq - eq->seq - 1 : 0;
	eq->seq = seq;
	return e;
}

void sirdma_eq_consume(struct sirdma_eq *eq)
{
	eq->cons = (eq->cons + 1) & ((1U << eq->log) - 1);
	/* The entry is read before the device may reuse its slot. */
	smp_store_release((__le32 *)(eq->q->mem + SOFTIRDMA_QH_CONSUMER), cpu_to_le32(eq->cons));
}

static void cq_event(struct sirdma_cq *cq)
{
	if (cq && cq->ibcq.comp_handler)
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
}

static irqreturn_t sirdma_comp_irq(int irq, void *data)
{
	struct sirdma_dev *sdev = data;
	struct sirdma_eq *eq = &sdev->comp_eq;
	unsigned long num;
	u64 lost;
	u8 *e;

	while ((e = sirdma_eq_next(eq, &lost))) {
		u32 cqn = get_unaligned_le32(e + SOFTIRDMA_EQ_NUM);
		struct sirdma_cq *cq;

		/*
		 * The entry is given back before anyone hears of it: the device keeps one unread
		 * event of a CQ in the EQ, and an arm or completion the woken process causes must
		 * find this one read, or it adds none and the process sleeps.
		 */
		sirdma_eq_consume(eq);
		rcu_read_lock();
		if (lost) {
			/* Which CQs' events were dropped is unknown: every CQ hears one (a
			 * spurious completion event is allowed; a lost one leaves a waiter asleep).
			 */
			dev_warn_ratelimited(&sdev->pdev->dev, "%llu completion events lost\n",
					     lost);
			xa_for_each(&sdev->cqs, num, cq)
				cq_event(cq);
		}
		cq_event(xa_load(&sdev->cqs, cqn));
		rcu_read_unlock();
	}
	return IRQ_HANDLED;
}

static void async_qp(struct sirdma_dev *sdev, u32 qpn, enum ib_event_type type)
{
	struct sirdma_qp *qp = xa_load(&sdev->qps, qpn);
	struct ib_event ev = { .event = type };

	if (!qp || !qp->ibqp.event_handler)
		return;
	ev.device = qp->ibqp.device;
	ev.element.qp = &qp->ibqp;
	qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
}

static irqreturn_t sirdma_async_irq(int irq, void *data)
{
	struct sirdma_dev *sdev = data;
	struct sirdma_eq *eq = &sdev->async_eq;
	u64 lost;
	u8 *e;

	while ((e = sirdma_eq_next(eq, &lost))) {
		/* Entry types are libibverbs' ibv_event_type, the kernel's ib_event_type. */
		enum ib_event_type type = e[SOFTIRDMA_EQ_TYPE];
		u32 num = get_unaligned_le32(e + SOFTIRDMA_EQ_NUM);
		struct ib_event ev = { .event = type };
		struct sirdma_srq *srq;
		struct sirdma_cq *cq;

		if (lost)
			dev_warn_ratelimited(&sdev->pdev->dev, "%llu async events lost\n", lost);
		rcu_read_lock();
		switch (type) {
		case IB_EVENT_QP_FATAL:
		case IB_EVENT_QP_REQ_ERR:
		case IB_EVENT_QP_ACCESS_ERR:
		case IB_EVENT_COMM_EST:
		case IB_EVENT_SQ_DRAINED:
		case IB_EVENT_QP_LAST_WQE_REACHED:
			async_qp(sdev, num, type);
			break;
		case IB_EVENT_CQ_ERR:
			cq = xa_load(&sdev->cqs, num);
			if (cq && cq->ibcq.event_handler) {
				ev.device = cq->ibcq.device;
				ev.element.cq = &cq->ibcq;
				cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
			}
			break;
		case IB_EVENT_DEVICE_FATAL:
			sirdma_work_queue(&sdev->health_gate, &sdev->health, 0);
			fallthrough;
		case IB_EVENT_PORT_ACTIVE:
		case IB_EVENT_PORT_ERR:
			/* The Ethernet function's carrier is the port's. */
			if (type == IB_EVENT_PORT_ACTIVE && netif_running(sdev->netdev) &&
			    READ_ONCE(sdev->rings_up) && !READ_ONCE(sdev->failed))
				netif_carrier_on(sdev->netdev);
			else if (type != IB_EVENT_PORT_ACTIVE)
				netif_carrier_off(sdev->netdev);
			ev.device = READ_ONCE(sdev->ib);
			if (ev.device) {
				ev.element.port_num = 1;
				ib_dispatch_event(&ev);
			}
			break;
		case IB_EVENT_SRQ_ERR:
		case IB_EVENT_SRQ_LIMIT_REACHED:
			srq = xa_load(&sdev->srqs, num);
			if (srq && srq->ibsrq.event_handler) {
				ev.device = srq->ibsrq.device;
				ev.element.srq = &srq->ibsrq;
				srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
			}
			break;
		default:
			break;
		}
		rcu_read_unlock();
		sirdma_eq_consume(eq);
	}
	return IRQ_HANDLED;
}

int sirdma_events_init(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;
	int err;

	xa_init(&sdev->cqs);
	xa_init(&sdev->qps);
	xa_init(&sdev->srqs);
	BUILD_BUG_ON(ASYNC_EQ_LOG > SOFTIRDMA_EQ_MAX_LOG || COMP_EQ_MAX_LOG > SOFTIRDMA_EQ_MAX_LOG);
	err = request_irq(pci_irq_vector(pdev, SOFTIRDMA_ASYNC_VECTOR), sirdma_async_irq, 0,
			  "softirdma-async", sdev);
	if (err)
		return err;
	err = request_irq(pci_irq_vector(pdev, SOFTIRDMA_COMP_VECTOR), sirdma_comp_irq, 0,
			  "softirdma-comp", sdev);
	if (err)
		goto err_async_irq;
	err = sirdma_eq_create(sdev, &sdev->async_eq, SOFTIRDMA_EQ_ASYNC, SOFTIRDMA_ASYNC_VECTOR,
			       ASYNC_EQ_LOG, SOFTIRDMA_EQ_ENTRY_SIZE);
	if (err)
		goto err_comp_irq;
	/* A slot for every CQ, and the one that always stays empty. */
	err = sirdma_eq_create(sdev, &sdev->comp_eq, SOFTIRDMA_EQ_COMPLETION, SOFTIRDMA_COMP_VECTOR,
			       clamp_t(u32, order_base_2((u64)sdev->caps.max_cq + 1), 1, COMP_EQ_MAX_LOG),
			       SOFTIRDMA_EQ_ENTRY_SIZE);
	if (err)
		goto err_async_eq;
	return 0;

err_async_eq:
	sirdma_eq_destroy(sdev, &sdev->async_eq);
err_comp_irq:
	free_irq(pci_irq_vector(pdev, SOFTIRDMA_COMP_VECTOR), sdev);
err_async_irq:
	free_irq(pci_irq_vector(pdev, SOFTIRDMA_ASYNC_VECTOR), sdev);
	return err;
}

void sirdma_events_fini(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;

	free_irq(pci_irq_vector(pdev, SOFTIRDMA_COMP_VECTOR), sdev);
	free_irq(pci_irq_vector(pdev, SOFTIRDMA_ASYNC_VECTOR), sdev);
	sirdma_eq_destroy(sdev, &sdev->comp_eq);
	sirdma_eq_destroy(sdev, &sdev->async_eq);
	xa_destroy(&sdev->cqs);
	xa_destroy(&sdev->qps);
	xa_destroy(&sdev->srqs);
}
