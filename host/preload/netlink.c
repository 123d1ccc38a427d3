// SPDX-License-Identifier: MIT
/*
 * RDMA netlink (NETLINK_RDMA): the program's socket is a connection to softirdma, which
 * answers as the kernel's nldev does. What a netlink socket has that a unix one has not (its
 * address, its port id, its options) is made up here, as libnl and libmnl check it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload.h"

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

static uint32_t next_portid(void)
{
	static int used;

	/* The kernel gives a process's first socket its pid, the next ones numbers of its own. */
	if (!__atomic_fetch_add(&used, 1, __ATOMIC_RELAXED))
		return (uint32_t)getpid();
	return 0x80000000u | ((uint32_t)getpid() << 8) | (uint32_t)(used & 0xff);
}

int socket(int domain, int type, int protocol)
{
	struct sird_file *f;
	uint32_t portid;
	int s;

	sird_init();
	if (domain != AF_NETLINK || protocol != NETLINK_RDMA || !getenv("SOFTIRDMA_SOCKET"))
		return sird_real.socket(domain, type, protocol);
	portid = next_portid();
	s = sird_connect(sird_flag("SOFTIRDMA_KERNEL") ? SIRD_NETLINK_KERNEL : SIRD_NETLINK, portid, NULL, 1, NULL);
	if (s < 0) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	if (!(type & SOCK_CLOEXEC))
		fcntl(s, F_SETFD, 0);
	if (type & SOCK_NONBLOCK)
		fcntl(s, F_SETFL, O_RDWR | O_NONBLOCK);
	f = sird_add(s, SIRD_NETLINK, -1);
	if (!f) {
		sird_real.close(s);
		errno = EMFILE;
		return -1;
	}
	f->portid = portid;
	return s;
}

static struct sird_file *netlink_file(int fd)
{
	struct sird_file *f = sird_lookup(fd);

	return f && f->kind == SIRD_NETLINK ? f : NULL;
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	sird_init();
	if (netlink_file(fd))
		return 0;
	return sird_real.bind(fd, sa, len);
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	sird_init();
	if (netlink_file(fd))
		return 0;
	return sird_real.connect(fd, sa, len);
}

static void own_address(struct sird_file *f, void *addr, socklen_t *len, uint32_t pid)
{
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK, .nl_pid = f ? pid : 0 };

	if (!addr || !len)
		return;
	memcpy(addr, &nl, *len < sizeof(nl) ? *len : sizeof(nl));
	*len = sizeof(nl);
}

int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	struct sird_file *f;

	sird_init();
	f = netlink_file(fd);
	if (!f)
		return sird_real.getsockname(fd, sa, len);
	own_address(f, sa, len, f->portid);
	return 0;
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct sird_file *f;
	uint32_t ctl[2];
	int on = 0;

	sird_init();
	f = netlink_file(fd);
	if (!f || level != SOL_NETLINK)
		return sird_real.setsockopt(fd, level, name, val, len);
	if (name != NETLINK_CAP_ACK)
		return 0;
	if (val && len >= sizeof(int))
		memcpy(&on, val, sizeof(int));
	f->nlflags = on ? SIRD_NL_CAP_ACK : 0;
	ctl[0] = SIRD_NL_CONTROL;
	ctl[1] = f->nlflags;
	if (sird_real.sendto(fd, ctl, sizeof(ctl), MSG_NOSIGNAL, NULL, 0) != sizeof(ctl))
		return -1;
	return 0;
}

int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct sird_file *f;
	int v;

	sird_init();
	f = netlink_file(fd);
	if (!f || level != SOL_NETLINK)
		return sird_real.getsockopt(fd, level, name, val, len);
	v = name == NETLINK_CAP_ACK ? !!(f->nlflags & SIRD_NL_CAP_ACK) : 0;
	if (val && len && *len >= sizeof(int)) {
		memcpy(val, &v, sizeof(int));
		*len = sizeof(int);
	}
	return 0;
}

ssize_t recvmsg(int fd, struct msghdr *mh, int flags)
{
	struct sird_file *f;
	void *name;
	socklen_t namelen;
	ssize_t n;

	sird_init();
	f = netlink_file(fd);
	if (!f)
		return sird_real.recvmsg(fd, mh, flags);
	name = mh->msg_name;
	namelen = mh->msg_namelen;
	mh->msg_name = NULL;
	mh->msg_namelen = 0;
	n = sird_real.recvmsg(fd, mh, flags);
	mh->msg_name = name;
	mh->msg_namelen = namelen;
	if (n >= 0 && name)
		own_address(f, name, &mh->msg_namelen, 0);
	return n;
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *salen)
{
	struct sird_file *f;
	ssize_t n;

	sird_init();
	f = netlink_file(fd);
	if (!f)
		return sird_real.recvfrom(fd, buf, len, flags, sa, salen);
	n = sird_real.recvfrom(fd, buf, len, flags, NULL, NULL);
	if (n >= 0 && sa)
		own_address(f, sa, salen, 0);
	return n;
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *sa, socklen_t salen)
{
	sird_init();
	if (netlink_file(fd))
		return sird_real.sendto(fd, buf, len, flags | MSG_NOSIGNAL, NULL, 0);
	return sird_real.sendto(fd, buf, len, flags, sa, salen);
}

ssize_t sendmsg(int fd, const struct msghdr *mh, int flags)
{
	struct msghdr m;

	sird_init();
	if (!netlink_file(fd))
		return sird_real.sendmsg(fd, mh, flags);
	m = *mh;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	return sird_real.sendmsg(fd, &m, flags | MSG_NOSIGNAL);
}
