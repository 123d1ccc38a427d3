// SPDX-License-Identifier: MIT
/*
 * The paths the library serves: the sysfs classes RDMA user space reads (shown from the
 * tree softirdma run laid out, SOFTIRDMA_SYSFS) and the character devices under
 * /dev/infiniband (softirdma's). Every libc entry that takes such a path is wrapped here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "preload.h"

static const char *const served[] = {
	"/sys/class/infiniband",  /* also infiniband_verbs, infiniband_cm, infiniband_mad */
	"/sys/class/misc/rdma_cm",
};

/* sird_path returns the path to use for path: path itself, or its place in softirdma's tree. */
const char *sird_path(const char *path, char *buf, size_t len)
{
	const char *root;
	size_t i;

	if (!path || strncmp(path, "/sys/class/", 11) != 0)
		return path;
	root = getenv("SOFTIRDMA_SYSFS");
	if (!root || !*root)
		return path;
	for (i = 0; i < sizeof(served) / sizeof(served[0]); i++) {
		size_t n = strlen(served[i]);

		if (strncmp(path, served[i], n) != 0)
			continue;
		if ((size_t)snprintf(buf, len, "%s%s", root, path + 4) >= len)
			return path;
		return buf;
	}
	return path;
}

/*
 * Whether uverbsN is softirdma's. Beside the kernel's devices it is when softirdma's tree has
 * it as a folder: the kernel's are links there to the kernel's own.
 */
static int ours_uverbs(unsigned long n)
{
	const char *root = getenv("SOFTIRDMA_SYSFS");
	char p[4096];
	struct stat st;
	int r;

	if (!sird_flag("SOFTIRDMA_KERNEL") || !root || !*root)
		return 1;
	if ((size_t)snprintf(p, sizeof(p), "%s/class/infiniband_verbs/uverbs%lu", root, n) >= sizeof(p))
		return 0;
	r = sird_real.lstat ? sird_real.lstat(p, &st) : sird_real.__lxstat(1, p, &st);
	return r == 0 && S_ISDIR(st.st_mode);
}

/* sird_dev_path says whether path is one of softirdma's character devices, and which. */
int sird_dev_path(const char *path, int *kind, uint32_t *index)
{
	const char *p;
	char *end;
	unsigned long n;

	if (!path || strncmp(path, "/dev/infiniband/", 16) != 0 || !getenv("SOFTIRDMA_SOCKET"))
		return 0;
	p = path + 16;
	if (strcmp(p, "rdma_cm") == 0) {
		*kind = SIRD_RDMACM;
		*index = 0;
		return 1;
	}
	if (strncmp(p, "uverbs", 6) != 0 || p[6] < '0' || p[6] > '9')
		return 0;
	n = strtoul(p + 6, &end, 10);
	if (*end || n > 63 || !ours_uverbs(n))
		return 0;
	*kind = SIRD_UVERBS;
	*index = n;
	return 1;
}

/* The device numbers the kernel gives: uverbsN is 231:192+N, rdma_cm a misc device. */
void sird_fake_cdev(struct stat *st, int kind, uint32_t index)
{
	st->st_mode = S_IFCHR | 0666;
	st->st_nlink = 1;
	st->st_size = 0;
	st->st_blksize = 4096;
	st->st_blocks = 0;
	if (kind == SIRD_UVERBS)
		st->st_rdev = makedev(231, 192 + index);
	else
		st->st_rdev = makedev(10, 58);
}

static int fake_path_stat(const char *path, struct stat *st)
{
	int kind;
	uint32_t index;

	if (!sird_dev_path(path, &kind, &index))
		return 0;
	memset(st, 0, sizeof(*st));
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_ino = 0x51d0000 + kind * 64 + index;
	sird_fake_cdev(st, kind, index);
	return 1;
}

static int fake_fd_stat(int fd, struct stat *st)
{
	struct sird_file *f = sird_lookup(fd);

	if (!f || f->kind == SIRD_NETLINK)
		return 0;
	sird_fake_cdev(st, f->kind, f->index);
	return 1;
}

#define OPEN_MODE(flags, mode)                                                                   \
	do {                                                                                      \
		if ((flags) & (O_CREAT | __O_TMPFILE)) {                                          \
			va_list ap;                                                              \
			va_start(ap, flags);                                                     \
			mode = va_arg(ap, int);                                                  \
			va_end(ap);                                                              \
		}                                                                                 \
	} while (0)

/*
 * unreadable says whether a file of the tree is one the kernel fails reads of: an unused GID
 * entry's type and netdev (EINVAL), which the tree holds as empty files. Such a file opens
 * as a pidfd, whose reads fail with EINVAL as the kernel's do, so read needs no wrapping.
 */
static int unreadable(const char *path, const char *tree)
{
	struct stat st;

	if (path == tree || !strstr(tree, "/gid_attrs/"))
		return 0;
	if ((sird_real.stat ? sird_real.stat(tree, &st) : sird_real.__xstat(1, tree, &st)) != 0)
		return 0;
	return S_ISREG(st.st_mode) && st.st_size == 0;
}

static int open_served(const char *path, int flags, int *fd)
{
	char buf[4096];
	const char *p;
	int kind;
	uint32_t index;

	if (sird_dev_path(path, &kind, &index)) {
		*fd = sird_open_dev(kind, index, flags);
		return 1;
	}
	p = sird_path(path, buf, sizeof(buf));
	if (!unreadable(path, p))
		return 0;
	*fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	return 1;
}

int open(const char *path, int flags, ...)
{
	char buf[4096];
	int mode = 0, fd;

	sird_init();
	OPEN_MODE(flags, mode);
	if (open_served(path, flags, &fd))
		return fd;
	return sird_real.open(sird_path(path, buf, sizeof(buf)), flags, mode);
}

int open64(const char *path, int flags, ...)
{
	char buf[4096];
	int mode = 0, fd;

	sird_init();
	OPEN_MODE(flags, mode);
	if (open_served(path, flags, &fd))
		return fd;
	return sird_real.open64(sird_path(path, buf, sizeof(buf)), flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	char buf[4096];
	int mode = 0, fd;

	sird_init();
	OPEN_MODE(flags, mode);
	if (open_served(path, flags, &fd))
		return fd;
	return sird_real.openat(dirfd, sird_path(path, buf, sizeof(buf)), flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	char buf[4096];
	int mode = 0, fd;

	sird_init();
	OPEN_MODE(flags, mode);
	if (open_served(path, flags, &fd))
		return fd;
	return sird_real.openat64(dirfd, sird_path(path, buf, sizeof(buf)), flags, mode);
}

int __open_2(const char *path, int flags)
{
	return open(path, flags);
}

int __open64_2(const char *path, int flags)
{
	return open64(path, flags);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	return openat(dirfd, path, flags);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	return openat64(dirfd, path, flags);
}

FILE *fopen(const char *path, const char *mode)
{
	char buf[4096];

	sird_init();
	return sird_real.fopen(sird_path(path, buf, sizeof(buf)), mode);
}

FILE *fopen64(const char *path, const char *mode)
{
	char buf[4096];

	sird_init();
	return sird_real.fopen64(sird_path(path, buf, sizeof(buf)), mode);
}

void *opendir(const char *path)
{
	char buf[4096];

	sird_init();
	return sird_real.opendir(sird_path(path, buf, sizeof(buf)));
}

int scandir(const char *path, void *list, void *sel, void *cmp)
{
	char buf[4096];

	sird_init();
	return sird_real.scandir(sird_path(path, buf, sizeof(buf)), list, sel, cmp);
}

int scandir64(const char *path, void *list, void *sel, void *cmp)
{
	char buf[4096];

	sird_init();
	return sird_real.scandir64(sird_path(path, buf, sizeof(buf)), list, sel, cmp);
}

int access(const char *path, int mode)
{
	char buf[4096];
	int kind;
	uint32_t index;

	sird_init();
	if (sird_dev_path(path, &kind, &index))
		return 0;
	return sird_real.access(sird_path(path, buf, sizeof(buf)), mode);
}

int faccessat(int dirfd, const char *path, int mode, int flags)
{
	char buf[4096];
	int kind;
	uint32_t index;

	sird_init();
	if (sird_dev_path(path, &kind, &index))
		return 0;
	return sird_real.faccessat(dirfd, sird_path(path, buf, sizeof(buf)), mode, flags);
}

ssize_t readlink(const char *path, char *out, size_t len)
{
	char buf[4096];

	sird_init();
	return sird_real.readlink(sird_path(path, buf, sizeof(buf)), out, len);
}

char *realpath(const char *path, char *out)
{
	char buf[4096];
	const char *p;

	sird_init();
	p = sird_path(path, buf, sizeof(buf));
	if (p == path)
		return sird_real.realpath(path, out);
	/* The tree's own path would leak to the program: it keeps the one it asked for. */
	if (sird_real.access(p, F_OK) < 0)
		return NULL;
	if (!out)
		return strdup(path);
	return strncpy(out, path, 4095);
}

int stat(const char *path, struct stat *st)
{
	char buf[4096];

	sird_init();
	if (fake_path_stat(path, st))
		return 0;
	if (sird_real.stat)
		return sird_real.stat(sird_path(path, buf, sizeof(buf)), st);
	return sird_real.__xstat(1, sird_path(path, buf, sizeof(buf)), st);
}

int stat64(const char *path, struct stat64 *st)
{
	return stat(path, (struct stat *)st);
}

int lstat(const char *path, struct stat *st)
{
	char buf[4096];

	sird_init();
	if (fake_path_stat(path, st))
		return 0;
	if (sird_real.lstat)
		return sird_real.lstat(sird_path(path, buf, sizeof(buf)), st);
	return sird_real.__lxstat(1, sird_path(path, buf, sizeof(buf)), st);
}

int lstat64(const char *path, struct stat64 *st)
{
	return lstat(path, (struct stat *)st);
}

int fstat(int fd, struct stat *st)
{
	int r;

	sird_init();
	r = sird_real.fstat ? sird_real.fstat(fd, st) : sird_real.__fxstat(1, fd, st);
	if (r == 0)
		fake_fd_stat(fd, st);
	return r;
}

int fstat64(int fd, struct stat64 *st)
{
	return fstat(fd, (struct stat *)st);
}

int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	char buf[4096];

	sird_init();
	if (!*path && (flags & AT_EMPTY_PATH))
		return fstat(dirfd, st);
	if (fake_path_stat(path, st))
		return 0;
	return sird_real.fstatat(dirfd, sird_path(path, buf, sizeof(buf)), st, flags);
}

int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	return fstatat(dirfd, path, (struct stat *)st, flags);
}

int __xstat(int ver, const char *path, struct stat *st)
{
	char buf[4096];

	sird_init();
	if (fake_path_stat(path, st))
		return 0;
	return sird_real.__xstat(ver, sird_path(path, buf, sizeof(buf)), st);
}

int __xstat64(int ver, const char *path, struct stat64 *st)
{
	return __xstat(ver, path, (struct stat *)st);
}

int __lxstat(int ver, const char *path, struct stat *st)
{
	char buf[4096];

	sird_init();
	if (fake_path_stat(path, st))
		return 0;
	return sird_real.__lxstat(ver, sird_path(path, buf, sizeof(buf)), st);
}

int __lxstat64(int ver, const char *path, struct stat64 *st)
{
	return __lxstat(ver, path, (struct stat *)st);
}

int __fxstat(int ver, int fd, struct stat *st)
{
	int r;

	sird_init();
	r = sird_real.__fxstat(ver, fd, st);
	if (r == 0)
		fake_fd_stat(fd, st);
	return r;
}

int __fxstat64(int ver, int fd, struct stat64 *st)
{
	return __fxstat(ver, fd, (struct stat *)st);
}

static void fake_statx(struct statx *sx, const struct stat *st)
{
	sx->stx_mode = (sx->stx_mode & ~S_IFMT) | (st->st_mode & S_IFMT);
	sx->stx_rdev_major = major(st->st_rdev);
	sx->stx_rdev_minor = minor(st->st_rdev);
	sx->stx_size = 0;
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *sx)
{
	char buf[4096];
	struct stat st;
	int r;

	sird_init();
	if (fake_path_stat(path, &st)) {
		memset(sx, 0, sizeof(*sx));
		sx->stx_mask = STATX_BASIC_STATS;
		sx->stx_uid = st.st_uid;
		sx->stx_gid = st.st_gid;
		sx->stx_nlink = 1;
		sx->stx_mode = st.st_mode;
		fake_statx(sx, &st);
		return 0;
	}
	r = sird_real.statx(dirfd, sird_path(path, buf, sizeof(buf)), flags, mask, sx);
	if (r == 0 && !*path && (flags & AT_EMPTY_PATH) && fake_fd_stat(dirfd, &st))
		fake_statx(sx, &st);
	return r;
}
