/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the kernels the driver supports (Linux 6.1 to 7.x) spell differently, in one place, so
 * that the rest of the driver is written for the newest and reads as it.
 */
#ifndef SOFTIRDMA_COMPAT_H
#define SOFTIRDMA_COMPAT_H

#include <linux/mm.h>
#include <linux/version.h>
#include <linux/workqueue.h>

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
#include <linux/unaligned.h>
#else
#include <asm/unaligned.h>
#endif

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
	vma->vm_flags |= flags;
}
#endif

/* The FLUSH and ATOMIC_WRITE capabilities came with 6.2: before, the verbs do not exist. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 2, 0)
#define SIRDMA_FLUSH_CAPS (IB_DEVICE_FLUSH_GLOBAL | IB_DEVICE_FLUSH_PERSISTENT)
#define SIRDMA_ATOMIC_WRITE_CAP IB_DEVICE_ATOMIC_WRITE
#else
#define SIRDMA_FLUSH_CAPS 0
#define SIRDMA_ATOMIC_WRITE_CAP 0
#endif

/*
 * Since 6.11 create_cq takes the whole attribute bundle, before only its udata, which a user
 * CQ's bundle holds: the older kernels get a wrapper that finds the bundle again.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
#define SIRDMA_CREATE_CQ_OP sirdma_create_cq
#else
#define SIRDMA_CREATE_CQ_OP sirdma_create_cq_udata
#define SIRDMA_CREATE_CQ_UDATA 1
#endif

/*
 * 6.17 gave reg_user_mr the DMA handle (struct ib_dmah) an MR is registered with. Handles are
 * made by alloc_dmah, which the driver does not have, so it never gets one; the older kernels
 * get a wrapper that passes none.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 17, 0)
#define SIRDMA_REG_USER_MR_OP sirdma_reg_user_mr
#else
#define SIRDMA_REG_USER_MR_OP sirdma_reg_user_mr_nodmah
#define SIRDMA_REG_USER_MR_NODMAH 1
#endif

/*
 * 7.1 renamed resize_cq to resize_user_cq (only user space resizes a CQ: the core no longer does)
 * and made its cqe the unsigned int user space gives. Before, the op is resize_cq with an int,
 * and a wrapper takes it.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 1, 0)
#define SIRDMA_RESIZE_CQ_OP .resize_user_cq = sirdma_resize_cq
#else
#define SIRDMA_RESIZE_CQ_OP .resize_cq = sirdma_resize_cq_int
#define SIRDMA_RESIZE_CQ_INT 1
#endif

/*
 * 7.2 renamed ib_umem_get, which pins user memory at a virtual address, to ib_umem_get_va (the
 * umem helpers now also take a buffer from a uverbs attribute). Before, it is the old name.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(7, 2, 0)
#include <rdma/ib_umem.h>

static inline struct ib_umem *ib_umem_get_va(struct ib_device *device, unsigned long addr,
					     size_t size, int access)
{
	return ib_umem_get(device, addr, size, access);
}
#endif

/*
 * A delayed work can be disabled (cancelled, and every later queueing ignored) since 6.10.
 * Before, the driver keeps the same promise itself: queueing goes through sirdma_work_queue,
 * which a flag set under a lock holds back once sirdma_work_disable has run.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 10, 0)
struct sirdma_work_gate {
};

static inline void sirdma_work_gate_init(struct sirdma_work_gate *g)
{
}

static inline void sirdma_work_queue(struct sirdma_work_gate *g, struct delayed_work *w,
				     unsigned long delay)
{
	mod_delayed_work(system_long_wq, w, delay);
}

static inline void sirdma_work_disable(struct sirdma_work_gate *g, struct delayed_work *w)
{
	disable_delayed_work_sync(w);
}
#else
struct sirdma_work_gate {
	spinlock_t lock;
	bool off;
};

static inline void sirdma_work_gate_init(struct sirdma_work_gate *g)
{
	spin_lock_init(&g->lock);
	g->off = false;
}

static inline void sirdma_work_queue(struct sirdma_work_gate *g, struct delayed_work *w,
				     unsigned long delay)
{
	unsigned long flags;

	spin_lock_irqsave(&g->lock, flags);
	if (!g->off)
		mod_delayed_work(system_long_wq, w, delay);
	spin_unlock_irqrestore(&g->lock, flags);
}

static inline void sirdma_work_disable(struct sirdma_work_gate *g, struct delayed_work *w)
{
	unsigned long flags;

	spin_lock_irqsave(&g->lock, flags);
	g->off = true;
	spin_unlock_irqrestore(&g->lock, flags);
	cancel_delayed_work_sync(w);
}
#endif

/*
 * ODP's mapping moved to hmm_dma_map in 6.16: ib_umem_odp_map_dma_and_lock only faults pages
 * (access: HMM_PFN_WRITE or 0) and the driver maps each one for DMA itself (hmm_dma_map_pfn),
 * where before it mapped them (access: ODP_*_ALLOWED_BIT) into dma_list, the permission bits in
 * each address's low bits. sirdma_odp_dma is page i's DMA address, or DMA_MAPPING_ERROR for a
 * page not present; called with the umem's umem_mutex held.
 */
#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
#include <linux/hmm.h>
#include <rdma/ib_umem_odp.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
#include <linux/hmm-dma.h>
#include <linux/pci-p2pdma.h>

#define SIRDMA_ODP_READ 0
#define SIRDMA_ODP_WRITE HMM_PFN_WRITE

static inline dma_addr_t sirdma_odp_dma(struct ib_umem_odp *odp, size_t i)
{
	struct pci_p2pdma_map_state p2p = {};
	unsigned long pfn = odp->map.pfn_list[i];
	dma_addr_t dma;

	if (!(pfn & HMM_PFN_VALID))
		return DMA_MAPPING_ERROR;
	dma = hmm_dma_map_pfn(odp->umem.ibdev->dma_device, &odp->map, i, &p2p);
	/* The core counts the pages it unmaps; a driver that maps one counts it. */
	if (dma != DMA_MAPPING_ERROR && !(pfn & HMM_PFN_DMA_MAPPED))
		odp->npages++;
	return dma;
}
#else
#define SIRDMA_ODP_READ ODP_READ_ALLOWED_BIT
#define SIRDMA_ODP_WRITE (ODP_READ_ALLOWED_BIT | ODP_WRITE_ALLOWED_BIT)

static inline dma_addr_t sirdma_odp_dma(struct ib_umem_odp *odp, size_t i)
{
	dma_addr_t dma = odp->dma_list[i];

	return dma ? dma & ODP_DMA_ADDR_MASK : DMA_MAPPING_ERROR;
}
#endif
#endif

#endif
