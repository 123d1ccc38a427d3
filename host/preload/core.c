// SPDX-License-Identifier: MIT
/*
 * The table of files the library stands in for, and its connections to softirdma.
 *
 * A file is known by its inode, not its number: the program may dup it, pass it through
 * fcntl(F_DUPFD) or exec with it, and every copy is still the same file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "preload.h"

struct sird_real sird_real;

#define SIRD_FILES 256
static struct sird_file files[SIRD_FILES];
static int nfiles;
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#define REAL(name) sird_real.name = dlsym(RTLD_NEXT, #name)

static void resolve(void)
{
	REAL(open); REAL(open64); REAL(openat); REAL(openat64);
	REAL(__open_2); REAL(__open64_2); REAL(__openat_2); REAL(__openat64_2);
	REAL(fopen); REAL(fopen64); REAL(opendir); REAL(scandir); REAL(scandir64);
	REAL(access); REAL(faccessat);
	REAL(stat); REAL(lstat); REAL(fstat); REAL(fstatat);
	REAL(stat64); REAL(lstat64); REAL(fstat64); REAL(fstatat64);
	REAL(__xstat); REAL(__lxstat); REAL(__fxstat);
	REAL(__xstat64); REAL(__lxstat64); REAL(__fxstat64); REAL(statx);
	REAL(readlink); REAL(realpath);
	REAL(write); REAL(ioctl); REAL(close);
	REAL(socket); REAL(bind); REAL(getsockname); REAL(setsockopt); REAL(getsockopt);
	REAL(recvmsg); REAL(recvfrom); REAL(sendto); REAL(sendmsg); REAL(connect);
}

/*
 * after_fork gives a child its own connections to the files it inherited: the parent's socket
 * would carry both processes' commands and mix their answers. The child attaches to the same
 * files, as after fork both processes hold the kernel's.
 */
static void after_fork(void)
{
	int i, c, serve = 0;
	uint32_t word;

	sird_memory_after_fork();
	for (i = 0; i < SIRD_FILES; i++) {
		struct sird_file *f = &files[i];

		pthread_mutex_init(&f->lock, NULL);
		if (!f->used || f->conn < 0 || !f->token)
			continue;
		word = 0;
		c = sird_connect(SIRD_ATTACH, f->token, NULL, 1, &word);
		sird_real.close(f->conn);
		f->conn = c; /* < 0: the child's commands on the file fail with EIO */
		serve |= c >= 0 && (word & SIRD_ANSWER_SERVE_MEMORY);
	}
	pthread_mutex_init(&files_lock, NULL);
	if (serve)
		sird_serve_memory();
}

static void setup(void)
{
	resolve();
	pthread_atfork(NULL, NULL, after_fork);
}

void sird_init(void)
{
	pthread_once(&once, setup);
}

__attribute__((constructor)) static void sird_ctor(void)
{
	sird_init();
}

int sird_flag(const char *name)
{
	const char *v = getenv(name);

	return v && strcmp(v, "1") == 0;
}

void sird_log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (!getenv("SOFTIRDMA_PRELOAD_DEBUG"))
		return;
	n = snprintf(line, sizeof(line), "softirdma-preload[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	sird_real.write(2, line, strlen(line));
}

static int real_fstat(int fd, struct stat *st)
{
	if (sird_real.fstat)
		return sird_real.fstat(fd, st);
	return sird_real.__fxstat(1, fd, st);
}

struct sird_file *sird_lookup(int fd)
{
	struct stat st;
	struct sird_file *found = NULL;
	int i;

	sird_init();
	if (fd < 0 || __atomic_load_n(&nfiles, __ATOMIC_ACQUIRE) == 0)
		return NULL;
	if (real_fstat(fd, &st) < 0)
		return NULL;
	pthread_mutex_lock(&files_lock);
	for (i = 0; i < SIRD_FILES; i++) {
		if (files[i].used && files[i].ino == st.st_ino && files[i].dev == st.st_dev) {
			found = &files[i];
			break;
		}
	}
	pthread_mutex_unlock(&files_lock);
	return found;
}

struct sird_file *sird_add(int fd, int kind, int conn)
{
	struct stat st;
	struct sird_file *f = NULL;
	int i;

	if (real_fstat(fd, &st) < 0)
		return NULL;
	pthread_mutex_lock(&files_lock);
	for (i = 0; i < SIRD_FILES; i++) {
		if (!files[i].used) {
			f = &files[i];
			memset(f, 0, sizeof(*f));
			f->used = 1;
			f->kind = kind;
			f->dev = st.st_dev;
			f->ino = st.st_ino;
			f->conn = conn;
			pthread_mutex_init(&f->lock, NULL);
			__atomic_add_fetch(&nfiles, 1, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&files_lock);
	return f;
}

void sird_forget(struct sird_file *f)
{
	pthread_mutex_lock(&files_lock);
	if (f->used) {
		f->used = 0;
		if (f->conn >= 0)
			sird_real.close(f->conn);
		__atomic_sub_fetch(&nfiles, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&files_lock);
}

static int socket_path(struct sockaddr_un *sa)
{
	const char *p = getenv("SOFTIRDMA_SOCKET");

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (!p || !*p || strlen(p) >= sizeof(sa->sun_path))
		return -1;
	strcpy(sa->sun_path, p);
	return 0;
}

/* recv_hello reads softirdma's answer to a hello, its word, and the fd it may carry. */
static int recv_hello(int s, int *fdout, int cloexec, uint32_t *word)
{
	struct sird_hello_reply r;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &r, sizeof(r) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	ssize_t n;

	n = sird_real.recvmsg(s, &mh, cloexec ? MSG_CMSG_CLOEXEC : 0);
	if (n != sizeof(r))
		return -EIO;
	if (r.err)
		return -r.err;
	if (word)
		*word = r.arg;
	if (!fdout)
		return 0;
	*fdout = -1;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(fdout, CMSG_DATA(c), sizeof(int));
	return *fdout >= 0 ? 0 : -EIO;
}

/*
 * allow_ptracer names softirdma, the peer of s, as this process's ptracer, so that it reaches
 * the program's registered memory with process_vm_readv where Yama's ptrace_scope 1 admits
 * only a process's ancestors and the ptracer it names: softirdma is no ancestor. Without Yama
 * prctl fails with EINVAL, and nothing is needed.
 */
static void allow_ptracer(int s)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.pid > 0)
		prctl(PR_SET_PTRACER, (unsigned long)cr.pid, 0, 0, 0);
}

/*
 * sird_connect opens a connection of a kind to softirdma and returns its socket (close on
 * exec), or -errno; a uverbs or rdma_cm connection's file comes back in *fdout.
 */
int sird_connect(int kind, uint32_t arg, int *fdout, int cloexec, uint32_t *token)
{
	struct sockaddr_un sa;
	struct sird_hello h = { SIRD_MAGIC, SIRD_VERSION, kind, arg };
	int s, err;

	sird_init();
	if (socket_path(&sa) < 0)
		return -ENODEV;
	s = sird_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (sird_real.connect(s, &sa, sizeof(sa)) < 0) {
		err = errno;
		sird_log("cannot reach softirdma at %s: %s\n", sa.sun_path, strerror(err));
		sird_real.close(s);
		return -ENODEV;
	}
	if (sird_real.sendto(s, &h, sizeof(h), MSG_NOSIGNAL, NULL, 0) != sizeof(h)) {
		sird_real.close(s);
		return -EIO;
	}
	err = recv_hello(s, fdout, cloexec, token);
	if (err < 0) {
		sird_real.close(s);
		return err;
	}
	if (kind == SIRD_UVERBS || kind == SIRD_ATTACH)
		allow_ptracer(s);
	return s;
}
