// SPDX-License-Identifier: MIT
/*
 * nlempty: a preload library that makes NETLINK_RDMA open and answer an empty device list, as
 * on a host whose kernel has ib_core and no RDMA device: a dump ends at once (NLMSG_DONE), any
 * other request gets ENODEV. libibverbs then finds no device and reads no sysfs. Under
 * softirdma run it stands after softirdma's library in LD_PRELOAD: the test is that
 * softirdma's answers win wherever the kernel's would come from.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NETLINK_RDMA_PROTO 20
#define MAX_FAKE 64

static int fake[MAX_FAKE];

static int is_fake(int fd)
{
	int i;

	for (i = 0; i < MAX_FAKE; i++)
		if (fake[i] == fd + 1)
			return 1;
	return 0;
}

/* answer is the kernel's side: every request answered, from the socket pair's other end. */
static void *answer(void *arg)
{
	int s = (int)(intptr_t)arg;
	char buf[8192];
	ssize_t n;

	while ((n = recv(s, buf, sizeof(buf), 0)) > 0) {
		struct nlmsghdr *req = (struct nlmsghdr *)buf, *rep;
		char out[64] = { 0 };
		int32_t code = 0;

		if ((size_t)n < sizeof(*req))
			continue;
		rep = (struct nlmsghdr *)out;
		rep->nlmsg_seq = req->nlmsg_seq;
		rep->nlmsg_pid = req->nlmsg_pid;
		if (req->nlmsg_flags & NLM_F_DUMP) {
			rep->nlmsg_len = NLMSG_LENGTH(sizeof(code));
			rep->nlmsg_type = NLMSG_DONE;
			rep->nlmsg_flags = NLM_F_MULTI;
			memcpy(NLMSG_DATA(rep), &code, sizeof(code));
		} else {
			struct nlmsgerr *e = NLMSG_DATA(rep);

			rep->nlmsg_len = NLMSG_LENGTH(sizeof(*e));
			rep->nlmsg_type = NLMSG_ERROR;
			e->error = -ENODEV;
			e->msg = *req;
		}
		if (send(s, out, rep->nlmsg_len, MSG_NOSIGNAL) < 0)
			break;
	}
	close(s);
	return NULL;
}

int socket(int domain, int type, int protocol)
{
	static int (*real)(int, int, int);
	pthread_t t;
	int sv[2], i;

	if (!real)
		real = dlsym(RTLD_NEXT, "socket");
	if (domain != AF_NETLINK || protocol != NETLINK_RDMA_PROTO)
		return real(domain, type, protocol);
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	for (i = 0; i < MAX_FAKE && fake[i]; i++)
		;
	if (i == MAX_FAKE || pthread_create(&t, NULL, answer, (void *)(intptr_t)sv[1])) {
		close(sv[0]);
		close(sv[1]);
		errno = EMFILE;
		return -1;
	}
	pthread_detach(t);
	fake[i] = sv[0] + 1;
	return sv[0];
}

static void nl_address(void *addr, socklen_t *len, uint32_t pid)
{
	struct sockaddr_nl nl = { .nl_family = AF_NETLINK, .nl_pid = pid };

	if (!addr || !len)
		return;
	memcpy(addr, &nl, *len < sizeof(nl) ? *len : sizeof(nl));
	*len = sizeof(nl);
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);

	if (is_fake(fd))
		return 0;
	if (!real)
		real = dlsym(RTLD_NEXT, "bind");
	return real(fd, sa, len);
}

int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	static int (*real)(int, struct sockaddr *, socklen_t *);

	if (is_fake(fd)) {
		nl_address(sa, len, (uint32_t)getpid());
		return 0;
	}
	if (!real)
		real = dlsym(RTLD_NEXT, "getsockname");
	return real(fd, sa, len);
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	static int (*real)(int, int, int, const void *, socklen_t);

	if (is_fake(fd) && level == SOL_NETLINK)
		return 0;
	if (!real)
		real = dlsym(RTLD_NEXT, "setsockopt");
	return real(fd, level, name, val, len);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len)
{
	static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);

	if (!real)
		real = dlsym(RTLD_NEXT, "sendto");
	if (is_fake(fd))
		return real(fd, buf, n, flags, NULL, 0);
	return real(fd, buf, n, flags, sa, len);
}

ssize_t sendmsg(int fd, const struct msghdr *mh, int flags)
{
	static ssize_t (*real)(int, const struct msghdr *, int);
	struct msghdr m;

	if (!real)
		real = dlsym(RTLD_NEXT, "sendmsg");
	if (!is_fake(fd))
		return real(fd, mh, flags);
	m = *mh;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	return real(fd, &m, flags);
}

ssize_t recvmsg(int fd, struct msghdr *mh, int flags)
{
	static ssize_t (*real)(int, struct msghdr *, int);
	void *name;
	ssize_t n;

	if (!real)
		real = dlsym(RTLD_NEXT, "recvmsg");
	if (!is_fake(fd))
		return real(fd, mh, flags);
	name = mh->msg_name;
	mh->msg_name = NULL;
	n = real(fd, mh, flags);
	mh->msg_name = name;
	if (n >= 0 && name) {
		mh->msg_namelen = sizeof(struct sockaddr_nl);
		nl_address(name, &mh->msg_namelen, 0);
	}
	return n;
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *sa, socklen_t *salen)
{
	static ssize_t (*real)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t n;

	if (!real)
		real = dlsym(RTLD_NEXT, "recvfrom");
	if (!is_fake(fd))
		return real(fd, buf, len, flags, sa, salen);
	n = real(fd, buf, len, flags, NULL, NULL);
	if (n >= 0 && sa)
		nl_address(sa, salen, 0);
	return n;
}
