// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * softirdma: the PCI function. Probe checks the ABI, resets the function, sets up MSI-X and
 * the control queue, enables the function and asks it what it offers.
 */
#include <linux/delay.h>
#include <linux/interrupt.h>
#include <linux/module.h>
#include <linux/pci.h>

#include "softirdma.h"

static const struct pci_device_id sirdma_pci_ids[] = {
	{ PCI_DEVICE(SOFTIRDMA_PCI_VENDOR_ID, SOFTIRDMA_PCI_DEVICE_ID) },
	{}
};
MODULE_DEVICE_TABLE(pci, sirdma_pci_ids);

/* The VERSION register: the ABI's major version in its high half, the minor in the low. */
#define SIRDMA_ABI_MAJOR(version) ((version) >> 16)
#define SIRDMA_ABI_MINOR(version) ((version) & 0xffff)

/* sirdma_reset returns the function to power-on state and waits until it says it is there. */
static int sirdma_reset(struct sirdma_dev *sdev)
{
	int i;

	sirdma_wr(sdev, SOFTIRDMA_REG_DEV_CTRL, SOFTIRDMA_DEV_CTRL_RESET);
	for (i = 0; i < 100; i++) {
		u32 ctrl = sirdma_rd(sdev, SOFTIRDMA_REG_DEV_CTRL);

		if (ctrl == ~0U)
			return -ENODEV;
		if (!(ctrl & SOFTIRDMA_DEV_CTRL_RESET))
			return 0;
		usleep_range(1000, 2000);
	}
	return -ETIMEDOUT;
}

/* sirdma_query_caps asks the function what it offers (QUERY_DEVICE) into sdev->caps. */
static int sirdma_query_caps(struct sirdma_dev *sdev)
{
	__le32 words[SOFTIRDMA_QUERY_DEVICE_WORDS];
	u32 *c = (u32 *)&sdev->caps;
	int err, i;

	BUILD_BUG_ON(sizeof(sdev->caps) != sizeof(words));
	err = sirdma_cmd(sdev, SOFTIRDMA_OP_QUERY_DEVICE, NULL, 0, NULL, words, sizeof(words));
	if (err)
		return err;
	for (i = 0; i < SOFTIRDMA_QUERY_DEVICE_WORDS; i++)
		c[i] = le32_to_cpu(words[i]);
	return 0;
}

/*
 * sirdma_health looks at the function once a second (and at once on DEVICE_FATAL). A function
 * that went FATAL, or vanished (its process died: every read gives all ones), takes the RDMA
 * device with it: its users get DEVICE_FATAL, the device is unregistered (their contexts
 * disassociated, every destroy succeeding without the device), and the netdev stays without
 * carrier until the driver is unbound. Nothing waits for the function to answer.
 */
static void sirdma_health(struct work_struct *work)
{
	struct sirdma_dev *sdev = container_of(to_delayed_work(work), struct sirdma_dev, health);

	if (!sirdma_fatal(sdev)) {
		queue_delayed_work(system_long_wq, &sdev->health, HZ);
		return;
	}
	/* sirdma_fatal turned bus mastering off: a failed function that is only slow writes
	 * nothing into what the teardown frees (docs/device.md).
	 */
	netif_carrier_off(sdev->netdev);
	if (sdev->ib) {
		/* The kernel's users get what they posted back flushed (kverbs.c), before they
		 * are asked to let the device go and wait for it.
		 */
		sirdma_kick_cqs(sdev);
		/* Unregistering tells the device's users (DEVICE_FATAL) and disassociates them. */
		sirdma_ib_fini(sdev);
		dev_err(&sdev->pdev->dev, "function failed: RDMA device unregistered\n");
	}
}

/* sirdma_dev_alloc gives the device its state, before anything of the function is touched. */
static struct sirdma_dev *sirdma_dev_alloc(struct pci_dev *pdev)
{
	struct sirdma_dev *sdev = kzalloc(sizeof(*sdev), GFP_KERNEL);

	if (!sdev)
		return NULL;
	sdev->pdev = pdev;
	mutex_init(&sdev->ctrl_lock);
	mutex_init(&sdev->gid_lock);
	init_completion(&sdev->ctrl_done);
	INIT_DELAYED_WORK(&sdev->health, sirdma_health);
	sirdma_work_gate_init(&sdev->health_gate);
	pci_set_drvdata(pdev, sdev);
	return sdev;
}

/* sirdma_pci_init enables the PCI function and maps its register and doorbell BARs. */
static int sirdma_pci_init(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;
	int err;

	err = pci_enable_device_mem(pdev);
	if (err)
		return err;
	err = pci_request_mem_regions(pdev, SOFTIRDMA_DRV_NAME);
	if (err)
		goto err_disable;
	err = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err)
		goto err_regions;
	sdev->regs = pci_iomap(pdev, SOFTIRDMA_BAR_REGS, 0);
	sdev->db = pci_iomap(pdev, SOFTIRDMA_BAR_DOORBELL, 0);
	if (sdev->regs && sdev->db)
		return 0;
	err = -ENOMEM;
	if (sdev->db)
		pci_iounmap(pdev, sdev->db);
	if (sdev->regs)
		pci_iounmap(pdev, sdev->regs);
err_regions:
	pci_release_mem_regions(pdev);
err_disable:
	pci_disable_device(pdev);
	return err;
}

static void sirdma_pci_fini(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;

	pci_iounmap(pdev, sdev->db);
	pci_iounmap(pdev, sdev->regs);
	pci_release_mem_regions(pdev);
	pci_disable_device(pdev);
}

/*
 * sirdma_identify checks that the function speaks the driver's ABI (its major version; the
 * version goes to *version), resets it and lets it master the bus.
 */
static int sirdma_identify(struct sirdma_dev *sdev, u32 *version)
{
	struct pci_dev *pdev = sdev->pdev;
	u32 magic, major;
	int err;

	magic = sirdma_rd(sdev, SOFTIRDMA_REG_MAGIC);
	*version = sirdma_rd(sdev, SOFTIRDMA_REG_VERSION);
	major = SIRDMA_ABI_MAJOR(*version);
	if (magic != SOFTIRDMA_MAGIC_VALUE || major != SOFTIRDMA_VERSION_MAJOR) {
		dev_err(&pdev->dev,
			"not a softirdma function this driver knows: magic 0x%x, ABI %u.%u\n",
			magic, major, SIRDMA_ABI_MINOR(*version));
		return -ENODEV;
	}
	err = sirdma_reset(sdev);
	if (err) {
		dev_err(&pdev->dev, "reset failed: %d\n", err);
		return err;
	}
	pci_set_master(pdev);
	return 0;
}

/* sirdma_irq_init sets up MSI-X and the control queue's interrupt. */
static int sirdma_irq_init(struct sirdma_dev *sdev)
{
	struct pci_dev *pdev = sdev->pdev;
	int err;

	sdev->nvec = pci_alloc_irq_vectors(pdev, SOFTIRDMA_MIN_VECTORS, SOFTIRDMA_NUM_VECTORS,
					   PCI_IRQ_MSIX);
	if (sdev->nvec < 0)
		return sdev->nvec;
	err = request_irq(pci_irq_vector(pdev, SOFTIRDMA_CTRL_VECTOR), sirdma_ctrl_irq, 0,
			  "softirdma-ctrl", sdev);
	if (err)
		pci_free_irq_vectors(pdev);
	return err;
}

static void sirdma_irq_fini(struct sirdma_dev *sdev)
{
	free_irq(pci_irq_vector(sdev->pdev, SOFTIRDMA_CTRL_VECTOR), sdev);
	pci_free_irq_vectors(sdev->pdev);
}

/*
 * sirdma_enable enables the function, whose control queue is set up, and asks it what it
 * offers. What fails is unwound by sirdma_halt.
 */
static int sirdma_enable(struct sirdma_dev *sdev, u32 version)
{
	struct pci_dev *pdev = sdev->pdev;
	int err;

	sirdma_wr(sdev, SOFTIRDMA_REG_DEV_CTRL, SOFTIRDMA_DEV_CTRL_ENABLE);
	if (!(sirdma_rd(sdev, SOFTIRDMA_REG_DEV_STATUS) & SOFTIRDMA_DEV_STATUS_READY)) {
		dev_err(&pdev->dev, "the function did not become ready: status 0x%x\n",
			sirdma_rd(sdev, SOFTIRDMA_REG_DEV_STATUS));
		return -EIO;
	}
	err = sirdma_query_caps(sdev);
	if (err) {
		dev_err(&pdev->dev, "QUERY_DEVICE failed: %d\n", err);
		return err;
	}
	dev_info(&pdev->dev,
		 "ABI %u.%u, caps 0x%x, %u QPs, %u CQs, %u MRs, %u MWs, %d MSI-X vectors, port %s\n",
		 SIRDMA_ABI_MAJOR(version), SIRDMA_ABI_MINOR(version), sdev->caps.caps,
		 sdev->caps.max_qp, sdev->caps.max_cq, sdev->caps.max_mr, sdev->caps.max_mw,
		 sdev->nvec,
		 sirdma_rd(sdev, SOFTIRDMA_REG_PORT_STATE) == SOFTIRDMA_PORT_ACTIVE ?
		 "active" : "down");
	return 0;
}

/*
 * sirdma_halt stops the function before the memory it was given goes: after the reset it
 * touches none of it.
 */
static void sirdma_halt(struct sirdma_dev *sdev)
{
	sirdma_reset(sdev);
	/* A reset that timed out leaves a function that may still write. */
	pci_clear_master(sdev->pdev);
	sirdma_av_free(sdev);
}

static int sirdma_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct sirdma_dev *sdev;
	u32 version;
	int err;

	sdev = sirdma_dev_alloc(pdev);
	if (!sdev)
		return -ENOMEM;
	err = sirdma_pci_init(sdev);
	if (err)
		goto err_free;
	err = sirdma_identify(sdev, &version);
	if (err)
		goto err_pci;
	err = sirdma_irq_init(sdev);
	if (err)
		goto err_pci;
	err = sirdma_ctrl_init(sdev);
	if (err)
		goto err_irq;
	err = sirdma_enable(sdev, version);
	if (err)
		goto err_ctrl;
	err = sirdma_eth_init(sdev);
	if (err) {
		dev_err(&pdev->dev, "the Ethernet function failed: %d\n", err);
		goto err_ctrl;
	}
	err = sirdma_ib_init(sdev);
	if (err) {
		dev_err(&pdev->dev, "the RDMA device failed: %d\n", err);
		goto err_eth;
	}
	queue_delayed_work(system_long_wq, &sdev->health, HZ);
	return 0;

err_eth:
	sirdma_work_disable(&sdev->health_gate, &sdev->health); /* a DEVICE_FATAL may have queued it */
	sirdma_eth_fini(sdev);
err_ctrl:
	sirdma_halt(sdev);
	sirdma_ctrl_fini(sdev);
err_irq:
	sirdma_irq_fini(sdev);
err_pci:
	sirdma_pci_fini(sdev);
err_free:
	kfree(sdev);
	return err;
}

static void sirdma_remove(struct pci_dev *pdev)
{
	struct sirdma_dev *sdev = pci_get_drvdata(pdev);

	sirdma_work_disable(&sdev->health_gate, &sdev->health); /* and no IRQ can queue it again */
	sirdma_ib_fini(sdev);
	sirdma_eth_fini(sdev);
	sirdma_halt(sdev);
	sirdma_irq_fini(sdev);
	sirdma_ctrl_fini(sdev);
	sirdma_pci_fini(sdev);
	kfree(sdev);
}

static struct pci_driver sirdma_pci_driver = {
	.name = SOFTIRDMA_DRV_NAME,
	.id_table = sirdma_pci_ids,
	.probe = sirdma_probe,
	.remove = sirdma_remove,
};
module_pci_driver(sirdma_pci_driver);

MODULE_DESCRIPTION("softirdma PCI RDMA function");
MODULE_LICENSE("Dual BSD/GPL");
/*
 * rdma-core's providers reach the device through ib_uverbs, which no symbol of ours pulls in:
 * modprobe loads it first, so /dev/infiniband/uverbs0 is there when the device is.
 */
MODULE_SOFTDEP("pre: ib_uverbs");
