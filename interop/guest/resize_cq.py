# resize_cq.py: ibv_resize_cq on softirdma0 (rdma-core's own test of it needs UD QPs). A CQ of 3
# is shrunk to 1 and grown to 64; an RC pair over the device's loopback completes 20 WRITEs on
# it; 6 more are written (their data seen in memory) and left unpolled across a resize to 200
# (the device moves what has completed to the new ring, the rest completes into it), 14 more
# follow: the 20 come back in order, all SUCCESS. Prints "resize_cq: ok" or the failure.
import sys

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

import rcpair

fail = rcpair.failer('resize_cq')


def poll(cq, n):
    return rcpair.poll(cq, n, fail)


ctx = Context(name=sys.argv[1] if len(sys.argv) > 1 else 'softirdma0')
pd = PD(ctx)
cq = CQ(ctx, 3)
cq.resize(1)
if cq.cqe < 1:
    fail('cqe %d after resize(1)' % cq.cqe)
cq.resize(64)
if cq.cqe < 64:
    fail('cqe %d after resize(64)' % cq.cqe)

access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
mr = MR(pd, 4096, access)
mr.write(bytes(i % 255 + 1 for i in range(2048)), 2048)  # sources nonzero
mr.write(bytes(2048), 2048, 2048)  # destinations zero
a, b = rcpair.rc_pair(ctx, pd, cq, access, 64)


def write(i):
    wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                sg=[SGE(mr.buf + 8 * (i % 256), 8, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(mr.rkey, mr.buf + 2048 + 8 * (i % 256))
    a.post_send(wr)


for i in range(20):
    write(i)
if [w.wr_id for w in poll(cq, 20)] != list(range(20)):
    fail('first 20 out of order')
for i in range(20, 26):
    write(i)
# The last WRITE's data in place: the six are done or nearly (their completions unpolled).
for _ in range(2000000):
    if mr.read(8, 2048 + 8 * 25) == mr.read(8, 8 * 25):
        break
else:
    fail('the sixth WRITE never landed')
cq.resize(200)
if cq.cqe < 200:
    fail('cqe %d after resize(200)' % cq.cqe)
for i in range(26, 40):
    write(i)
wcs = poll(cq, 20)
if [w.wr_id for w in wcs] != list(range(20, 40)) or any(w.status != e.IBV_WC_SUCCESS for w in wcs):
    fail('after the resize: %s' % [(w.wr_id, w.status) for w in wcs])
print('resize_cq: ok', flush=True)
