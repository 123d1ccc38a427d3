// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Memory regions: user MRs from ib_umem page lists, which the device resolves when it registers
 * them, and a kernel PD's local DMA MR. Fast-registration MRs are in fastreg.c.
 */
#include <linux/dma-mapping.h>
#include <rdma/ib_umem.h>
#include <rdma/iter.h>

#include "softirdma.h"

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

/* The page sizes a user MR's page list may have: the function's (PAGE_SIZES). */
#define MR_PAGE_SIZES (SZ_4K | SZ_2M)
#define PL_ENTRIES SOFTIRDMA_PL_ENTRIES_PER_PAGE

/*
 * A user MR's page list: pages of page addresses (leaves) and, over more than one leaf, a page
 * of the leaves' addresses on top. REG_MR reads it; it goes once the MR is registered.
 */
struct mr_pbl {
	__le64 **tables; /* the leaves, then the top */
	dma_addr_t *dmas;
	u32 n; /* how many tables are allocated */
	u32 leaves;
};

/* pbl_free gives back a page list's tables. */
static void pbl_free(struct sirdma_dev *sdev, struct mr_pbl *p)
{
	u32 i;

	for (i = 0; i < p->n; i++)
		dma_free_coherent(&sdev->pdev->dev, PAGE_SIZE, p->tables[i], p->dmas[i]);
	kfree(p->tables);
	kfree(p->dmas);
}

/* pbl_alloc allocates the tables of a page list of nblocks addresses into *p, which is zeroed. */
static int pbl_alloc(struct sirdma_dev *sdev, struct mr_pbl *p, size_t nblocks)
{
	u32 ntables;

	/* Level 1 up to a page of addresses, level 2 beyond: a page of table addresses on top. */
	p->leaves = DIV_ROUND_UP(nblocks, PL_ENTRIES);
	ntables = p->leaves + (p->leaves > 1);
	p->tables = kcalloc(ntables, sizeof(*p->tables), GFP_KERNEL);
	p->dmas = kcalloc(ntables, sizeof(*p->dmas), GFP_KERNEL);
	if (!p->tables || !p->dmas)
		goto err;
	for (; p->n < ntables; p->n++) {
		p->tables[p->n] = dma_alloc_coherent(&sdev->pdev->dev, PAGE_SIZE, &p->dmas[p->n],
						     GFP_KERNEL);
		if (!p->tables[p->n])
			goto err;
	}
	return 0;

err:
	pbl_free(sdev, p); /* the first p->n tables were allocated */
	return -ENOMEM;
}

/* pbl_fill writes the umem's blocks of pgsz into the page list and describes it in *pl. */
static void pbl_fill(struct mr_pbl *p, struct ib_umem *umem, unsigned long pgsz, size_t nblocks,
		     struct softirdma_page_list *pl)
{
	struct ib_block_iter biter;
	u32 i = 0;

	rdma_umem_for_each_dma_block(umem, &biter, pgsz) {
		p->tables[i / PL_ENTRIES][i % PL_ENTRIES] =
			cpu_to_le64(rdma_block_iter_dma_address(&biter));
		i++;
	}
	if (p->leaves > 1) {
		for (i = 0; i < p->leaves; i++)
			p->tables[p->leaves][i] = cpu_to_le64(p->dmas[i]);
		pl->addr = cpu_to_le64(p->dmas[p->leaves]);
		pl->levels = 2;
	} else {
		pl->addr = cpu_to_le64(p->dmas[0]);
		pl->levels = 1;
	}
	pl->pages = cpu_to_le32(nblocks);
	pl->shift = ilog2(pgsz);
}

/*
 * mr_register has the device register the MR's pinned memory (REG_MR) in the largest pages its
 * blocks allow, and takes the MR's keys.
 */
static int mr_register(struct sirdma_dev *sdev, struct sirdma_mr *mr, u32 pdn, u64 length,
		       u64 virt, int access)
{
	struct softirdma_reg_mr_args a = {};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	struct mr_pbl p = {};
	unsigned long pgsz;
	size_t nblocks;
	int err;

	pgsz = ib_umem_find_best_pgsz(mr->umem, MR_PAGE_SIZES, virt);
	nblocks = pgsz ? ib_umem_num_dma_blocks(mr->umem, pgsz) : 0;
	/* At most a two-level page list. */
	if (!nblocks || nblocks > min(PL_ENTRIES * PL_ENTRIES, SOFTIRDMA_MAX_MR_PAGES))
		return -EINVAL;
	err = pbl_alloc(sdev, &p, nblocks);
	if (err)
		return err;
	pbl_fill(&p, mr->umem, pgsz, nblocks, (void *)a.pages);
	a.pd = cpu_to_le32(pdn);
	a.access = cpu_to_le32(access);
	a.iova = cpu_to_le64(virt);
	a.length = cpu_to_le64(length);
	a.offset = cpu_to_le64(ib_umem_dma_offset(mr->umem, pgsz));
	/* The device resolves the pages when it registers them: the tables may go after. */
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_REG_MR, &a, sizeof(a), res, NULL, 0);
	pbl_free(sdev, &p);
	if (err)
		return err;
	mr->ibmr.lkey = res[SOFTIRDMA_RESULT_NUM];
	mr->ibmr.rkey = res[SOFTIRDMA_RESULT_NUM];
	return 0;
}

struct ib_mr *sirdma_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
				 int access, struct ib_dmah *dmah, struct ib_udata *udata)
{
	struct sirdma_mr *mr;
	int err;

	if (dmah)
		return ERR_PTR(-EOPNOTSUPP); /* the device has no DMA handles (no alloc_dmah) */
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	if (access & IB_ACCESS_ON_DEMAND) {
		err = sirdma_odp_reg(to_sdev(ibpd->device), mr, ibpd, start, length, virt, access);
		if (err)
			goto err_free;
		return &mr->ibmr;
	}
	mr->umem = ib_umem_get_va(ibpd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		err = PTR_ERR(mr->umem);
		goto err_free;
	}
	err = mr_register(to_sdev(ibpd->device), mr, to_pdn(ibpd), length, virt, access);
	if (err)
		goto err_umem;
	return &mr->ibmr;

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
	struct sirdma_dev *sdev = to_sdev(ibmr->device);
	struct sirdma_mr *mr = to_smr(ibmr);
	int err;

	if (mr->odp_stag)
		err = sirdma_odp_dereg(sdev, mr);
	else
		err = sirdma_num_cmd(sdev, SOFTIRDMA_OP_DEALLOC_STAG, ibmr->lkey);
	/* EBUSY: windows are bound to it, and the MR stays, as the verbs API says. */
	if (err && err != -EIO)
		return err;
	/* The function has let its pages go (DEALLOC_STAG waits for its copies): an on-demand
	 * umem's release unmaps them and removes its notifier.
	 */
	ib_umem_release(mr->umem);
	sirdma_fastreg_free(to_sdev(ibmr->device), mr);
	kfree(mr);
	return 0;
}
