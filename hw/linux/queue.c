// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Queues in rxe's user layout, allocated by the driver in coherent memory, described to the
 * device as page lists and mapped into a process the way rxe's mminfo replies describe
 * (rdma_user_mmap_entry). A queue's memory belongs to its mmap entry: it is freed in mmap_free,
 * once the device has let go of the queue (destroy) and the process has unmapped it.
 */
#include <linux/dma-mapping.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>

#include "softirdma.h"

/* The largest queue: one coherent allocation, and a one-level page list. */
#define SOFTIRDMA_QUEUE_MAX_BYTES (SOFTIRDMA_PL_ENTRIES_PER_PAGE * PAGE_SIZE)

struct sirdma_queue *sirdma_queue_alloc(struct sirdma_dev *sdev, u32 count, u32 elem)
{
	struct sirdma_queue *q;
	size_t bytes;
	u32 i;

	if (!is_power_of_2(count) || !is_power_of_2(elem) || count < 2)
		return ERR_PTR(-EINVAL);
	bytes = PAGE_ALIGN(SOFTIRDMA_QUEUE_HEADER_SIZE + (size_t)count * elem);
	if (bytes > SOFTIRDMA_QUEUE_MAX_BYTES)
		return ERR_PTR(-EINVAL);
	q = kzalloc(sizeof(*q), GFP_KERNEL);
	if (!q)
		return ERR_PTR(-ENOMEM);
	q->sdev = sdev;
	q->bytes = bytes;
	q->log_count = ilog2(count);
	q->log_elem = ilog2(elem);
	q->mem = dma_alloc_coherent(&sdev->pdev->dev, bytes, &q->dma, GFP_KERNEL);
	if (!q->mem)
		goto err_free;
	q->table = dma_alloc_coherent(&sdev->pdev->dev, PAGE_SIZE, &q->table_dma, GFP_KERNEL);
	if (!q->table)
		goto err_mem;
	for (i = 0; i < bytes / PAGE_SIZE; i++)
		q->table[i] = cpu_to_le64(q->dma + (u64)i * PAGE_SIZE);
	/* The header's element size and mask are the driver's to write, never the device's. */
	*(__le32 *)(q->mem + SOFTIRDMA_QH_LOG_ELEM_SIZE) = cpu_to_le32(q->log_elem);
	*(__le32 *)(q->mem + SOFTIRDMA_QH_INDEX_MASK) = cpu_to_le32(count - 1);
	return q;

err_mem:
	dma_free_coherent(&sdev->pdev->dev, bytes, q->mem, q->dma);
err_free:
	kfree(q);
	return ERR_PTR(-ENOMEM);
}

void sirdma_queue_free(struct sirdma_queue *q)
{
	struct device *dev = &q->sdev->pdev->dev;

	dma_free_coherent(dev, PAGE_SIZE, q->table, q->table_dma);
	dma_free_coherent(dev, q->bytes, q->mem, q->dma);
	kfree(q);
}

/* sirdma_queue_args describes the queue to the device (struct softirdma_queue_args). */
void sirdma_queue_args(struct sirdma_queue *q, u8 *args)
{
	struct softirdma_queue_args *qa = (void *)args;
	struct softirdma_page_list *pl = (void *)qa->pages;

	memset(qa, 0, sizeof(*qa));
	qa->log_count = q->log_count;
	qa->log_elem = q->log_elem;
	pl->addr = cpu_to_le64(q->table_dma);
	pl->pages = cpu_to_le32(q->bytes / PAGE_SIZE);
	pl->shift = PAGE_SHIFT;
	pl->levels = 1;
}

struct sirdma_mmap_entry {
	struct rdma_user_mmap_entry rdma;
	struct sirdma_queue *q;
};

/* sirdma_queue_expose makes the queue mappable by the process of uctx and says where, in an
 * rxe mminfo; the entry then owns the queue.
 */
int sirdma_queue_expose(struct ib_ucontext *uctx, struct sirdma_queue *q, struct mminfo *mi)
{
	struct sirdma_mmap_entry *e;
	int err;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->q = q;
	err = rdma_user_mmap_entry_insert(uctx, &e->rdma, q->bytes);
	if (err) {
		kfree(e);
		return err;
	}
	q->entry = &e->rdma;
	mi->offset = rdma_user_mmap_get_offset(&e->rdma);
	mi->size = q->bytes;
	return 0;
}

/* sirdma_queue_release drops the queue once the device no longer uses it: at once if no process
 * may map it, else when the last mapping goes (mmap_free).
 */
void sirdma_queue_release(struct sirdma_queue *q)
{
	if (!q)
		return;
	if (q->entry)
		rdma_user_mmap_entry_remove(q->entry);
	else
		sirdma_queue_free(q);
}

int sirdma_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *re = rdma_user_mmap_entry_get(uctx, vma);
	struct sirdma_mmap_entry *e;
	int err;

	if (!re)
		return -EINVAL;
	e = container_of(re, struct sirdma_mmap_entry, rdma);
	/* The offset named the entry; dma_mmap_coherent would take it for one into the queue. */
	vma->vm_pgoff = 0;
	err = dma_mmap_coherent(&e->q->sdev->pdev->dev, vma, e->q->mem, e->q->dma, e->q->bytes);
	rdma_user_mmap_entry_put(re);
	return err;
}

void sirdma_mmap_free(struct rdma_user_mmap_entry *re)
{
	struct sirdma_mmap_entry *e = container_of(re, struct sirdma_mmap_entry, rdma);

	sirdma_queue_free(e->q);
	kfree(e);
}
