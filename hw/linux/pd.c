// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* Protection domains: numbers the device hands out (ALLOC_PD) and takes back (DEALLOC_PD). */
#include "softirdma.h"

int sirdma_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct sirdma_pd *pd = to_spd(ibpd);
	u32 res[SOFTIRDMA_CMD_RESULTS];
	int err;

	err = sirdma_cmd(to_sdev(ibpd->device), SOFTIRDMA_OP_ALLOC_PD, NULL, 0, res, NULL, 0);
	if (err)
		return err;
	pd->pdn = res[SOFTIRDMA_RESULT_NUM];
	return 0;
}

int sirdma_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct sirdma_pd *pd = to_spd(ibpd);
	int err = sirdma_num_cmd(to_sdev(ibpd->device), SOFTIRDMA_OP_DEALLOC_PD, pd->pdn);

	return err == -EIO ? 0 : err; /* a failed device keeps nothing */
}
