// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * What the objects the device makes (CQs, QPs, SRQs, MRs, windows) have in common: a command that
 * names one by number, the event handlers' tables an object is entered in and taken out of, and
 * the doorbell slots the device gives CQs and QPs.
 */
#include "softirdma.h"

/* sirdma_num_cmd runs a command whose only argument is an object's number. */
int sirdma_num_cmd(struct sirdma_dev *sdev, u16 op, u32 num)
{
	struct softirdma_num_args a = { .num = cpu_to_le32(num) };

	return sirdma_cmd(sdev, op, &a, sizeof(a), NULL, NULL, 0);
}

/*
 * sirdma_unmake unwinds a creation that fails after the device made the object: out of the
 * table the event handlers look it up in (if it got there: obj's entry only), a handler that
 * may still hold it waited out, then destroyed by the device. A device that refuses the
 * destroy is failed, its DMA stopped, so that the caller may free what the object used.
 */
void sirdma_unmake(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj)
{
	struct softirdma_num_args a = { .num = cpu_to_le32(num) };

	xa_cmpxchg(xa, num, obj, NULL, 0);
	synchronize_rcu();
	sirdma_let_go(sdev, op, &a, sizeof(a), NULL);
}

/*
 * sirdma_enter enters an object the device just made in the table the event handlers look it up
 * in. One whose doorbell slot the driver cannot use (usable is false: -EIO), or that the table
 * refuses, is unmade instead.
 */
int sirdma_enter(struct sirdma_dev *sdev, struct xarray *xa, u16 destroy, u32 num, void *obj,
		 bool usable)
{
	int err = usable ? xa_insert(xa, num, obj, GFP_KERNEL) : -EIO;

	if (err)
		sirdma_unmake(sdev, xa, destroy, num, obj);
	return err;
}

/*
 * sirdma_destroy_obj has the device destroy an object, then takes it out of the event
 * handlers' table and waits out a handler that may still hold it. A failed device keeps
 * nothing: its -EIO lets the object go all the same; any other error keeps it.
 */
int sirdma_destroy_obj(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj)
{
	int err = sirdma_num_cmd(sdev, op, num);

	if (err && err != -EIO)
		return err;
	xa_cmpxchg(xa, num, obj, NULL, 0);
	synchronize_rcu();
	return 0;
}

/*
 * sirdma_destroy_queued destroys an object as sirdma_destroy_obj does, then releases its rings
 * (rq may be NULL): the device no longer touches them.
 */
int sirdma_destroy_queued(struct sirdma_dev *sdev, struct xarray *xa, u16 op, u32 num, void *obj,
			  struct sirdma_queue *q, struct sirdma_queue *rq)
{
	int err = sirdma_destroy_obj(sdev, xa, op, num, obj);

	if (err)
		return err;
	sirdma_queue_release(q);
	sirdma_queue_release(rq);
	return 0;
}

/*
 * sirdma_slot_ok says whether a doorbell slot the device gave lies in the doorbell BAR: the
 * driver writes there without further checks.
 */
bool sirdma_slot_ok(struct sirdma_dev *sdev, u32 base, u32 slot, u32 max)
{
	u64 end = base + (u64)SOFTIRDMA_DOORBELL_STRIDE * slot + sizeof(u32);

	if (slot < max && end <= pci_resource_len(sdev->pdev, SOFTIRDMA_BAR_DOORBELL))
		return true;
	dev_err(&sdev->pdev->dev, "doorbell slot %u out of range\n", slot);
	return false;
}
