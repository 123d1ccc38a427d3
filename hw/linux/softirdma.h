/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * softirdma: a driver for softirdma's PCI RDMA function (docs/device.md). The register and
 * structure layouts come from softirdma_abi.h, generated from the Go package hw/abi.
 */
#ifndef SOFTIRDMA_H
#define SOFTIRDMA_H

#include <linux/completion.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>

#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

#include "compat.h"
#include "softirdma_abi.h"

#define SOFTIRDMA_DRV_NAME "softirdma"
#define SOFTIRDMA_CTRLQ_LOG 5 /* 32 control entries, one page */
#define SOFTIRDMA_CMD_TIMEOUT_MS 5000
/* The u32 results a command answers with (struct softirdma_ctrl_entry's result). */
#define SOFTIRDMA_CMD_RESULTS (sizeof_field(struct softirdma_ctrl_entry, result) / sizeof(u32))

/* MSI-X vectors: the control queue's is the ABI's; the rest are this driver's choice. */
#define SOFTIRDMA_ASYNC_VECTOR 1
#define SOFTIRDMA_ETH_TX_VECTOR 2
#define SOFTIRDMA_ETH_RX_VECTOR 3
#define SOFTIRDMA_COMP_VECTOR 4
#define SOFTIRDMA_MIN_VECTORS 5
#define SOFTIRDMA_PF_VECTOR 5 /* page faults (odp.c), when the function gives a sixth */

/* An Ethernet ring: header and descriptors in one page (level-0 page list). */
#define SOFTIRDMA_ETH_RING_LOG 7
#define SOFTIRDMA_ETH_RING_SIZE (1U << SOFTIRDMA_ETH_RING_LOG)
/* An RX buffer holds a frame of the netdev's MTU, and never less than this. */
#define SOFTIRDMA_ETH_RX_BUF 1536

/* The device limits as QUERY_DEVICE reports them (registers CAPS to CTRLQ_MAX). */
struct sirdma_caps {
	u32 caps;
	u32 page_sizes;
	u32 max_qp, max_qp_wr, max_sge, max_inline, max_cq, max_cqe;
	u32 max_srq, max_srq_wr, max_mr, max_mw, max_pd, max_rd_atom;
	u32 max_msg_size, max_mtu, max_eq, max_ah, gid_tbl_len, ctrlq_max;
};

/* One of the Ethernet function's rings as the driver keeps it: the ring in coherent memory
 * (the device reads and writes it), and per slot the skb and its DMA mapping.
 */
struct sirdma_eth_ring {
	void *mem; /* rxe queue header, then SOFTIRDMA_ETH_RING_SIZE descriptors */
	dma_addr_t dma;
	u32 prod;  /* the driver's producer index */
	u32 clean; /* the next slot the driver takes back */
	struct sk_buff *skbs[SOFTIRDMA_ETH_RING_SIZE];
	dma_addr_t addrs[SOFTIRDMA_ETH_RING_SIZE];
	/* RX: each buffer's size, the MTU's when it was posted (a change of MTU reaches the
	 * buffers as they come back).
	 */
	u32 lens[SOFTIRDMA_ETH_RING_SIZE];
};

/* An event queue: a ring the device produces into, with its MSI-X vector. */
struct sirdma_eq {
	struct sirdma_queue *q;
	u32 eqn;
	u32 cons;
	u32 log; /* log2 of its entries */
	u64 seq; /* the device's count of entries, as of the last one consumed */
	u32 entry_size;
	u16 vector;
};

struct sirdma_dev {
	struct pci_dev *pdev;
	void __iomem *regs;
	void __iomem *db;
	int nvec;

	/* The control queue: one command at a time, answered in its entry. */
	struct mutex ctrl_lock; /* the ring, its producer index and ctrl_done */
	struct completion ctrl_done;
	struct softirdma_ctrl_entry *ctrlq;
	dma_addr_t ctrlq_dma;
	u32 ctrlq_prod;
	bool failed; /* the function went FATAL or vanished: commands fail at once */
	struct delayed_work health; /* watches for that, and takes the RDMA device down */
	struct sirdma_work_gate health_gate; /* what an interrupt queues it through */

	struct sirdma_caps caps;

	/* The GID table's registers: an entry changes with GID_VALID read, modified and written. */
	struct mutex gid_lock;

	/* The Ethernet function's netdev. */
	struct net_device *netdev;
	struct napi_struct napi;
	spinlock_t tx_lock; /* the TX ring's producer side */
	struct sirdma_eth_ring tx, rx;
	bool rings_up; /* the netdev's rings are the device's (open, and not failed to reopen) */

	/* The RDMA device on the netdev's port, its event queues, and its CQs, QPs and SRQs by
	 * number for the events that name them.
	 */
	struct ib_device *ib;
	struct sirdma_eq comp_eq, async_eq;
	struct xarray cqs, qps, srqs;
	/* Once the function failed, work posted to kernel QPs is completed flushed by poll_cq
	 * (kverbs.c): this calls the kernel CQs' handlers so their users poll it.
	 */
	struct work_struct kick_cqs;

	/* On-demand paging (odp.c): the page-fault EQ, the work that answers its entries, the
	 * on-demand MRs by stag index, and a page of page addresses for MAP_PAGES.
	 */
	bool odp;
	struct sirdma_eq pf_eq;
	struct workqueue_struct *odp_wq;
	struct work_struct pf_work;
	struct mutex odp_lock; /* fault handling and prefetch against deregistration */
	struct xarray odp_mrs;
	__le64 *pf_table;
	dma_addr_t pf_table_dma;

	/* The address-vector table (ah.c): one page the function reads, its free numbers. */
	struct softirdma_av_entry *av;
	dma_addr_t av_dma;
	struct ida av_ida;
};

/* A queue in rxe's layout in order-0 pages, with the page list the device is given (one
 * level up to 2 MiB, two up to 1 GiB).
 */
struct sirdma_queue {
	struct sirdma_dev *sdev;
	void *mem; /* the pages, mapped contiguously for the kernel */
	size_t bytes;
	dma_addr_t *addrs; /* the pages' DMA addresses */
	__le64 *table; /* the page list's root, which the device is given */
	dma_addr_t table_dma;
	__le64 **leaves; /* under a two-level root, its pages of page addresses */
	u32 nleaves;
	u8 levels, log_count, log_elem;
	struct rdma_user_mmap_entry *entry; /* set once a process may map it */
	struct page *pages[];
};

/* The netdev's private data points back at the device. */
struct sirdma_netdev_priv {
	struct sirdma_dev *sdev;
};

static inline u32 sirdma_rd(struct sirdma_dev *sdev, u32 off)
{
	return readl(sdev->regs + off);
}

static inline void sirdma_wr(struct sirdma_dev *sdev, u32 off, u32 val)
{
	writel(val, sdev->regs + off);
}

int sirdma_ctrl_init(struct sirdma_dev *sdev);
void sirdma_ctrl_fini(struct sirdma_dev *sdev);
irqreturn_t sirdma_ctrl_irq(int irq, void *data);
int sirdma_cmd(struct sirdma_dev *sdev, u16 op, const void *args, size_t len,
	       u32 *results, void *answer, size_t answer_len);
int sirdma_let_go(struct sirdma_dev *sdev, u16 op, const void *args, size_t len, u32 *results);
bool sirdma_fatal(struct sirdma_dev *sdev);
void sirdma_fail(struct sirdma_dev *sdev);

int sirdma_eth_init(struct sirdma_dev *sdev);
void sirdma_eth_fini(struct sirdma_dev *sdev);
struct ib_dmah;
struct ib_ucontext;
struct vm_area_struct;
struct rdma_user_mmap_entry;
struct mminfo;
struct sirdma_queue *sirdma_queue_alloc(struct sirdma_dev *sdev, u32 count, u32 elem);
void sirdma_queue_free(struct sirdma_queue *q);
void sirdma_queue_args(struct sirdma_queue *q, u8 *args);
int sirdma_queue_expose(struct ib_ucontext *uctx, struct sirdma_queue *q, struct mminfo *mi);
void sirdma_queue_release(struct sirdma_queue *q);
int sirdma_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
void sirdma_mmap_free(struct rdma_user_mmap_entry *re);

int sirdma_ib_init(struct sirdma_dev *sdev);
void sirdma_ib_fini(struct sirdma_dev *sdev);
int sirdma_events_init(struct sirdma_dev *sdev);
void sirdma_events_fini(struct sirdma_dev *sdev);
int sirdma_eq_create(struct sirdma_dev *sdev, struct sirdma_eq *eq, u8 kind, u16 vector, u32 log,
		     u32 entry_size);
void sirdma_eq_destroy(struct sirdma_dev *sdev, struct sirdma_eq *eq);
u8 *sirdma_eq_next(struct sirdma_eq *eq, u64 *lost);
void sirdma_eq_consume(struct sirdma_eq *eq);

struct sirdma_ib {
	struct ib_device ibdev;
	struct sirdma_dev *sdev;
};

struct sirdma_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct sirdma_ucontext {
	struct ib_ucontext ibuc;
};

struct sirdma_cq {
	struct ib_cq ibcq;
	u32 cqn, slot;
	struct mutex lock; /* resize: q */
	spinlock_t poll_lock; /* a kernel CQ's consumer index */
	struct sirdma_queue *q;
};

struct sirdma_qp {
	struct ib_qp ibqp;
	enum ib_qp_type type;
	enum ib_qp_state state; /* as the last MODIFY_QP set it */
	u32 slot;
	struct sirdma_queue *sq, *rq;
	struct ib_qp_cap cap; /* what create_qp granted, for query_qp */
	bool sig_all;
	/* A kernel QP's producer indices, the rings' writers, under these (kverbs.c). */
	spinlock_t sq_lock, rq_lock;
	u32 sq_prod, rq_prod;
	/*
	 * rq_comp: the receive WQE whose completion comes next (the function moves the RQ's
	 * consumer index when it takes a receive, not when it completes it). Once the function
	 * failed, poll_cq completes the rest flushed from sq_flush and rq_flush, under the send
	 * and receive CQ's poll lock.
	 */
	u32 rq_comp, sq_flush, rq_flush;
	bool sq_flushing, rq_flushing;
};

int sirdma_kpost_send(struct sirdma_qp *qp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad);
void sirdma_kqp_reset(struct sirdma_qp *qp);
void sirdma_kick_cqs(struct sirdma_dev *sdev);
void sirdma_kick_cqs_work(struct work_struct *work);
int sirdma_put_recvs(struct sirdma_queue *q, u32 *prod, u32 max_sge, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad);

struct sirdma_srq {
	struct ib_srq ibsrq;
	u32 srqn, max_sge;
	struct mutex lock; /* modify: srq->q */
	struct sirdma_queue *q;
	spinlock_t post_lock; /* a kernel SRQ's producer index, prod */
	u32 prod;
};

struct sirdma_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	/* A fast-register MR's page of page addresses (fastreg.c). */
	__le64 *pl;
	dma_addr_t pl_dma;
	u32 max_pages, npages;
	u64 offset; /* of iova in the first page */
	/* An on-demand MR (odp.c): its user address less its wire address, and its stag once the
	 * function has it (read under the umem's umem_mutex by the invalidation).
	 */
	struct sirdma_dev *sdev;
	u64 odp_shift;
	u32 odp_stag;
};

#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
int sirdma_odp_init(struct sirdma_dev *sdev);
void sirdma_odp_fini(struct sirdma_dev *sdev);
int sirdma_odp_reg(struct sirdma_dev *sdev, struct sirdma_mr *mr, struct ib_pd *ibpd, u64 start,
		   u64 length, u64 virt, int access);
int sirdma_odp_dereg(struct sirdma_dev *sdev, struct sirdma_mr *mr);
struct uverbs_attr_bundle;
int sirdma_advise_mr(struct ib_pd *pd, enum ib_uverbs_advise_mr_advice advice, u32 flags,
		     struct ib_sge *sg_list, u32 num_sge, struct uverbs_attr_bundle *attrs);
#else
static inline int sirdma_odp_init(struct sirdma_dev *sdev) { return 0; }
static inline void sirdma_odp_fini(struct sirdma_dev *sdev) {}
static inline int sirdma_odp_reg(struct sirdma_dev *sdev, struct sirdma_mr *mr,
				 struct ib_pd *ibpd, u64 start, u64 length, u64 virt, int access)
{
	return -EOPNOTSUPP;
}
static inline int sirdma_odp_dereg(struct sirdma_dev *sdev, struct sirdma_mr *mr)
{
	return -EOPNOTSUPP;
}
#endif

struct ib_mr *sirdma_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type type, u32 max_num_sg);
int sirdma_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		     unsigned int *sg_offset);
void sirdma_fastreg_free(struct sirdma_dev *sdev, struct sirdma_mr *mr);
int sirdma_put_reg(struct softirdma_rxe_send_wqe *w, const struct ib_reg_wr *reg);

struct sirdma_mw {
	struct ib_mw ibmw;
};

struct sirdma_ah {
	struct ib_ah ibah;
	u32 num; /* its entry in the AV table; 0: none, the address goes in each work request */
};

int sirdma_av_init(struct sirdma_dev *sdev);
void sirdma_av_fini(struct sirdma_dev *sdev);
void sirdma_av_free(struct sirdma_dev *sdev);
struct rdma_ah_init_attr;
int sirdma_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata);
int sirdma_destroy_ah(struct ib_ah *ibah, u32 flags);
int sirdma_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
int sirdma_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);

/* sirdma_uctx is the user context a verb's udata came with. */
static inline struct ib_ucontext *sirdma_uctx(struct ib_udata *udata)
{
	return &rdma_udata_to_drv_context(udata, struct sirdma_ucontext, ibuc)->ibuc;
}

static inline struct sirdma_dev *to_sdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct sirdma_ib, ibdev)->sdev;
}

/* The driver's object around each of the core's. */
static inline struct sirdma_pd *to_spd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct sirdma_pd, ibpd);
}

static inline u32 to_pdn(struct ib_pd *ibpd)
{
	return to_spd(ibpd)->pdn;
}

static inline struct sirdma_cq *to_scq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct sirdma_cq, ibcq);
}

static inline struct sirdma_qp *to_sqp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct sirdma_qp, ibqp);
}

static inline struct sirdma_srq *to_ssrq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct sirdma_srq, ibsrq);
}

static inline struct sirdma_mr *to_smr(struct ib_mr *ibmr)
{
	return container_of(ibmr, struct sirdma_mr, ibmr);
}

static inline struct sirdma_ah *to_sah(struct ib_ah *ibah)
{
	return container_of(ibah, struct sirdma_ah, ibah);
}

int sirdma_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int sirdma_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int sirdma_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		     struct uverbs_attr_bundle *attrs);
#ifdef SIRDMA_CREATE_CQ_UDATA
int sirdma_create_cq_udata(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			   struct ib_udata *udata);
#endif
int sirdma_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int sirdma_resize_cq(struct ib_cq *ibcq, unsigned int cqe, struct ib_udata *udata);
#ifdef SIRDMA_RESIZE_CQ_INT
int sirdma_resize_cq_int(struct ib_cq *ibcq, int cqe, struct ib_udata *udata);
#endif
int sirdma_poll_cq(struct ib_cq *ibcq, int n, struct ib_wc *wc);
int sirdma_modify_cq(struct ib_cq *ibcq, u16 cq_count, u16 cq_period);
int sirdma_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int sirdma_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata);
int sirdma_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_udata *udata);
int sirdma_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int sirdma_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_qp_init_attr *init);
int sirdma_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		     const struct ib_send_wr **bad);
int sirdma_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		     const struct ib_recv_wr **bad);
struct ib_mr *sirdma_get_dma_mr(struct ib_pd *ibpd, int access);
struct ib_mr *sirdma_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
				 int access, struct ib_dmah *dmah, struct ib_udata *udata);
#ifdef SIRDMA_REG_USER_MR_NODMAH
struct ib_mr *sirdma_reg_user_mr_nodmah(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
					int access, struct ib_udata *udata);
#endif
int sirdma_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
int sirdma_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
int sirdma_dealloc_mw(struct ib_mw *ibmw);
int sirdma_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		      struct ib_udata *udata);
int sirdma_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		      enum ib_srq_attr_mask mask, struct ib_udata *udata);
int sirdma_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int sirdma_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int sirdma_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			 const struct ib_recv_wr **bad);
int sirdma_num_cmd(struct sirdma_dev *sdev, u16 op, u32 num);
void sirdma_unmake(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj);
int sirdma_enter(struct sirdma_dev *sdev, struct xarray *xa, u16 destroy, u32 num, void *obj,
		 bool usable);
int sirdma_destroy_obj(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj);
int sirdma_destroy_queued(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj,
			  struct sirdma_queue *q, struct sirdma_queue *rq);
bool sirdma_slot_ok(struct sirdma_dev *sdev, u32 base, u32 slot, u32 max);

#endif /* SOFTIRDMA_H */
