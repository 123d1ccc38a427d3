// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Address handles: entries of the address-vector table the driver keeps in a page of its own
 * memory and gives the function at probe (SET_AV_TABLE). The kernel creates address handles
 * where it may not sleep, so a handle is written here and nothing is asked of the function; a
 * UD work request names it by number. A process gets the number in rxe's create_ah response;
 * with the table full it gets 0, and rxe's provider then puts the whole address in each work
 * request (struct rxe_av), which the function reads as well.
 */
#include <linux/dma-mapping.h>
#include <linux/sizes.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_user_rxe.h>

#include "softirdma.h"

/* One 4 KiB page of entries; number 0 is no entry (the address is in the work request). */
#define SIRDMA_AV_ENTRIES (SZ_4K / sizeof(struct softirdma_av_entry))

static int av_table_cmd(struct sirdma_dev *sdev, u32 entries)
{
	struct softirdma_set_av_args a = {};
	struct softirdma_page_list *pl = (void *)a.pages;

	if (entries) {
		pl->addr = cpu_to_le64(sdev->av_dma);
		pl->pages = cpu_to_le32(1);
		pl->shift = ilog2(SZ_4K);
	}
	a.entries = cpu_to_le32(entries);
	return sirdma_cmd(sdev, SOFTIRDMA_OP_SET_AV_TABLE, &a, sizeof(a), NULL, NULL, 0);
}

/* sirdma_av_init gives a function that has UD queues its address-vector table. */
int sirdma_av_init(struct sirdma_dev *sdev)
{
	int err;

	ida_init(&sdev->av_ida);
	if (!(sdev->caps.caps & SOFTIRDMA_CAP_UD))
		return 0;
	sdev->av = dma_alloc_coherent(&sdev->pdev->dev, SZ_4K, &sdev->av_dma, GFP_KERNEL);
	if (!sdev->av)
		return -ENOMEM;
	err = av_table_cmd(sdev, SIRDMA_AV_ENTRIES);
	if (err)
		sirdma_av_free(sdev);
	return err;
}

/* sirdma_av_fini takes the table from the function; its memory goes with sirdma_av_free. */
void sirdma_av_fini(struct sirdma_dev *sdev)
{
	if (sdev->av)
		av_table_cmd(sdev, 0);
}

/* sirdma_av_free frees the table once the function no longer reads it (removed, or reset). */
void sirdma_av_free(struct sirdma_dev *sdev)
{
	if (sdev->av)
		dma_free_coherent(&sdev->pdev->dev, SZ_4K, sdev->av, sdev->av_dma);
	sdev->av = NULL;
	ida_destroy(&sdev->av_ida);
}

int sirdma_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibah->device);
	struct rdma_ah_attr *attr = init->ah_attr;
	const struct ib_global_route *grh = rdma_ah_read_grh(attr);
	gfp_t gfp = init->flags & RDMA_CREATE_AH_SLEEPABLE ? GFP_KERNEL : GFP_ATOMIC;
	struct sirdma_ah *ah = to_sah(ibah);
	struct rxe_create_ah_resp resp = {};
	struct softirdma_av_entry *e;
	int n, err;

	if (!sdev->av)
		return -EOPNOTSUPP;
	if (!(rdma_ah_get_ah_flags(attr) & IB_AH_GRH) || !grh->sgid_attr)
		return -EINVAL; /* RoCE addresses by GID */
	n = ida_alloc_range(&sdev->av_ida, 1, SIRDMA_AV_ENTRIES - 1, gfp);
	if (n < 0) {
		if (!udata)
			return n;
		n = 0; /* a process puts the address in each work request */
	}
	ah->num = n;
	if (n) {
		e = &sdev->av[n];
		memset(e, 0, sizeof(*e));
		e->pd = cpu_to_le32(to_pdn(ibah->pd));
		memcpy(e->dgid, grh->dgid.raw, sizeof(e->dgid));
		e->flow_label = cpu_to_le32(grh->flow_label);
		e->sgid_index = grh->sgid_index;
		e->hop_limit = grh->hop_limit;
		e->traffic_class = grh->traffic_class;
		e->network_type = rdma_gid_attr_network_type(grh->sgid_attr) == RDMA_NETWORK_IPV4 ?
				  RXE_NETWORK_TYPE_IPV4 : RXE_NETWORK_TYPE_IPV6;
		memcpy(e->dmac, attr->roce.dmac, sizeof(e->dmac));
		dma_wmb(); /* the entry whole before it is valid */
		WRITE_ONCE(e->flags, cpu_to_le32(SOFTIRDMA_AV_VALID));
	}
	if (udata && udata->outlen) {
		resp.ah_num = n;
		err = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
		if (err) {
			sirdma_destroy_ah(ibah, 0);
			return err;
		}
	}
	return 0;
}

int sirdma_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	struct sirdma_dev *sdev = to_sdev(ibah->device);
	struct sirdma_ah *ah = to_sah(ibah);

	if (ah->num) {
		WRITE_ONCE(sdev->av[ah->num].flags, 0);
		ida_free(&sdev->av_ida, ah->num);
		ah->num = 0;
	}
	return 0;
}

/* Multicast: a UD QP joins or leaves a group, named by its GID (ATTACH_MCAST, DETACH_MCAST). */
static int mcast_cmd(struct ib_qp *ibqp, union ib_gid *gid, u16 op)
{
	struct softirdma_mcast_args a = { .qpn = cpu_to_le32(ibqp->qp_num) };

	memcpy(a.gid, gid->raw, sizeof(a.gid));
	return sirdma_cmd(to_sdev(ibqp->device), op, &a, sizeof(a), NULL, NULL, 0);
}

int sirdma_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return mcast_cmd(ibqp, gid, SOFTIRDMA_OP_ATTACH_MCAST);
}

int sirdma_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return mcast_cmd(ibqp, gid, SOFTIRDMA_OP_DETACH_MCAST);
}
