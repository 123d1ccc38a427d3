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
	struct sirdma_mr *mr = to_smr(ibmr);
	int err = sirdma_num_cmd(to_sdev(ibmr->device), SOFTIRDMA_OP_DEALLOC_STAG, ibmr->lkey);

	/* EBUSY: windows are bound to it, and the MR stays, as the verbs API says. */
	if (err && err != -EIO)
		return err;
	ib_umem_release(mr->umem);
	sirdma_fastreg_free(to_sdev(ibmr->device), mr);
	kfree(mr);
	return 0;
}
