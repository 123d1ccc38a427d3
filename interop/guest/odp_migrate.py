# odp_migrate.py DEV: an on-demand MR whose pages the kernel migrates between NUMA nodes during
# RDMA traffic (run in a VM with two nodes). An RC pair over DEV's loopback: each round the
# program fills the on-demand buffer, moves every one of its pages to the other node
# (move_pages(2), checked: the kernel says each page is there now), WRITEs the buffer to a
# pinned MR and WRITEs a pinned MR back into the buffer's second half, and checks every byte,
# read through the process's own mapping. A device that kept using a page after its
# invalidation would read the old page's bytes or write into it, and the check would see the
# new page without them. Prints "odp_migrate: ok ROUNDS rounds, MOVED page moves" or the failure.
import ctypes
import mmap
import os
import sys

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

import rcpair

PAGES, ROUNDS = 64, 12
PAGE = mmap.PAGESIZE
SIZE = PAGES * PAGE
HALF = SIZE // 2
SYS_move_pages = 279  # x86_64
MPOL_MF_MOVE = 1 << 1


fail = rcpair.failer('odp_migrate')


libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def move(addr, node):
    """Moves the PAGES pages from addr to node; returns the node each page is on after."""
    pages = (ctypes.c_void_p * PAGES)(*[addr + i * PAGE for i in range(PAGES)])
    nodes = (ctypes.c_int * PAGES)(*[node] * PAGES)
    status = (ctypes.c_int * PAGES)()
    r = libc.syscall(SYS_move_pages, 0, PAGES, pages, nodes, status, MPOL_MF_MOVE)
    if r < 0:
        fail('move_pages: %s' % os.strerror(ctypes.get_errno()))
    where = (ctypes.c_int * PAGES)()
    r = libc.syscall(SYS_move_pages, 0, PAGES, pages, None, where, 0)
    if r < 0:
        fail('move_pages (query): %s' % os.strerror(ctypes.get_errno()))
    return list(where)


# Automatic NUMA balancing moves pages of its own accord, and its hinting makes them read as not
# present for a moment (move_pages says -ENOENT): the pages are to be where this program puts them.
try:
    with open('/proc/sys/kernel/numa_balancing', 'w') as f:
        f.write('0')
except FileNotFoundError:
    pass

ctx = Context(name=sys.argv[1] if len(sys.argv) > 1 else 'softirdma0')
attr = ctx.query_device_ex()
if not attr.odp_caps.general_caps & e.IBV_ODP_SUPPORT:
    fail('%s does not offer on-demand paging' % ctx.name)
pd = PD(ctx)
cq = CQ(ctx, 64)
buf = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
odp = MR(pd, SIZE, access | e.IBV_ACCESS_ON_DEMAND, address=addr)
pinned = MR(pd, SIZE, access)
a, b = rcpair.rc_pair(ctx, pd, cq, access, 16, min_rnr_timer=1)


def write(wr_id, src, lkey, dst, rkey, n):
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src, n, lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(rkey, dst)
    a.post_send(wr)
    wc = rcpair.poll(cq, 1, fail)[0]
    if wc.status != e.IBV_WC_SUCCESS or wc.wr_id != wr_id:
        fail('WRITE %d: status %d' % (wr_id, wc.status))


moved = 0
node = 0
for r in range(ROUNDS):
    pattern = bytes((r * 7 + i) % 251 for i in range(SIZE))
    buf[:] = pattern
    node = 1 - node
    where = move(addr, node)
    if where != [node] * PAGES:
        fail('round %d: pages on nodes %s after moving them to %d' % (r, sorted(set(where)), node))
    moved += PAGES
    # The device reads the on-demand buffer (its pages just moved)...
    write(2 * r, addr, odp.lkey, pinned.buf, pinned.rkey, SIZE)
    if pinned.read(SIZE, 0) != pattern:
        fail('round %d: the WRITE from the on-demand MR carried other bytes' % r)
    # ...and writes into it, after another move.
    back = bytes((r * 13 + i) % 241 for i in range(HALF))
    pinned.write(back, HALF)
    node = 1 - node
    where = move(addr, node)
    if where != [node] * PAGES:
        fail('round %d: pages on nodes %s after moving them back to %d' % (r, sorted(set(where)), node))
    moved += PAGES
    write(2 * r + 1, pinned.buf, pinned.lkey, addr + HALF, odp.rkey, HALF)
    if buf[HALF:] != back or buf[:HALF] != pattern[:HALF]:
        fail('round %d: the on-demand buffer does not hold what was written into it' % r)
print('odp_migrate: ok %d rounds, %d page moves' % (ROUNDS, moved), flush=True)
