// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Event queues: the device's completion events (an armed CQ got a completion) and async events
 * (QP and CQ errors, SRQ limit, port state, device fatal) arrive as 16-byte entries in rings
 * the driver gives it, each ring with its MSI-X vector. The handlers hand them to the RDMA core:
 * a CQ's comp_handler, a QP's or CQ's event_handler, ib_dispatch_event for the port and device.
 */
#include <linux/interrupt.h>
#include <linux/unaligned.h>
#include <rdma/ib_verbs.h>

#include "softirdma.h"

#define EQ_LOG 8

static int eq_create(struct sirdma_dev *sdev, struct sirdma_eq *eq, u8 kind, u16 vector)
{
	u8 args[20] = {};
	struct softirdma_page_list *pl = (void *)args;
	u32 res[4];
	int err;

	eq->q = sirdma_queue_alloc(sdev, 1U << EQ_LOG, SOFTIRDMA_EQ_ENTRY_SIZE);
	if (IS_ERR(eq->q))
		return PTR_ERR(eq->q);
	eq->vector = vector;
	eq->cons = 0;
	pl->addr = cpu_to_le64(eq->q->table_dma);
	pl->pages = cpu_to_le32(eq->q->bytes / PAGE_SIZE);
	pl->shift = PAGE_SHIFT;
	pl->levels = eq->q->levels;
	args[16] = EQ_LOG;
	args[17] = kind;
	put_unaligned_le16(vector, args + 18);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_CREATE_EQ, args, sizeof(args), res, NULL, 0);
	if (err) {
		sirdma_queue_free(eq->q);
		eq->q = NULL;
		return err;
	}
	eq->eqn = res[0];
	return 0;
}

static void eq_destroy(struct sirdma_dev *sdev, struct sirdma_eq *eq)
{
	if (!eq->q)
		return;
	sirdma_num_cmd(sdev, SOFTIRDMA_OP_DESTROY_EQ, eq->eqn);
	sirdma_queue_free(eq->q);
	eq->q = NULL;
}

/* eq_next returns the next entry the device wrote, or NULL. */
static u8 *eq_next(struct sirdma_eq *eq)
{
	u32 mask = (1U << EQ_LOG) - 1;
	u32 prod = le32_to_cpu(READ_ONCE(*(__le32 *)(eq->q->mem + SOFTIRDMA_QH_PRODUCER))) & mask;

	if (eq->cons == prod)
		return NULL;
	dma_rmb(); /* the entry after the index that says it is there */
	return eq->q->mem + SOFTIRDMA_QUEUE_HEADER_SIZE + eq->cons * SOFTIRDMA_EQ_ENTRY_SIZE;
}

static void eq_consume(struct sirdma_eq *eq)
{
	eq->cons = (eq->cons + 1) & ((1U << EQ_LOG) - 1);
	/* The entry is read before the device may reuse its slot. */
	smp_store_release((__le32 *)(eq->q->mem + SOFTIRDMA_QH_CONSUMER), cpu_to_le32(eq->cons));
}

static irqreturn_t sirdma_comp_irq(int irq, void *data)
{
	struct sirdma_dev *sdev = data;
	struct sirdma_eq *eq = &sdev->comp_eq;
	u8 *e;

	while ((e = eq_next(eq))) {
		struct sirdma_cq *cq;

		rcu_read_lock();
		cq = xa_load(&sdev->cqs, get_unaligned_le32(e + SOFTIRDMA_EQ_NUM));
		if (cq && cq->ibcq.comp_handler)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
		rcu_read_unlock();
		eq_consume(eq);
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
	u8 *e;

	while ((e = eq_next(eq))) {
		/* Entry types are libibverbs' ibv_event_type, the kernel's ib_event_type. */
		enum ib_event_type type = e[SOFTIRDMA_EQ_TYPE];
		u32 num = get_unaligned_le32(e + SOFTIRDMA_EQ_NUM);
		struct ib_event ev = { .event = type };
		struct sirdma_srq *srq;
		struct sirdma_cq *cq;

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
			mod_delayed_work(system_long_wq, &sdev->health, 0);
			fallthrough;
		case IB_EVENT_PORT_ACTIVE:
		case IB_EVENT_PORT_ERR:
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
		eq_consume(eq);
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
	err = request_irq(pci_irq_vector(pdev, SOFTIRDMA_ASYNC_VECTOR), sirdma_async_irq, 0, "softirdma-async", sdev);
	if (err)
		return err;
	err = request_irq(pci_irq_vector(pdev, SOFTIRDMA_COMP_VECTOR), sirdma_comp_irq, 0, "softirdma-comp", sdev);
	if (err)
		goto err_async_irq;
	err = eq_create(sdev, &sdev->async_eq, SOFTIRDMA_EQ_ASYNC, SOFTIRDMA_ASYNC_VECTOR);
	if (err)
		goto err_comp_irq;
	err = eq_create(sdev, &sdev->comp_eq, SOFTIRDMA_EQ_COMPLETION, SOFTIRDMA_COMP_VECTOR);
	if (err)
		goto err_async_eq;
	return 0;

err_async_eq:
	eq_destroy(sdev, &sdev->async_eq);
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
	eq_destroy(sdev, &sdev->comp_eq);
	eq_destroy(sdev, &sdev->async_eq);
	xa_destroy(&sdev->cqs);
	xa_destroy(&sdev->qps);
	xa_destroy(&sdev->srqs);
}
