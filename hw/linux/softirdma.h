/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * softirdma: a driver for softirdma's PCI RDMA function (docs/device.md). The register and
 * structure layouts come from softirdma_abi.h, generated from the Go package hw/abi.
 */
#ifndef SOFTIRDMA_H
#define SOFTIRDMA_H

#include <linux/completion.h>
#include <linux/mutex.h>
#include <linux/pci.h>

#include "softirdma_abi.h"

#define SOFTIRDMA_DRV_NAME "softirdma"
#define SOFTIRDMA_CTRLQ_LOG 5 /* 32 control entries, one page */
#define SOFTIRDMA_CMD_TIMEOUT_MS 5000

/* The device limits as QUERY_DEVICE reports them (registers CAPS to CTRLQ_MAX). */
struct sirdma_caps {
	u32 caps;
	u32 page_sizes;
	u32 max_qp, max_qp_wr, max_sge, max_inline, max_cq, max_cqe;
	u32 max_srq, max_srq_wr, max_mr, max_mw, max_pd, max_rd_atom;
	u32 max_msg_size, max_mtu, max_eq, max_ah, gid_tbl_len, ctrlq_max;
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

#endif /* SOFTIRDMA_H */
