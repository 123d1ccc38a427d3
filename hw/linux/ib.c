// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The RDMA device: an ib_device that reports itself as rxe to user space (driver id
 * RDMA_DRIVER_RXE, uverbs ABI 2), so that rdma-core's rxe provider drives the function's rings,
 * which are in rxe's user layout. Its port is RoCEv2 on the Ethernet function's netdev: the
 * RDMA core builds the GID table from the netdev's addresses, and add_gid/del_gid program
 * them into the function, whose engine then answers to them.
 *
 * Each kind of object has its verbs in a file of its own (pd.c, cq.c, qp.c, srq.c, mr.c and
 * fastreg.c, mw.c, ah.c); what they share is in object.c, the kernel's data path in kverbs.c.
 */
#include <net/addrconf.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>

#include "softirdma.h"

#define SOFTIRDMA_UVERBS_ABI_VERSION 2 /* rxe's: what rdma-core's rxe provider accepts */
/* The function's ACK delay and multicast limits: rxe's. */
#define SIRDMA_LOCAL_CA_ACK_DELAY 15
#define SIRDMA_MAX_MCAST_GRP 8192
#define SIRDMA_MAX_MCAST_QP_ATTACH 56
/* RoCEv2's headers around a payload at most (IPv6, UDP, BTH, RETH, ICRC), as rxe reckons them. */
#define ROCE_V2_MAX_HEADERS 80

static bool cq_dim;
module_param(cq_dim, bool, 0444);
MODULE_PARM_DESC(cq_dim, "Moderate the events of the kernel's CQs with the RDMA core's DIM (default off)");

/* The verbs' query_device: the limits the function gave at probe (sirdma_query_caps). */
static int sirdma_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
			       struct ib_udata *udata)
{
	struct sirdma_dev *sdev = to_sdev(ibdev);
	const struct sirdma_caps *c = &sdev->caps;

	/* The core's own query at registration passes no udata in 7.3 (6.12 passes an empty one). */
	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = (u64)SOFTIRDMA_VERSION_MAJOR << 32 | (u64)SOFTIRDMA_VERSION_MINOR << 16;
	addrconf_addr_eui48((u8 *)&attr->sys_image_guid, sdev->netdev->dev_addr);
	attr->max_mr_size = ~0ULL;
	attr->page_size_cap = c->page_sizes;
	attr->vendor_id = SOFTIRDMA_PCI_VENDOR_ID;
	attr->vendor_part_id = SOFTIRDMA_PCI_DEVICE_ID;
	attr->hw_ver = sdev->pdev->revision;
	attr->max_qp = c->max_qp;
	attr->max_qp_wr = c->max_qp_wr;
	attr->device_cap_flags = IB_DEVICE_RC_RNR_NAK_GEN | IB_DEVICE_SRQ_RESIZE |
				 IB_DEVICE_MEM_MGT_EXTENSIONS;
	if (c->caps & SOFTIRDMA_CAP_MW_TYPE1)
		attr->device_cap_flags |= IB_DEVICE_MEM_WINDOW;
	if (c->caps & SOFTIRDMA_CAP_MW_TYPE2_A)
		attr->device_cap_flags |= IB_DEVICE_MEM_WINDOW_TYPE_2A;
	if (c->caps & SOFTIRDMA_CAP_MW_TYPE2_B)
		attr->device_cap_flags |= IB_DEVICE_MEM_WINDOW_TYPE_2B;
	/* MRs with FLUSH rights are refused by the core unless these say the device has them. */
	if (c->caps & SOFTIRDMA_CAP_FLUSH)
		attr->device_cap_flags |= SIRDMA_FLUSH_CAPS;
	if (c->caps & SOFTIRDMA_CAP_ATOMIC_WRITE)
		attr->device_cap_flags |= SIRDMA_ATOMIC_WRITE_CAP;
	attr->max_send_sge = c->max_sge;
	attr->max_recv_sge = c->max_sge;
	attr->max_sge_rd = c->max_sge;
	attr->max_cq = c->max_cq;
	attr->max_cqe = c->max_cqe;
	if (c->caps & SOFTIRDMA_CAP_CQ_MODERATION) {
		attr->cq_caps.max_cq_moderation_count = SOFTIRDMA_CQ_MOD_MAX_COUNT;
		attr->cq_caps.max_cq_moderation_period = SOFTIRDMA_CQ_MOD_MAX_PERIOD;
	}
	attr->max_mr = c->max_mr;
	attr->max_mw = c->max_mw;
	attr->max_pd = c->max_pd;
	attr->max_qp_rd_atom = c->max_rd_atom;
	attr->max_qp_init_rd_atom = c->max_rd_atom;
	attr->max_res_rd_atom = c->max_rd_atom * c->max_qp;
	attr->max_srq = c->max_srq;
	attr->max_srq_wr = c->max_srq_wr;
	attr->max_srq_sge = c->max_sge;
	attr->max_fast_reg_page_list_len = SOFTIRDMA_PL_ENTRIES_PER_PAGE;
	attr->max_pkeys = 1;
	attr->local_ca_ack_delay = SIRDMA_LOCAL_CA_ACK_DELAY;
	attr->atomic_cap = c->caps & SOFTIRDMA_CAP_ATOMICS ? IB_ATOMIC_HCA : IB_ATOMIC_NONE;
	attr->max_ah = c->max_ah;
#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
	/* What the function stops and asks for pages on (odp.c); no implicit MR, as rxe. */
	if (sdev->odp) {
		attr->kernel_cap_flags |= IBK_ON_DEMAND_PAGING;
		attr->odp_caps.general_caps = IB_ODP_SUPPORT;
		attr->odp_caps.per_transport_caps.rc_odp_caps = IB_ODP_SUPPORT_SEND |
			IB_ODP_SUPPORT_RECV | IB_ODP_SUPPORT_WRITE | IB_ODP_SUPPORT_READ |
			IB_ODP_SUPPORT_ATOMIC | IB_ODP_SUPPORT_SRQ_RECV;
		attr->odp_caps.per_transport_caps.ud_odp_caps = IB_ODP_SUPPORT_SEND |
			IB_ODP_SUPPORT_RECV | IB_ODP_SUPPORT_SRQ_RECV;
	}
#endif
	if (c->caps & SOFTIRDMA_CAP_UD) {
		attr->max_mcast_grp = SIRDMA_MAX_MCAST_GRP;
		attr->max_mcast_qp_attach = SIRDMA_MAX_MCAST_QP_ATTACH;
		attr->max_total_mcast_qp_attach = SIRDMA_MAX_MCAST_GRP * SIRDMA_MAX_MCAST_QP_ATTACH;
	}
	return 0;
}

static int sirdma_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct sirdma_dev *sdev = to_sdev(ibdev);
	bool up = sirdma_rd(sdev, SOFTIRDMA_REG_PORT_STATE) == SOFTIRDMA_PORT_ACTIVE &&
		  netif_running(sdev->netdev) && netif_carrier_ok(sdev->netdev);

	/* The core cleared attr; what is not set here stays 0. */
	attr->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
	attr->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->max_mtu = IB_MTU_4096;
	/* The largest path MTU the netdev carries with RoCEv2's headers. */
	attr->active_mtu = min_t(enum ib_mtu,
				 ib_mtu_int_to_enum(sdev->netdev->mtu - ROCE_V2_MAX_HEADERS),
				 sdev->caps.max_mtu);
	attr->gid_tbl_len = SOFTIRDMA_GID_TABLE_LEN;
	attr->port_cap_flags = IB_PORT_CM_SUP;
	attr->max_msg_sz = sdev->caps.max_msg_size;
	attr->pkey_tbl_len = 1;
	attr->active_speed = IB_SPEED_EDR;
	attr->active_width = IB_WIDTH_4X;
	return 0;
}

static int sirdma_get_port_immutable(struct ib_device *ibdev, u32 port,
				     struct ib_port_immutable *immutable)
{
	struct ib_port_attr attr = {};
	int err = ib_query_port(ibdev, port, &attr);

	if (err)
		return err;
	immutable->pkey_tbl_len = attr.pkey_tbl_len;
	immutable->gid_tbl_len = attr.gid_tbl_len;
	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static enum rdma_link_layer sirdma_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

static int sirdma_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	if (index)
		return -EINVAL;
	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

/*
 * sirdma_set_gid writes GID table entry i (valid) or takes it out. The device takes the table
 * when GID_VALID is written: the entry goes out of it while it changes. The GID registers have
 * a lock of their own: nothing orders them against the control queue.
 */
static void sirdma_set_gid(struct sirdma_dev *sdev, unsigned int i, const union ib_gid *gid)
{
	u32 entry = SOFTIRDMA_REG_GID_TABLE + i * sizeof(*gid);
	unsigned int k;
	u32 valid;

	mutex_lock(&sdev->gid_lock);
	valid = sirdma_rd(sdev, SOFTIRDMA_REG_GID_VALID) & ~BIT(i);
	sirdma_wr(sdev, SOFTIRDMA_REG_GID_VALID, valid);
	if (gid) {
		for (k = 0; k < sizeof(*gid); k += sizeof(u32))
			sirdma_wr(sdev, entry + k, get_unaligned_le32(gid->raw + k));
		sirdma_wr(sdev, SOFTIRDMA_REG_GID_VALID, valid | BIT(i));
	}
	mutex_unlock(&sdev->gid_lock);
}

static int sirdma_add_gid(const struct ib_gid_attr *attr, void **context)
{
	if (attr->index >= SOFTIRDMA_GID_TABLE_LEN ||
	    attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		return -EINVAL;
	sirdma_set_gid(to_sdev(attr->device), attr->index, &attr->gid);
	return 0;
}

static int sirdma_del_gid(const struct ib_gid_attr *attr, void **context)
{
	if (attr->index >= SOFTIRDMA_GID_TABLE_LEN)
		return -EINVAL;
	sirdma_set_gid(to_sdev(attr->device), attr->index, NULL);
	return 0;
}

/*
 * The port's netdev, through get_netdev rather than ib_device_set_netdev: the RDMA core builds
 * the RoCE GID table from its addresses and `rdma link` shows it either way, but a device bound
 * with ib_device_set_netdev is what ib_device_get_by_netdev(ndev, RDMA_DRIVER_RXE) finds, and
 * rdma_rxe's netdev notifier, seeing our netdev go up, would take this device for one of its own
 * and write past its end (an Oops in rxe_notify, seen with rdma_rxe loaded beside us).
 */
static struct net_device *sirdma_get_netdev(struct ib_device *ibdev, u32 port)
{
	struct net_device *ndev = to_sdev(ibdev)->netdev;

	if (port != 1 || !ndev)
		return NULL;
	dev_hold(ndev);
	return ndev;
}

static int sirdma_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	return 0;
}

static void sirdma_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

/* The core destroys a disassociated context's objects through the verbs; what the process
 * still maps are pages it holds references on (queue.c), which no device reads any more.
 * Having this lets the device go (rmmod, a failed device) while processes keep it open.
 */
static void sirdma_disassociate_ucontext(struct ib_ucontext *uctx)
{
}

static const struct ib_device_ops sirdma_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_RXE,
	.uverbs_abi_ver = SOFTIRDMA_UVERBS_ABI_VERSION,

	.query_device = sirdma_query_device,
	.query_port = sirdma_query_port,
	.get_port_immutable = sirdma_get_port_immutable,
	.get_link_layer = sirdma_get_link_layer,
	.get_netdev = sirdma_get_netdev,
	.query_pkey = sirdma_query_pkey,
	.add_gid = sirdma_add_gid,
	.del_gid = sirdma_del_gid,
	.alloc_ucontext = sirdma_alloc_ucontext,
	.dealloc_ucontext = sirdma_dealloc_ucontext,
	.disassociate_ucontext = sirdma_disassociate_ucontext,
	.alloc_pd = sirdma_alloc_pd,
	.dealloc_pd = sirdma_dealloc_pd,
	.mmap = sirdma_mmap,
	.mmap_free = sirdma_mmap_free,
	.create_cq = SIRDMA_CREATE_CQ_OP,
	.destroy_cq = sirdma_destroy_cq,
	SIRDMA_RESIZE_CQ_OP,
	.poll_cq = sirdma_poll_cq,
	.req_notify_cq = sirdma_req_notify_cq,
	.modify_cq = sirdma_modify_cq,
	.create_qp = sirdma_create_qp,
	.modify_qp = sirdma_modify_qp,
	.query_qp = sirdma_query_qp,
	.destroy_qp = sirdma_destroy_qp,
	.post_send = sirdma_post_send,
	.post_recv = sirdma_post_recv,
	.get_dma_mr = sirdma_get_dma_mr,
	.reg_user_mr = SIRDMA_REG_USER_MR_OP,
	.dereg_mr = sirdma_dereg_mr,
	.alloc_mr = sirdma_alloc_mr,
	.map_mr_sg = sirdma_map_mr_sg,
	.alloc_mw = sirdma_alloc_mw,
	.dealloc_mw = sirdma_dealloc_mw,
	.create_srq = sirdma_create_srq,
	.modify_srq = sirdma_modify_srq,
	.query_srq = sirdma_query_srq,
	.destroy_srq = sirdma_destroy_srq,
	.post_srq_recv = sirdma_post_srq_recv,
	.create_ah = sirdma_create_ah,
	.create_user_ah = sirdma_create_ah,
	.destroy_ah = sirdma_destroy_ah,
	.attach_mcast = sirdma_attach_mcast,
	.detach_mcast = sirdma_detach_mcast,
#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
	.advise_mr = sirdma_advise_mr,
#endif

	INIT_RDMA_OBJ_SIZE(ib_pd, sirdma_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_ah, sirdma_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, sirdma_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_qp, sirdma_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_mw, sirdma_mw, ibmw),
	INIT_RDMA_OBJ_SIZE(ib_srq, sirdma_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, sirdma_ucontext, ibuc),
};

int sirdma_ib_init(struct sirdma_dev *sdev)
{
	struct sirdma_ib *sib;
	int err;

	if (!sdev->netdev)
		return -ENODEV; /* RoCE needs the Ethernet function's netdev */
	sib = ib_alloc_device(sirdma_ib, ibdev);
	if (!sib)
		return -ENOMEM;
	sib->sdev = sdev;
	INIT_WORK(&sdev->kick_cqs, sirdma_kick_cqs_work);
	sib->ibdev.node_type = RDMA_NODE_IB_CA;
	sib->ibdev.phys_port_cnt = 1;
	sib->ibdev.num_comp_vectors = 1;
	sib->ibdev.local_dma_lkey = 0;
	addrconf_addr_eui48((u8 *)&sib->ibdev.node_guid, sdev->netdev->dev_addr);
	strscpy(sib->ibdev.node_desc, "softirdma", sizeof(sib->ibdev.node_desc));
	ib_set_device_ops(&sib->ibdev, &sirdma_ib_ops);
	/* DIM sets each kernel CQ's moderation (modify_cq) from the completion rate it sees. */
	sib->ibdev.use_cq_dim = cq_dim && (sdev->caps.caps & SOFTIRDMA_CAP_CQ_MODERATION);
	/* The data-path commands rxe's provider makes (the send doorbell, arming a CQ) are
	 * opt-in: most drivers' providers do them without the kernel.
	 */
	sib->ibdev.uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_POST_SEND) |
				      BIT_ULL(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
	err = sirdma_events_init(sdev);
	if (err)
		goto err_free;
	err = sirdma_odp_init(sdev);
	if (err)
		goto err_events;
	err = sirdma_av_init(sdev);
	if (err)
		goto err_odp;
	err = ib_register_device(&sib->ibdev, "softirdma%d", &sdev->pdev->dev);
	if (err)
		goto err_av;
	sdev->ib = &sib->ibdev;
	return 0;

err_av:
	sirdma_av_fini(sdev); /* its memory goes once the function is reset */
err_odp:
	sirdma_odp_fini(sdev);
err_events:
	sirdma_events_fini(sdev);
err_free:
	ib_dealloc_device(&sib->ibdev);
	return err;
}

void sirdma_ib_fini(struct sirdma_dev *sdev)
{
	struct ib_device *ib = sdev->ib;

	if (!ib)
		return;
	/* ib_dispatch_event queues work holding the device without a reference: no event may
	 * reach the core once unregistering starts.
	 */
	WRITE_ONCE(sdev->ib, NULL);
	synchronize_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_ASYNC_VECTOR));
	ib_unregister_device(ib);
	cancel_work_sync(&sdev->kick_cqs); /* its CQs are gone */
	sirdma_av_fini(sdev);
	sirdma_odp_fini(sdev); /* its MRs are gone */
	sirdma_events_fini(sdev);
	ib_dealloc_device(ib);
}
