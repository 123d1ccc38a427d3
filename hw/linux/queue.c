// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Queues in rxe's user layout, allocated by the driver in guest pages, described to the
 * device as page lists and mapped into a process the way rxe's mminfo replies describe
 * (rdma_user_mmap_entry). The pages are order-0 and mapped into the process with
 * vm_map_pages_zero, which takes a reference on each: a process that keeps a queue mapped after
 * it was destroyed (or after the device went away and its context was disassociated) keeps
 * pages the device no longer uses, never freed memory, and no VMA points into this module.
 */
#include <linux/dma-mapping.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>

#include "softirdma.h"

/* The largest queue: a two-level page list, 512 pages of 512 page addresses (1 GiB). */
#define PL_ENTRIES SOFTIRDMA_PL_ENTRIES_PER_PAGE
#define SOFTIRDMA_QUEUE_MAX_BYTES ((size_t)PL_ENTRIES * PL_ENTRIES * PAGE_SIZE)

static void queue_free_pages(struct sirdma_queue *q, u32 n)
{
	struct device *dev = &q->sdev->pdev->dev;

	while (n--) {
		dma_unmap_page(dev, q->addrs[n], PAGE_SIZE, DMA_BIDIRECTIONAL);
		put_page(q->pages[n]);
	}
}

/* The page list's pages: the root the device is given, and under a two-level root its leaves. */
static void queue_free_list(struct sirdma_queue *q)
{
	struct device *dev = &q->sdev->pdev->dev;
	u32 i;

	for (i = 0; i < q->nleaves; i++)
		if (q->leaves[i])
			dma_free_coherent(dev, PAGE_SIZE, q->leaves[i], le64_to_cpu(q->table[i]));
	kfree(q->leaves);
	if (q->table)
		dma_free_coherent(dev, PAGE_SIZE, q->table, q->table_dma);
}

static int queue_alloc_list(struct sirdma_queue *q, u32 n)
{
	struct device *dev = &q->sdev->pdev->dev;
	u32 i;

	q->table = dma_alloc_coherent(dev, PAGE_SIZE, &q->table_dma, GFP_KERNEL);
	if (!q->table)
		return -ENOMEM;
	if (n <= PL_ENTRIES) {
		q->levels = 1;
		for (i = 0; i < n; i++)
			q->table[i] = cpu_to_le64(q->addrs[i]);
		return 0;
	}
	q->levels = 2;
	q->leaves = kcalloc(DIV_ROUND_UP(n, PL_ENTRIES), sizeof(*q->leaves), GFP_KERNEL);
	if (!q->leaves)
		return -ENOMEM;
	q->nleaves = DIV_ROUND_UP(n, PL_ENTRIES);
	for (i = 0; i < q->nleaves; i++) {
		dma_addr_t a;

		q->leaves[i] = dma_alloc_coherent(dev, PAGE_SIZE, &a, GFP_KERNEL);
		if (!q->leaves[i])
			return -ENOMEM;
		q->table[i] = cpu_to_le64(a);
	}
	for (i = 0; i < n; i++)
		q->leaves[i / PL_ENTRIES][i % PL_ENTRIES] = cpu_to_le64(q->addrs[i]);
	return 0;
}

struct sirdma_queue *sirdma_queue_alloc(struct sirdma_dev *sdev, u32 count, u32 elem)
{
	struct device *dev = &sdev->pdev->dev;
	struct sirdma_queue *q;
	size_t bytes;
	u32 i, n;

	if (!is_power_of_2(count) || !is_power_of_2(elem) || count < 2 ||
	    ilog2(elem) > SOFTIRDMA_ELEM_MAX_LOG)
		return ERR_PTR(-EINVAL);
	bytes = PAGE_ALIGN(SOFTIRDMA_QUEUE_HEADER_SIZE + (size_t)count * elem);
	if (bytes > SOFTIRDMA_QUEUE_MAX_BYTES)
		return ERR_PTR(-EINVAL);
	n = bytes / PAGE_SIZE;
	q = kvzalloc(struct_size(q, pages, n), GFP_KERNEL);
	if (!q)
		return ERR_PTR(-ENOMEM);
	q->addrs = kvcalloc(n, sizeof(*q->addrs), GFP_KERNEL);
	if (!q->addrs)
		goto err_free;
	q->sdev = sdev;
	q->bytes = bytes;
	q->log_count = ilog2(count);
	q->log_elem = ilog2(elem);
	for (i = 0; i < n; i++) {
		dma_addr_t a;

		q->pages[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!q->pages[i])
			goto err_pages;
		a = dma_map_page(dev, q->pages[i], 0, PAGE_SIZE, DMA_BIDIRECTIONAL);
		/* The device and the process share the page for its whole life: a mapping that
		 * needs syncs (a bounce buffer, a cache that is not coherent) cannot be shared.
		 */
		if (dma_mapping_error(dev, a) || dma_need_sync(dev, a)) {
			if (!dma_mapping_error(dev, a))
				dma_unmap_page(dev, a, PAGE_SIZE, DMA_BIDIRECTIONAL);
			put_page(q->pages[i]);
			goto err_pages;
		}
		q->addrs[i] = a;
	}
	if (queue_alloc_list(q, n))
		goto err_list;
	q->mem = vmap(q->pages, n, VM_MAP, PAGE_KERNEL);
	if (!q->mem)
		goto err_list;
	/* The header's element size and mask are the driver's to write, never the device's. */
	*(__le32 *)(q->mem + SOFTIRDMA_QH_LOG_ELEM_SIZE) = cpu_to_le32(q->log_elem);
	*(__le32 *)(q->mem + SOFTIRDMA_QH_INDEX_MASK) = cpu_to_le32(count - 1);
	return q;

err_list:
	queue_free_list(q);
err_pages:
	queue_free_pages(q, i);
err_free:
	kvfree(q->addrs);
	kvfree(q);
	return ERR_PTR(-ENOMEM);
}

void sirdma_queue_free(struct sirdma_queue *q)
{
	vunmap(q->mem);
	queue_free_list(q);
	queue_free_pages(q, q->bytes / PAGE_SIZE);
	kvfree(q->addrs);
	kvfree(q);
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
	pl->levels = q->levels;
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

/* sirdma_queue_release drops the queue once the device no longer uses it, through its mmap
 * entry if a process may map it (mmap_free); pages a process still maps live on through the
 * references its mapping holds.
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
	/* The offset named the entry, not a page of the queue. */
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	err = vm_map_pages_zero(vma, e->q->pages, e->q->bytes / PAGE_SIZE);
	rdma_user_mmap_entry_put(re);
	return err;
}

void sirdma_mmap_free(struct rdma_user_mmap_entry *re)
{
	struct sirdma_mmap_entry *e = container_of(re, struct sirdma_mmap_entry, rdma);

	sirdma_queue_free(e->q);
	kfree(e);
}
