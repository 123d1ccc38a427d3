// SPDX-License-Identifier: MIT
/*
 * /dev/infiniband/uverbsN and rdma_cm: the file a program opens is a memfd of softirdma's (so
 * the rxe provider's mmap of its queues needs nothing of ours), its commands go to softirdma
 * over the library's own socket, and what the kernel would write back (responses, fd numbers)
 * the library writes into the program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload.h"

int sird_open_dev(int kind, uint32_t index, int flags)
{
	int cloexec = !!(flags & O_CLOEXEC);
	uint32_t arg = index, token = 0;
	int fd = -1, conn;
	struct sird_file *f;

	if (kind == SIRD_UVERBS && sird_flag("SOFTIRDMA_MEMLOCK"))
		arg |= SIRD_UVERBS_MEMLOCK;
	conn = sird_connect(kind, arg, &fd, cloexec, &token);
	if (conn < 0) {
		errno = -conn;
		return -1;
	}
	if (token & SIRD_ANSWER_SERVE_MEMORY) {
		token &= ~SIRD_ANSWER_SERVE_MEMORY;
		sird_serve_memory();
	}
	if ((flags & O_NONBLOCK) && fcntl(fd, F_SETFL, O_RDWR | O_NONBLOCK) < 0)
		sird_log("O_NONBLOCK: %s\n", strerror(errno));
	f = sird_add(fd, kind, conn);
	if (!f) {
		sird_real.close(fd);
		sird_real.close(conn);
		errno = EMFILE;
		return -1;
	}
	f->token = token;
	f->index = index;
	return fd;
}

/*
 * infd is the fd a command passes in, or -1: uverbs' CREATE_CQ names its completion channel,
 * rdma_cm's MIGRATE_ID the file an ID leaves.
 */
static int command_infd(int kind, const uint8_t *buf, size_t len)
{
	uint32_t cmd;
	int32_t fd;
	size_t off;

	if (len < 8)
		return -1;
	memcpy(&cmd, buf, 4);
	if (kind == SIRD_RDMACM && cmd == 18)
		off = 20;
	else if (kind == SIRD_UVERBS && cmd == 18)
		off = 32;
	else if (kind == SIRD_UVERBS && cmd == (0x80000000u | 18))
		off = 40;
	else
		return -1;
	if (len < off + 4)
		return -1;
	memcpy(&fd, buf + off, 4);
	return fd;
}

static ssize_t send_command(int conn, const void *buf, size_t len, int infd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (infd >= 0 && fcntl(infd, F_GETFD) >= 0) {
		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &infd, sizeof(int));
	}
	return sird_real.sendmsg(conn, &mh, MSG_NOSIGNAL);
}

/* apply writes a reply's bytes and fd numbers into the program, as the kernel's copy_to_user. */
static ssize_t apply(const uint8_t *msg, size_t n, const int *fds, int nfds)
{
	struct sird_reply r;
	struct sird_write w;
	size_t off = sizeof(r), data;
	int i;

	if (n < sizeof(r))
		return -EIO;
	memcpy(&r, msg, sizeof(r));
	data = off + (size_t)r.nwrites * sizeof(w);
	if (data > n)
		return -EIO;
	for (i = 0; i < r.nwrites; i++) {
		memcpy(&w, msg + off + i * sizeof(w), sizeof(w));
		if (w.fd >= 0) {
			if (w.fd >= nfds || w.len != 4)
				return -EIO;
			memcpy((void *)(uintptr_t)w.addr, &fds[w.fd], 4);
			continue;
		}
		if (data + w.len > n)
			return -EIO;
		memcpy((void *)(uintptr_t)w.addr, msg + data, w.len);
		data += w.len;
	}
	return r.ret;
}

static ssize_t recv_reply(int conn, uint8_t *msg, size_t cap)
{
	char cbuf[CMSG_SPACE(SIRD_MAX_FDS * sizeof(int))];
	struct iovec iov = { msg, cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	int fds[SIRD_MAX_FDS], nfds = 0;
	ssize_t n;

	do {
		n = sird_real.recvmsg(conn, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -EIO;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (nfds > SIRD_MAX_FDS)
			nfds = SIRD_MAX_FDS;
		memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
	}
	return apply(msg, n, fds, nfds);
}

static ssize_t exchange(struct sird_file *f, const void *buf, size_t len)
{
	static __thread uint8_t msg[SIRD_MAX_MSG];
	ssize_t r;

	pthread_mutex_lock(&f->lock);
	r = send_command(f->conn, buf, len, command_infd(f->kind, buf, len));
	if (r >= 0)
		r = recv_reply(f->conn, msg, sizeof(msg));
	else
		r = -EIO;
	pthread_mutex_unlock(&f->lock);
	return r;
}

/* is_get_event says whether a command is rdma_cm's GET_EVENT, which waits for an event. */
static int is_get_event(struct sird_file *f, const void *buf, size_t len)
{
	uint32_t cmd;

	if (f->kind != SIRD_RDMACM || len < 8)
		return 0;
	memcpy(&cmd, buf, 4);
	return cmd == 12;
}

/*
 * park keeps a thread that waits for an event on a file its program closed meanwhile: in the
 * kernel its write holds the file and waits on, until the program exits.
 */
static void park(void)
{
	for (;;)
		pause();
}

ssize_t sird_uverbs_write(struct sird_file *f, int fd, const void *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t r;

	if (len > SIRD_MAX_MSG) {
		errno = EINVAL;
		return -1;
	}
	/*
	 * GET_EVENT blocks in the kernel until an event comes. softirdma answers at once; the
	 * file is readable while events wait, so a blocking one waits here, without the lock
	 * that other threads' commands on the file need.
	 */
	for (;;) {
		r = exchange(f, buf, len);
		if (!is_get_event(f, buf, len))
			break;
		if (r == -EIO && !f->used)
			park();
		if (r != -EAGAIN || (fcntl(fd, F_GETFL) & O_NONBLOCK))
			break;
		if (poll(&p, 1, -1) < 0 && errno != EINTR) {
			r = -errno;
			break;
		}
		if (p.revents & POLLNVAL)
			park();
	}
	if (len >= 8)
		sird_log("command %u of %zu bytes: %zd\n", *(const uint32_t *)buf, len, r);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

ssize_t write(int fd, const void *buf, size_t len)
{
	struct sird_file *f;

	sird_init();
	f = sird_lookup(fd);
	if (f && f->kind != SIRD_NETLINK)
		return sird_uverbs_write(f, fd, buf, len);
	return sird_real.write(fd, buf, len);
}

int ioctl(int fd, unsigned long req, ...)
{
	struct sird_file *f;
	va_list ap;
	void *arg;

	sird_init();
	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	f = sird_lookup(fd);
	if (f && f->kind != SIRD_NETLINK) {
		/* The ioctl ABI is not served: libibverbs then speaks write(). */
		errno = EPROTONOSUPPORT;
		return -1;
	}
	return sird_real.ioctl(fd, req, arg);
}

/* last_copy says whether fd is the program's last file of f's inode. */
static int last_copy(int fd, struct sird_file *f)
{
	DIR *d = sird_real.opendir("/proc/self/fd");
	struct dirent *e;
	struct stat st;
	int other = 0, i;

	if (!d)
		return 1;
	while (!other && (e = readdir(d)) != NULL) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		i = atoi(e->d_name);
		if (i == fd || i == f->conn || i == dirfd(d))
			continue;
		if (sird_real.fstat(i, &st) == 0 && st.st_ino == f->ino && st.st_dev == f->dev)
			other = 1;
	}
	closedir(d);
	return !other;
}

int close(int fd)
{
	struct sird_file *f;

	sird_init();
	f = sird_lookup(fd);
	if (f && fd != f->conn && last_copy(fd, f))
		sird_forget(f);
	return sird_real.close(fd);
}
