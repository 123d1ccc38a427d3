#!/usr/bin/env python3
"""RDS over RDMA (rds_rdma) between two guests, every byte checked.

  rds_check.py serve ADDR PORT N
      N receiving sockets on ADDR, ports PORT..PORT+N-1, over the RDMA transport. Each message is
      checked against what its header says it holds and answered with an acknowledgement naming
      it and whether it was intact. Prints "listening" once bound, a line per run it saw, and ends
      on a stop message with its totals.
  rds_check.py send ADDR SERVER PORT N SIZE LABEL
      N sending sockets on ADDR send messages of many sizes (1 B to RDS's largest, 1 MiB) to the
      server's N sockets, each socket to every server socket in turn, until SIZE bytes went (64M,
      1G, ...), no more than WINDOW unanswered at a time; exits 0 once every message was answered
      intact, 1 on a bad answer or none within TIMEOUT seconds.
  rds_check.py stop ADDR SERVER PORT N
      tells the server to stop and prints its totals; exits 0 if it found nothing bad. (RDS drops
      what a socket has not yet delivered when it closes: the server keeps its answer's socket
      open until the stopper says BYE.)

Message: a header "RDSC", run, sender, sequence, length, then length bytes of random.Random
seeded with (run, sender, sequence). Answer: "RACK", run, sender, sequence, 1 if intact.
"""
import errno
import os
import random
import select
import socket
import struct
import sys
import time
import zlib

SOL_RDS = getattr(socket, "SOL_RDS", 276)
SO_RDS_TRANSPORT = 8
RDS_TRANS_IB = 0
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
MAX_MSG = 1 << 20
HDR = struct.Struct("!4sIIII")
ACK = struct.Struct("!4sIIII")
SIZES = [1, 7, 64, 1000, 1023, 1024, 1025, 4095, 4096, 4097, 8192, 65535, 65536, 100000, 262144,
         524287, MAX_MSG - HDR.size]
WINDOW = 32
TIMEOUT = 60


def payload(run, sender, seq, n):
    return random.Random((run << 40) ^ (sender << 32) ^ seq).randbytes(n)


def open_rds(addr, port):
    s = socket.socket(socket.AF_RDS, socket.SOCK_SEQPACKET, 0)
    s.setsockopt(SOL_RDS, SO_RDS_TRANSPORT, RDS_TRANS_IB)
    s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    s.bind((addr, port))
    s.setblocking(False)
    return s


def send(s, data, dest, deadline):
    """Queue one message; waits while the socket's queue is full or the receiver congested."""
    while True:
        try:
            return s.sendto(data, dest)
        except BlockingIOError:
            ev = select.POLLOUT
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            ev = select.POLLWRBAND
        if time.monotonic() > deadline:
            raise TimeoutError("send to %s:%d: no room within %d s" % (dest[0], dest[1], TIMEOUT))
        p = select.poll()
        p.register(s, ev)
        p.poll(50)


class Inbox:
    """The messages that come to any of a set of sockets."""

    def __init__(self, socks):
        self.socks = socks
        self.index = {s.fileno(): i for i, s in enumerate(socks)}
        self.poll = select.poll()
        for s in socks:
            self.poll.register(s, select.POLLIN)

    def take(self, wait_ms):
        """The messages waiting, as (socket's index, bytes, source address), after waiting up
        to wait_ms for one."""
        out = []
        for fd, _ in self.poll.poll(wait_ms):
            i = self.index[fd]
            while True:
                try:
                    data, addr = self.socks[i].recvfrom(MAX_MSG)
                except BlockingIOError:
                    break
                out.append((i, data, addr))
        return out


RDS_INFO_COUNTERS = 10000


def counters(s):
    """RDS's own counters that are not zero, as "name=value ..." (RDS_INFO_COUNTERS; through
    libc, as Python's getsockopt reads at most 1 KiB)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(1 << 16)
    size = ctypes.c_uint32(len(buf))
    if libc.getsockopt(s.fileno(), SOL_RDS, RDS_INFO_COUNTERS, buf, ctypes.byref(size)) < 0:
        return "(counters: %s)" % os.strerror(ctypes.get_errno())
    raw = buf.raw[:size.value]
    out = []
    for off in range(0, len(raw) - 39, 40):
        name = raw[off:off + 32].split(b"\0")[0].decode(errors="replace")
        value = struct.unpack_from("=Q", raw, off + 32)[0]
        if value:
            out.append("%s=%d" % (name, value))
    return " ".join(out)


def serve(addr, port, n):
    socks = [open_rds(addr, port + i) for i in range(n)]
    inbox = Inbox(socks)
    print("listening on %s ports %d-%d" % (addr, port, port + n - 1), flush=True)
    runs = {}
    bad = 0
    while True:
        for i, data, src in inbox.take(1000):
            if data[:4] == b"STOP":
                total = sum(r[0] for r in runs.values()), sum(r[1] for r in runs.values())
                summary = "checked %d messages, %d bytes, bad=%d" % (total[0], total[1], bad)
                send(socks[i], summary.encode(), src, time.monotonic() + TIMEOUT)
                print(summary, flush=True)
                print("rds counters: " + counters(socks[0]), flush=True)
                # Closing drops what RDS has not yet delivered: the answer stays until the stopper
                # says it has it.
                linger(inbox, 10)
                return 0 if bad == 0 else 1
            if len(data) < HDR.size:
                print("short message of %d bytes from %s" % (len(data), src), flush=True)
                bad += 1
                continue
            magic, run, sender, seq, length = HDR.unpack_from(data)
            good = magic == b"RDSC" and length == len(data) - HDR.size and \
                data[HDR.size:] == payload(run, sender, seq, length)
            if not good:
                bad += 1
                print("bad message run=%d sender=%d seq=%d length=%d got %d bytes" %
                      (run, sender, seq, length, len(data) - HDR.size), flush=True)
            if run not in runs:
                runs[run] = [0, 0]
                print("run %08x from %s" % (run, src[0]), flush=True)
            runs[run][0] += 1
            runs[run][1] += len(data) - HDR.size
            send(socks[i], ACK.pack(b"RACK", run, sender, seq, int(good)), src, time.monotonic() + TIMEOUT)


def linger(inbox, seconds):
    """Keep inbox's sockets open until a BYE comes to one, at most seconds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(data[:3] == b"BYE" for _, data, _ in inbox.take(200)):
            return


def size_arg(text):
    units = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def client(addr, server, port, n, total, label):
    run = zlib.crc32(label.encode()) ^ ((os.getpid() << 16) & 0xffffffff)
    socks = [open_rds(addr, 0) for _ in range(n)]
    inbox = Inbox(socks)
    sent = acked = msgs = 0
    seq = [0] * n
    pending = {}
    turn = 0
    start = time.monotonic()
    last = start
    while sent < total or pending:
        if sent < total and len(pending) < WINDOW:
            i = turn % n
            length = min(SIZES[turn % len(SIZES)], total - sent)
            dest = (server, port + (turn // n + i) % n)
            turn += 1
            seq[i] += 1
            msg = HDR.pack(b"RDSC", run, i, seq[i], length) + payload(run, i, seq[i], length)
            send(socks[i], msg, dest, time.monotonic() + TIMEOUT)
            pending[(i, seq[i])] = length
            sent += length
            msgs += 1
            wait = 0
        else:
            wait = 1000
        for i, data, _ in inbox.take(wait):
            magic, r, sender, s, good = ACK.unpack_from(data)
            if magic != b"RACK" or r != run or (sender, s) not in pending:
                print("unexpected answer %r" % data[:ACK.size], flush=True)
                return 1
            if not good:
                print("the server found message sender=%d seq=%d (%d bytes) damaged" %
                      (sender, s, pending[(sender, s)]), flush=True)
                return 1
            acked += pending.pop((sender, s))
            last = time.monotonic()
        if pending and time.monotonic() - last > TIMEOUT:
            print("no answer for %d s; %d messages unanswered" % (TIMEOUT, len(pending)), flush=True)
            return 1
    took = time.monotonic() - start
    print("%s: %d messages, %d bytes, sizes %d-%d B, %d sockets to %d, all checked, %.1f s, %.1f MB/s" %
          (label, msgs, acked, min(SIZES), max(SIZES), n, n, took, acked / took / 1e6), flush=True)
    return 0


def stop(addr, server, port, n):
    s = open_rds(addr, 0)
    inbox = Inbox([s])
    deadline = time.monotonic() + TIMEOUT
    send(s, b"STOP", (server, port), deadline)
    while time.monotonic() < deadline:
        for _, data, src in inbox.take(1000):
            text = data.decode(errors="replace")
            print(text, flush=True)
            send(s, b"BYE", src, deadline)
            linger(inbox, 1)
            return 0 if text.endswith("bad=0") else 1
    print("the server did not answer the stop within %d s" % TIMEOUT, flush=True)
    return 1


def main(argv):
    try:
        if len(argv) == 4 and argv[0] == "serve":
            return serve(argv[1], int(argv[2]), int(argv[3]))
        if len(argv) == 7 and argv[0] == "send":
            return client(argv[1], argv[2], int(argv[3]), int(argv[4]), size_arg(argv[5]), argv[6])
        if len(argv) == 5 and argv[0] == "stop":
            return stop(argv[1], argv[2], int(argv[3]), int(argv[4]))
    except (OSError, TimeoutError, ValueError) as e:
        print("rds_check: %s" % e, flush=True)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
