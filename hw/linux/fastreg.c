// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Fast registration for kernel users (nvme-rdma, the rdma_rw API, NFS and iSER): an MR made
 * free by ALLOC_STAG with room for max_num_sg pages, its pages set by map_mr_sg into a page of
 * page addresses the driver owns, and registered on the send queue by the function's REG_MR
 * work request, which names that page (rxe's ib_reg_wr carries a kernel pointer the function
 * cannot follow). The page is read when the work request runs: a user maps the MR again only
 * once the registration it posted has completed or the MR was invalidated, as the verbs say.
 */
#include <linux/sizes.h>
#include <rdma/ib_verbs.h>

#include "softirdma.h"

/* A key's index: all but its low byte, the consumer's, which a registration may change. */
#define KEY_INDEX(key) ((key) >> 8)

struct ib_mr *sirdma_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type, u32 max_num_sg)
{
	struct sirdma_dev *sdev = to_sdev(ibpd->device);
	struct softirdma_alloc_stag_args a = {
		.pd = cpu_to_le32(to_pdn(ibpd)),
		.kind = cpu_to_le32(SOFTIRDMA_STAG_FAST_REG_MR),
		.max_pages = cpu_to_le32(max_num_sg),
	};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	struct sirdma_mr *mr;
	int err;

	if (type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	/* One page of addresses: max_fast_reg_page_list_len. */
	if (!max_num_sg || max_num_sg > SOFTIRDMA_PL_ENTRIES_PER_PAGE)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->pl = dma_alloc_coherent(&sdev->pdev->dev, PAGE_SIZE, &mr->pl_dma, GFP_KERNEL);
	if (!mr->pl) {
		err = -ENOMEM;
		goto err_free;
	}
	mr->max_pages = max_num_sg;
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_ALLOC_STAG, &a, sizeof(a), res, NULL, 0);
	if (err)
		goto err_pl;
	mr->ibmr.lkey = res[SOFTIRDMA_RESULT_NUM];
	mr->ibmr.rkey = res[SOFTIRDMA_RESULT_NUM];
	return &mr->ibmr;

err_pl:
	dma_free_coherent(&sdev->pdev->dev, PAGE_SIZE, mr->pl, mr->pl_dma);
err_free:
	kfree(mr);
	return ERR_PTR(err);
}

/* sirdma_fastreg_free gives back what alloc_mr added to an MR (dereg_mr). */
void sirdma_fastreg_free(struct sirdma_dev *sdev, struct sirdma_mr *mr)
{
	if (mr->pl)
		dma_free_coherent(&sdev->pdev->dev, PAGE_SIZE, mr->pl, mr->pl_dma);
}

static int set_page(struct ib_mr *ibmr, u64 addr)
{
	struct sirdma_mr *mr = to_smr(ibmr);

	if (mr->npages == mr->max_pages)
		return -ENOMEM;
	mr->pl[mr->npages++] = cpu_to_le64(addr);
	return 0;
}

int sirdma_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		     unsigned int *sg_offset)
{
	struct sirdma_mr *mr = to_smr(ibmr);
	int n;

	/* The function's page sizes (PAGE_SIZES: 4 KiB and 2 MiB). */
	if (!mr->pl || (ibmr->page_size != SZ_4K && ibmr->page_size != SZ_2M))
		return -EINVAL;
	mr->npages = 0;
	n = ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, set_page);
	if (n > 0 && mr->npages)
		mr->offset = ibmr->iova - le64_to_cpu(mr->pl[0]);
	return n;
}

/*
 * sirdma_put_reg writes an IB_WR_REG_MR as the function's REG_MR work request: the new key, the
 * access, the MR's iova and length as map_mr_sg left them, and its page list.
 */
int sirdma_put_reg(struct softirdma_rxe_send_wqe *w, const struct ib_reg_wr *reg)
{
	struct sirdma_mr *mr = to_smr(reg->mr);
	struct softirdma_page_list *pl = (void *)w->reg.reg_pages;

	if (!mr->pl || !mr->npages || KEY_INDEX(reg->key) != KEY_INDEX(reg->mr->lkey))
		return -EINVAL;
	w->opcode = cpu_to_le32(SOFTIRDMA_WR_OP_REG_MR);
	w->reg.reg_key = cpu_to_le32(reg->key);
	w->reg.reg_access = cpu_to_le32(reg->access);
	w->reg.reg_iova = cpu_to_le64(reg->mr->iova);
	w->reg.reg_length = cpu_to_le64(reg->mr->length);
	w->reg.reg_offset = cpu_to_le64(mr->offset);
	pl->addr = cpu_to_le64(mr->pl_dma);
	pl->pages = cpu_to_le32(mr->npages);
	pl->shift = ilog2(reg->mr->page_size);
	pl->levels = 1;
	return 0;
}
