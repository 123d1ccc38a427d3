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

#include "softirdma_abi.h"

#define SOFTIRDMA_DRV_NAME "softirdma"
#define SOFTIRDMA_CTRLQ_LOG 5 /* 32 control entries, one page */
#define SOFTIRDMA_CMD_TIMEOUT_MS 5000

/* MSI-X vectors: the control queue's is the ABI's; the rest are this driver's choice. */
#define SOFTIRDMA_ASYNC_VECTOR 1
#define SOFTIRDMA_ETH_TX_VECTOR 2
#define SOFTIRDMA_ETH_RX_VECTOR 3
#define SOFTIRDMA_MIN_VECTORS 4

/* An Ethernet ring: header and descriptors in one page (level-0 page list). */
#define SOFTIRDMA_ETH_RING_LOG 7
#define SOFTIRDMA_ETH_RING_SIZE (1U << SOFTIRDMA_ETH_RING_LOG)
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
};

struct sirdma_dev {
	struct pci_dev *pdev;
	void __iomem *regs;
	void __iomem *db;
	int nvec;

	/* The control queue: one command at a time, answered in its entry. */
	struct mutex ctrl_lock;
	struct completion ctrl_done;
	struct softirdma_ctrl_entry *ctrlq;
	dma_addr_t ctrlq_dma;
	u32 ctrlq_prod;
	bool failed; /* the function went FATAL or vanished: commands fail at once */

	struct sirdma_caps caps;

	/* The Ethernet function's netdev. */
	struct net_device *netdev;
	struct napi_struct napi;
	spinlock_t tx_lock; /* the TX ring's producer side */
	struct sirdma_eth_ring tx, rx;

	/* The RDMA device on the netdev's port. */
	struct ib_device *ib;
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

int sirdma_eth_init(struct sirdma_dev *sdev);
void sirdma_eth_fini(struct sirdma_dev *sdev);
int sirdma_ib_init(struct sirdma_dev *sdev);
void sirdma_ib_fini(struct sirdma_dev *sdev);

#endif /* SOFTIRDMA_H */
