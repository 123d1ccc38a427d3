// SPDX-License-Identifier: MIT
/*
 * The copy service: where softirdma cannot reach the program's memory itself (a seccomp filter
 * that denies process_vm_readv, as Docker's default profile does without CAP_SYS_PTRACE; the
 * program in a pid namespace softirdma cannot see into), it says so in its answer to the
 * device's hello, and a thread of the library copies for it: softirdma sends what to read or
 * write, the thread does it through /proc/self/mem (which a process may always use on itself,
 * and which answers EIO for memory that is not mapped rather than faulting) and answers.
 *
 * A request is { op (1 read, 2 write), len, addr } and, for a write, the bytes; the answer is
 * { err (0 or an errno), len } and, for a read, the bytes. One connection per process, of kind
 * SIRD_MEMORY.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload.h"

static pthread_mutex_t memory_lock = PTHREAD_MUTEX_INITIALIZER;
static int memory_started; /* this process serves its memory */

static void *serve_memory(void *arg)
{
	int conn = (int)(intptr_t)arg;
	int mem = sird_real.open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	unsigned char *buf = malloc(SIRD_MAX_MSG);
	size_t size = SIRD_MAX_MSG;
	sigset_t all;

	/* The program's signals are for its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (; buf;) {
		struct sird_mem_req req;
		struct sird_mem_reply rep = { 0, 0 };
		struct iovec iov[2];
		struct msghdr mh;
		ssize_t n;

		iov[0].iov_base = &req;
		iov[0].iov_len = sizeof(req);
		iov[1].iov_base = buf;
		iov[1].iov_len = size - sizeof(req);
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = iov;
		mh.msg_iovlen = 2;
		n = sird_real.recvmsg(conn, &mh, 0);
		if (n < (ssize_t)sizeof(req))
			break; /* softirdma went away */
		n -= sizeof(req);
		if (req.len > size - sizeof(rep) || (req.op == SIRD_MEM_WRITE && (size_t)n != req.len) ||
		    (req.op != SIRD_MEM_READ && req.op != SIRD_MEM_WRITE)) {
			rep.err = EINVAL;
		} else if (mem < 0) {
			rep.err = EACCES;
		} else if (req.op == SIRD_MEM_READ) {
			n = pread(mem, buf, req.len, (off_t)req.addr);
			if (n < 0)
				rep.err = errno;
			else
				rep.len = n;
		} else {
			n = pwrite(mem, buf, req.len, (off_t)req.addr);
			if (n < 0)
				rep.err = errno;
			else
				rep.len = n;
		}
		iov[0].iov_base = &rep;
		iov[0].iov_len = sizeof(rep);
		iov[1].iov_len = req.op == SIRD_MEM_READ && !rep.err ? rep.len : 0;
		memset(&mh, 0, sizeof(mh));
		mh.msg_iov = iov;
		mh.msg_iovlen = 2;
		if (sird_real.sendmsg(conn, &mh, MSG_NOSIGNAL) < 0)
			break;
	}
	free(buf);
	if (mem >= 0)
		sird_real.close(mem);
	sird_real.close(conn);
	pthread_mutex_lock(&memory_lock);
	memory_started = 0;
	pthread_mutex_unlock(&memory_lock);
	return NULL;
}

void sird_serve_memory(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int conn;

	pthread_mutex_lock(&memory_lock);
	if (memory_started) {
		pthread_mutex_unlock(&memory_lock);
		return;
	}
	conn = sird_connect(SIRD_MEMORY, 0, NULL, 1, NULL);
	if (conn < 0) {
		sird_log("copy service: cannot connect: %s\n", strerror(-conn));
		pthread_mutex_unlock(&memory_lock);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, serve_memory, (void *)(intptr_t)conn) == 0) {
		memory_started = 1;
		sird_log("copy service started\n");
	} else {
		sird_real.close(conn);
	}
	pthread_attr_destroy(&attr);
	pthread_mutex_unlock(&memory_lock);
}

/* A forked child has none of its parent's threads: its service starts anew when it attaches. */
void sird_memory_after_fork(void)
{
	pthread_mutex_init(&memory_lock, NULL);
	memory_started = 0;
}
