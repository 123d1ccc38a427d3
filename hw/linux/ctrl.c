// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * The control queue: a ring of commands in host memory, run by the device in ring order, each
 * answered in its own entry (results, then the status with its done bit) and signalled on
 * MSI-X vector 0. The driver keeps one command outstanding.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>

#include "softirdma.h"

#define CTRLQ_ENTRIES (1U << SOFTIRDMA_CTRLQ_LOG)
#define CTRLQ_BYTES (CTRLQ_ENTRIES * SOFTIRDMA_CTRL_ENTRY_SIZE)

int sirdma_ctrl_init(struct sirdma_dev *sdev)
{
	/* A page-sized coherent allocation is page-aligned, as the ring's base must be. */
	sdev->ctrlq = dma_alloc_coherent(&sdev->pdev->dev, CTRLQ_BYTES, &sdev->ctrlq_dma,
					 GFP_KERNEL);
	if (!sdev->ctrlq)
		return -ENOMEM;
	sdev->ctrlq_prod = 0;
	sirdma_wr(sdev, SOFTIRDMA_REG_CTRL_Q_BASE_L, lower_32_bits(sdev->ctrlq_dma));
	sirdma_wr(sdev, SOFTIRDMA_REG_CTRL_Q_BASE_H, upper_32_bits(sdev->ctrlq_dma));
	sirdma_wr(sdev, SOFTIRDMA_REG_CTRL_Q_LOG, SOFTIRDMA_CTRLQ_LOG);
	return 0;
}

void sirdma_ctrl_fini(struct sirdma_dev *sdev)
{
	if (sdev->ctrlq)
		dma_free_coherent(&sdev->pdev->dev, CTRLQ_BYTES, sdev->ctrlq, sdev->ctrlq_dma);
	sdev->ctrlq = NULL;
}

irqreturn_t sirdma_ctrl_irq(int irq, void *data)
{
	struct sirdma_dev *sdev = data;

	complete(&sdev->ctrl_done);
	return IRQ_HANDLED;
}

/*
 * sirdma_fail marks the device failed, its DMA stopped first: once failed, destroys succeed
 * without the device and their callers free what it was given, which it must not write then.
 */
void sirdma_fail(struct sirdma_dev *sdev)
{
	if (READ_ONCE(sdev->failed))
		return;
	pci_clear_master(sdev->pdev);
	WRITE_ONCE(sdev->failed, true);
}

/* sirdma_fatal says whether the function stopped (FATAL, or no longer READY: it was reset
 * behind the driver and forgot everything), or is gone (reads of a vanished device give all
 * ones), and marks the device failed if so. Only for a function the driver has enabled.
 */
bool sirdma_fatal(struct sirdma_dev *sdev)
{
	u32 status = sirdma_rd(sdev, SOFTIRDMA_REG_DEV_STATUS);

	if (status == ~0U || (status & SOFTIRDMA_DEV_STATUS_FATAL) ||
	    !(status & SOFTIRDMA_DEV_STATUS_READY)) {
		if (!READ_ONCE(sdev->failed))
			dev_err(&sdev->pdev->dev, "function failed: status 0x%x, fatal code %u\n",
				status, sirdma_rd(sdev, SOFTIRDMA_REG_FATAL_CODE));
		sirdma_fail(sdev);
	}
	return READ_ONCE(sdev->failed);
}

/**
 * sirdma_cmd - run one control command and wait for its answer
 * @sdev: the device
 * @op: SOFTIRDMA_OP_*
 * @args: the command's arguments (copied into the entry)
 * @len: their size, at most the entry's argument area
 * @results: if not NULL, the SOFTIRDMA_CMD_RESULTS result words (SOFTIRDMA_RESULT_*)
 * @answer: if not NULL, where the argument area goes as the device left it (the queries write
 *	their answers there)
 * @answer_len: how much of it
 *
 * Return: 0, the errno the device completed the command with (negated), or -EIO once the
 * function failed (a command that times out fails it).
 */
int sirdma_cmd(struct sirdma_dev *sdev, u16 op, const void *args, size_t len,
	       u32 *results, void *answer, size_t answer_len)
{
	struct softirdma_ctrl_entry *e;
	unsigned long deadline;
	u32 status = 0;
	unsigned int i;
	int err;

	if (len > sizeof(e->args) || answer_len > sizeof(e->args))
		return -EINVAL;

	mutex_lock(&sdev->ctrl_lock);
	if (READ_ONCE(sdev->failed)) {
		err = -EIO;
		goto out;
	}
	e = &sdev->ctrlq[sdev->ctrlq_prod];
	memset(e, 0, sizeof(*e));
	e->opcode = cpu_to_le16(op);
	if (len)
		memcpy(e->args, args, len);
	reinit_completion(&sdev->ctrl_done);
	sdev->ctrlq_prod = (sdev->ctrlq_prod + 1) & (CTRLQ_ENTRIES - 1);
	/* The entry is in memory before the doorbell: writel orders prior writes. */
	sirdma_wr(sdev, SOFTIRDMA_REG_CTRL_Q_PROD, sdev->ctrlq_prod);

	/* Wait for the done bit; the interrupt only wakes us early. */
	deadline = jiffies + msecs_to_jiffies(SOFTIRDMA_CMD_TIMEOUT_MS);
	for (;;) {
		status = le32_to_cpu(READ_ONCE(e->status));
		if (status & SOFTIRDMA_CTRL_DONE)
			break;
		if (sirdma_fatal(sdev)) {
			err = -EIO;
			goto out;
		}
		if (time_after(jiffies, deadline)) {
			/*
			 * A function that does not answer is failed: the slot may still be
			 * read, and callers free what the command was about.
			 */
			dev_err(&sdev->pdev->dev,
				"control command 0x%x timed out: device failed\n", op);
			sirdma_fail(sdev); /* before any caller frees what it may write */
			err = -EIO;
			goto out;
		}
		wait_for_completion_timeout(&sdev->ctrl_done, msecs_to_jiffies(10));
	}
	dma_rmb(); /* the results before the status that says they are there */
	status &= ~SOFTIRDMA_CTRL_DONE;
	/* An errno as user space knows them; anything else from the device is an I/O error
	 * (a value past MAX_ERRNO would make ERR_PTR() a pointer).
	 */
	err = status < ERESTARTSYS ? -(int)status : -EIO;
	if (results)
		for (i = 0; i < SOFTIRDMA_CMD_RESULTS; i++)
			results[i] = get_unaligned_le32(e->result + i * sizeof(u32));
	if (answer)
		memcpy(answer, e->args, answer_len);
out:
	mutex_unlock(&sdev->ctrl_lock);
	return err;
}

/*
 * sirdma_let_go runs a command after which the caller frees what the function was given for an
 * object (its rings, its pages). A function that refuses is failed, its DMA stopped, first: the
 * memory goes all the same.
 */
int sirdma_let_go(struct sirdma_dev *sdev, u16 op, const void *args, size_t len, u32 *results)
{
	int err = sirdma_cmd(sdev, op, args, len, results, NULL, 0);

	if (err && err != -EIO) {
		dev_err(&sdev->pdev->dev,
			"command 0x%x refused (%d) for memory about to be freed: device failed\n",
			op, err);
		sirdma_fail(sdev);
	}
	return err;
}
