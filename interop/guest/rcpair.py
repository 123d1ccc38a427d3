# rcpair.py: what the guest's verbs checks share (resize_cq.py, odp_migrate.py): a failure that
# ends the program with its name, polling a CQ for n completions, and an RC pair connected over
# the device's loopback. Copied beside them into /share.
import sys

from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
import pyverbs.enums as e

PORT, GID = 1, 1


def failer(name):
    """A function that prints "NAME: FAIL msg" and exits 1."""
    def fail(msg):
        print('%s: FAIL' % name, msg, flush=True)
        sys.exit(1)
    return fail


def poll(cq, n, fail):
    """The next n completions of cq, or fail."""
    got = []
    for _ in range(5000000):
        k, wcs = cq.poll(n - len(got))
        got += wcs[:k]
        if len(got) == n:
            return got
    fail('%d of %d completions' % (len(got), n))


def rc_pair(ctx, pd, cq, access, max_send_wr, min_rnr_timer=12):
    """Two RC QPs on cq, each connected to the other over the device's GID 1, in RTS."""
    cap = QPCap(max_send_wr=max_send_wr, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    a = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    b = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    gr = GlobalRoute(dgid=ctx.query_gid(PORT, GID), sgid_index=GID)
    for q, peer in ((a, b), (b, a)):
        attr = QPAttr(port_num=PORT)
        attr.qp_access_flags = access
        attr.path_mtu = e.IBV_MTU_1024
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = min_rnr_timer, 14, 7, 7
        attr.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=gr)
        attr.dest_qp_num = peer.qp_num
        attr.rq_psn = attr.sq_psn = 0
        q.to_rts(attr)
    return a, b
