// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * On-demand paging (ABI 1.3, CAPS bit 10), as a NIC with ODP does it: a user MR registered with
 * IB_ACCESS_ON_DEMAND pins nothing. The function has no pages for it until it asks: work that
 * reaches a page it lacks stops there and the function writes a page-fault entry. The driver
 * faults the pages in through the core's ib_umem_odp (hmm_range_fault), gives their DMA
 * addresses with MAP_PAGES and, when the entry says a send queue waits, RESUME_QP. The MR's
 * interval notifier is the other direction: before the kernel moves or frees a page of the MR,
 * UNMAP_PAGES takes it from the function, which answers only once no access to it is under way.
 *
 * Locking: odp_lock serializes fault handling (and prefetch) against deregistration, which
 * takes an MR out of odp_mrs under it; an MR's umem_mutex, taken by the core's fault path and by
 * the invalidation, makes a page's mapping on the function and in the core change together. The
 * invalidation never takes odp_lock: faulting a page may wait for an invalidation.
 */
#include <linux/hmm.h>
#include <linux/interrupt.h>
#include <linux/workqueue.h>
#include <rdma/ib_umem_odp.h>
#include <rdma/ib_verbs.h>

#include "softirdma.h"

#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)

/* The page-fault EQ's entries: faults past them are dropped and counted by the function. */
#define PF_EQ_LOG 8
/* Pages of one MAP_PAGES: one page of page addresses. */
#define PF_CHUNK SOFTIRDMA_PL_ENTRIES_PER_PAGE

static struct sirdma_mr *odp_mr(struct sirdma_dev *sdev, u32 stag)
{
	struct sirdma_mr *mr = xa_load(&sdev->odp_mrs, stag >> 8);

	return mr && mr->ibmr.lkey == stag ? mr : NULL;
}

/* The user address of an MR's wire address: they differ by a whole number of pages. */
static u64 odp_user(struct sirdma_mr *mr, u64 wire)
{
	return wire + mr->odp_shift;
}

/*
 * odp_map faults in (or, without fault, takes what is present of) the user pages behind wire
 * addresses [va, va+len) of the MR and gives them to the function, a page list of PF_CHUNK
 * pages at a time. Called with odp_lock held.
 */
static int odp_map(struct sirdma_dev *sdev, struct sirdma_mr *mr, u64 va, u64 len, bool fault)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);
	u64 start = ib_umem_start(odp), end = ib_umem_end(odp);
	u64 access = mr->umem->writable ? SIRDMA_ODP_WRITE : SIRDMA_ODP_READ;
	u64 user, last;
	int err = 0;

	/* The pages of the range, as far as they lie in the umem. */
	user = max(round_down(odp_user(mr, va), PAGE_SIZE), start);
	last = min(round_up(odp_user(mr, va) + len, PAGE_SIZE), end);
	while (user < last) {
		u64 n = min_t(u64, last - user, PF_CHUNK * PAGE_SIZE);
		struct softirdma_map_pages_args a = {};
		struct softirdma_page_list *pl = (void *)a.pages;
		size_t first = (user - start) >> PAGE_SHIFT, i, got = 0;
		int np;

		np = ib_umem_odp_map_dma_and_lock(odp, user, n, access, fault);
		if (np < 0)
			return np;
		/*
		 * Under umem_mutex: an invalidation of these pages waits, and its UNMAP_PAGES
		 * follows this MAP_PAGES.
		 */
		for (i = 0; i < n >> PAGE_SHIFT; i++) {
			dma_addr_t dma = sirdma_odp_dma(odp, first + i);

			if (dma == DMA_MAPPING_ERROR) {
				/* A page not present ends the run given; asked to fault it in, an error. */
				if (fault)
					err = -EFAULT;
				break;
			}
			sdev->pf_table[i] = cpu_to_le64(dma);
			got++;
		}
		if (got) {
			a.stag = cpu_to_le32(mr->ibmr.lkey);
			a.va = cpu_to_le64(user - mr->odp_shift);
			pl->addr = cpu_to_le64(sdev->pf_table_dma);
			pl->pages = cpu_to_le32(got);
			pl->shift = PAGE_SHIFT;
			pl->levels = 1;
			err = err ?: sirdma_cmd(sdev, SOFTIRDMA_OP_MAP_PAGES, &a, sizeof(a), NULL, NULL, 0);
		}
		mutex_unlock(&odp->umem_mutex);
		if (err || got < n >> PAGE_SHIFT)
			return err;
		user += n;
	}
	return 0;
}

static void odp_resume(struct sirdma_dev *sdev, u32 qpn, u32 status)
{
	struct softirdma_resume_qp_args a = { .qpn = cpu_to_le32(qpn), .status = cpu_to_le32(status) };

	sirdma_cmd(sdev, SOFTIRDMA_OP_RESUME_QP, &a, sizeof(a), NULL, NULL, 0);
}

/* odp_resume_all answers for faults whose entries the full EQ dropped: every held QP goes on. */
static void odp_resume_all(struct sirdma_dev *sdev)
{
	struct sirdma_qp *qp;
	unsigned long qpn;

	xa_for_each(&sdev->qps, qpn, qp)
		odp_resume(sdev, qpn, 0); /* EINVAL for a QP nothing holds */
}

static void sirdma_pf_work(struct work_struct *work)
{
	struct sirdma_dev *sdev = container_of(work, struct sirdma_dev, pf_work);
	u64 lost;
	u8 *e;

	while ((e = sirdma_eq_next(&sdev->pf_eq, &lost))) {
		u8 flags = e[SOFTIRDMA_FAULT_FLAGS];
		u32 qpn = get_unaligned_le32(e + SOFTIRDMA_FAULT_QPN);
		u64 va = get_unaligned_le64(e + SOFTIRDMA_FAULT_VA);
		u32 stag = get_unaligned_le32(e + SOFTIRDMA_FAULT_STAG);
		u64 len = (u64)get_unaligned_le32(e + SOFTIRDMA_FAULT_PAGES) << PAGE_SHIFT;
		struct sirdma_mr *mr;
		int err = -EFAULT;

		sirdma_eq_consume(&sdev->pf_eq);
		if (READ_ONCE(sdev->failed))
			return;
		mutex_lock(&sdev->odp_lock);
		if (lost) {
			dev_warn_ratelimited(&sdev->pdev->dev, "%llu page faults lost\n", lost);
			odp_resume_all(sdev);
		}
		mr = odp_mr(sdev, stag);
		if (mr)
			err = odp_map(sdev, mr, va, len, true);
		mutex_unlock(&sdev->odp_lock);
		if (flags & SOFTIRDMA_FAULT_HELD)
			/* A page that cannot be had fails the work request, as on a NIC. */
			odp_resume(sdev, qpn, err ? IB_WC_LOC_PROT_ERR : 0);
		else if (err)
			dev_dbg_ratelimited(&sdev->pdev->dev,
					    "page fault of QP 0x%x at 0x%llx not resolved: %d\n",
					    qpn, va, err);
	}
}

static irqreturn_t sirdma_pf_irq(int irq, void *data)
{
	struct sirdma_dev *sdev = data;

	queue_work(sdev->odp_wq, &sdev->pf_work);
	return IRQ_HANDLED;
}

int sirdma_odp_init(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;
	int err;

	xa_init(&sdev->odp_mrs);
	mutex_init(&sdev->odp_lock);
	INIT_WORK(&sdev->pf_work, sirdma_pf_work);
	if (!(sdev->caps.caps & SOFTIRDMA_CAP_ON_DEMAND) || sdev->nvec <= SOFTIRDMA_PF_VECTOR)
		return 0; /* no ODP: MRs are pinned */
	sdev->pf_table = dma_alloc_coherent(&pdev->dev, PAGE_SIZE, &sdev->pf_table_dma, GFP_KERNEL);
	if (!sdev->pf_table)
		return -ENOMEM;
	sdev->odp_wq = alloc_ordered_workqueue("softirdma-pf", WQ_MEM_RECLAIM);
	if (!sdev->odp_wq) {
		err = -ENOMEM;
		goto err_table;
	}
	err = request_irq(pci_irq_vector(pdev, SOFTIRDMA_PF_VECTOR), sirdma_pf_irq, 0,
			  "softirdma-pf", sdev);
	if (err)
		goto err_wq;
	err = sirdma_eq_create(sdev, &sdev->pf_eq, SOFTIRDMA_EQ_PAGE_FAULT, SOFTIRDMA_PF_VECTOR,
			       PF_EQ_LOG, SOFTIRDMA_FAULT_ENTRY_SIZE);
	if (err)
		goto err_irq;
	sdev->odp = true;
	return 0;

err_irq:
	free_irq(pci_irq_vector(pdev, SOFTIRDMA_PF_VECTOR), sdev);
err_wq:
	destroy_workqueue(sdev->odp_wq);
	sdev->odp_wq = NULL;
err_table:
	dma_free_coherent(&pdev->dev, PAGE_SIZE, sdev->pf_table, sdev->pf_table_dma);
	sdev->pf_table = NULL;
	return err;
}

/* Called once every MR is gone. */
void sirdma_odp_fini(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;

	if (sdev->odp) {
		free_irq(pci_irq_vector(pdev, SOFTIRDMA_PF_VECTOR), sdev);
		cancel_work_sync(&sdev->pf_work);
		sirdma_eq_destroy(sdev, &sdev->pf_eq);
		destroy_workqueue(sdev->odp_wq);
		dma_free_coherent(&pdev->dev, PAGE_SIZE, sdev->pf_table, sdev->pf_table_dma);
		sdev->odp = false;
	}
	xa_destroy(&sdev->odp_mrs);
}

/*
 * sirdma_odp_invalidate takes pages the kernel is about to move or free from the function, and
 * from the core's mapping, before it returns: UNMAP_PAGES completes only once no access of the
 * function's to them is under way.
 */
static bool sirdma_odp_invalidate(struct mmu_interval_notifier *mni,
				  const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct ib_umem_odp *odp = container_of(mni, struct ib_umem_odp, notifier);
	struct sirdma_mr *mr = odp->private;
	u64 start, end;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&odp->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	start = max_t(u64, ib_umem_start(odp), range->start);
	end = min_t(u64, ib_umem_end(odp), range->end);
	if (start < end) {
		/* Before its registration the function has none of its pages (stag 0). */
		if (mr->odp_stag) {
			struct softirdma_unmap_pages_args a = {
				.stag = cpu_to_le32(mr->odp_stag),
				.va = cpu_to_le64(start - mr->odp_shift),
				.length = cpu_to_le64(end - start),
			};

			/* A function that refuses is failed, its DMA stopped: the pages may go. */
			sirdma_let_go(mr->sdev, SOFTIRDMA_OP_UNMAP_PAGES, &a, sizeof(a), NULL);
		}
		ib_umem_odp_unmap_dma_pages(odp, start, end);
	}
	mutex_unlock(&odp->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops sirdma_odp_ops = {
	.invalidate = sirdma_odp_invalidate,
};

/*
 * sirdma_odp_reg registers an on-demand user MR: no pages, the wire range [virt, virt+length)
 * over the user range from start, which must lie the same within their pages.
 */
int sirdma_odp_reg(struct sirdma_dev *sdev, struct sirdma_mr *mr, struct ib_pd *ibpd, u64 start,
		   u64 length, u64 virt, int access)
{
	struct softirdma_reg_mr_args a = {};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	struct ib_umem_odp *odp;
	int err;

	if (!sdev->odp)
		return -EOPNOTSUPP;
	if (!start && length == U64_MAX)
		return -EOPNOTSUPP; /* the implicit MR: not offered (IB_ODP_SUPPORT_IMPLICIT) */
	if ((start ^ virt) & ~PAGE_MASK)
		return -EINVAL;
	if (access & IB_ACCESS_HUGETLB)
		return -EOPNOTSUPP; /* the function's pages are 4 KiB, and so are the umem's here */
	odp = ib_umem_odp_get(ibpd->device, start, length, access, &sirdma_odp_ops);
	if (IS_ERR(odp))
		return PTR_ERR(odp);
	mr->sdev = sdev;
	mr->umem = &odp->umem;
	mr->odp_shift = start - virt;
	odp->private = mr;
	a.pd = cpu_to_le32(to_pdn(ibpd));
	a.access = cpu_to_le32(access);
	a.iova = cpu_to_le64(virt);
	a.length = cpu_to_le64(length);
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_REG_MR, &a, sizeof(a), res, NULL, 0);
	if (err) {
		ib_umem_release(mr->umem);
		mr->umem = NULL;
		return err;
	}
	mr->ibmr.lkey = res[SOFTIRDMA_RESULT_NUM];
	mr->ibmr.rkey = res[SOFTIRDMA_RESULT_NUM];
	mutex_lock(&odp->umem_mutex);
	mr->odp_stag = mr->ibmr.lkey; /* from now on the invalidation tells the function */
	mutex_unlock(&odp->umem_mutex);
	mutex_lock(&sdev->odp_lock);
	err = xa_err(xa_store(&sdev->odp_mrs, mr->ibmr.lkey >> 8, mr, GFP_KERNEL));
	mutex_unlock(&sdev->odp_lock);
	if (err) {
		sirdma_num_cmd(sdev, SOFTIRDMA_OP_DEALLOC_STAG, mr->ibmr.lkey);
		ib_umem_release(mr->umem);
		mr->umem = NULL;
	}
	return err;
}

/*
 * sirdma_odp_dereg deregisters an on-demand MR on the function. It takes the MR out of fault
 * handling first, and deallocates its stag under its umem_mutex, so that an invalidation either
 * comes before (and unmaps pages the function still has) or after (and finds no stag to tell:
 * the function has let every page go). A refusal (EBUSY: windows are bound) puts it back.
 */
int sirdma_odp_dereg(struct sirdma_dev *sdev, struct sirdma_mr *mr)
{
	struct ib_umem_odp *odp = to_ib_umem_odp(mr->umem);
	int err;

	mutex_lock(&sdev->odp_lock);
	xa_erase(&sdev->odp_mrs, mr->ibmr.lkey >> 8);
	mutex_unlock(&sdev->odp_lock);
	mutex_lock(&odp->umem_mutex);
	err = sirdma_num_cmd(sdev, SOFTIRDMA_OP_DEALLOC_STAG, mr->ibmr.lkey);
	if (!err || err == -EIO)
		mr->odp_stag = 0;
	mutex_unlock(&odp->umem_mutex);
	if (err && err != -EIO) {
		mutex_lock(&sdev->odp_lock);
		/* Nothing else has its index: the slot erased above is there to take it back. */
		xa_store(&sdev->odp_mrs, mr->ibmr.lkey >> 8, mr, GFP_KERNEL);
		mutex_unlock(&sdev->odp_lock);
	}
	return err;
}

/*
 * sirdma_advise_mr is ibv_advise_mr's prefetch: the pages of each SGE faulted in (for writing
 * with PREFETCH_WRITE; only those present with PREFETCH_NO_FAULT) and given to the function, at
 * once whatever the flags ask (a prefetch may be done synchronously).
 */
int sirdma_advise_mr(struct ib_pd *pd, enum ib_uverbs_advise_mr_advice advice, u32 flags,
		     struct ib_sge *sg_list, u32 num_sge, struct uverbs_attr_bundle *attrs)
{
	struct sirdma_dev *sdev = to_sdev(pd->device);
	bool fault = advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
	int err = 0;
	u32 i;

	if (advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return -EOPNOTSUPP;
	mutex_lock(&sdev->odp_lock);
	for (i = 0; i < num_sge && !err; i++) {
		struct sirdma_mr *mr = odp_mr(sdev, sg_list[i].lkey);

		if (!mr || mr->ibmr.pd != pd)
			err = -ENOENT;
		else if (advice == IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE && !mr->umem->writable)
			err = -EPERM;
		else
			err = odp_map(sdev, mr, sg_list[i].addr, sg_list[i].length, fault);
	}
	mutex_unlock(&sdev->odp_lock);
	return err;
}

#endif
