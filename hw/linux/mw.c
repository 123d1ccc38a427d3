// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Memory windows: keys made free by ALLOC_STAG, bound by the send queue's work requests. */
#include "softirdma.h"

int sirdma_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct softirdma_alloc_stag_args a = {
		.pd = cpu_to_le32(to_pdn(ibmw->pd)),
		/* libibverbs' type 2 is type 2B */
		.kind = cpu_to_le32(ibmw->type == IB_MW_TYPE_1 ? SOFTIRDMA_STAG_MW_TYPE1 :
							       SOFTIRDMA_STAG_MW_TYPE2_B),
	};
	u32 res[SOFTIRDMA_CMD_RESULTS];
	int err;

	err = sirdma_cmd(to_sdev(ibmw->device), SOFTIRDMA_OP_ALLOC_STAG, &a, sizeof(a), res,
			 NULL, 0);
	if (err)
		return err;
	ibmw->rkey = res[SOFTIRDMA_RESULT_NUM];
	return 0;
}

int sirdma_dealloc_mw(struct ib_mw *ibmw)
{
	int err = sirdma_num_cmd(to_sdev(ibmw->device), SOFTIRDMA_OP_DEALLOC_STAG, ibmw->rkey);

	return err == -EIO ? 0 : err;
}
