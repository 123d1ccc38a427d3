/* SPDX-License-Identifier: MIT */
/*
 * The preload library's shared parts: the real libc entries it wraps, the table of the
 * files it stands in for, and its protocol with softirdma (host/daemon's package comment
 * is the reference; the numbers here are checked against it by a Go test).
 */
#ifndef SOFTIRDMA_PRELOAD_H
#define SOFTIRDMA_PRELOAD_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define SIRD_MAGIC 0x44524953u /* "SIRD" */
#define SIRD_VERSION 1u
/* A uverbs hello's argument: N of uverbsN, with this bit when RLIMIT_MEMLOCK is to be held. */
#define SIRD_UVERBS_MEMLOCK 0x80000000u

enum sird_kind {
	SIRD_UVERBS = 1,
	SIRD_NETLINK = 2,
	SIRD_RDMACM = 3,
	SIRD_CAPTURE = 4,
	SIRD_ATTACH = 5,
	SIRD_MEMORY = 7, /* the copy service's connection (memory.c) */
	SIRD_NETLINK_KERNEL = 8, /* netlink with the kernel's devices too (SOFTIRDMA_KERNEL=1) */
};

/* In the answer to a uverbs or attach hello: the process is to serve its memory (memory.c). */
#define SIRD_ANSWER_SERVE_MEMORY 0x80000000u

/* The copy service's request and answer. */
enum { SIRD_MEM_READ = 1, SIRD_MEM_WRITE = 2, };
struct sird_mem_req {
	uint32_t op;
	uint32_t len;
	uint64_t addr;
};
struct sird_mem_reply {
	int32_t err;
	uint32_t len;
};

/* The hello a connection starts with. */
struct sird_hello {
	uint32_t magic;
	uint32_t version;
	uint32_t kind;
	uint32_t arg; /* uverbs: the N of uverbsN; netlink: the socket's port id */
};

/* softirdma's answer to a hello: 0 or an errno; a uverbs hello also carries the command fd. */
struct sird_hello_reply {
	int32_t err;
	uint32_t arg;
};

/* The reply to a command: what write() returns, the program memory to write, the fds to install. */
struct sird_reply {
	int32_t ret; /* >= 0: write()'s result; < 0: -errno */
	uint16_t nwrites;
	uint16_t nfds;
};

/* One write into the program's memory; fd >= 0 writes the number of the reply's fd[fd]. */
struct sird_write {
	uint64_t addr;
	uint32_t len;
	int32_t fd;
};

/* The control datagram a netlink socket's options travel in (not a netlink message). */
#define SIRD_NL_CONTROL 0xffffffffu
#define SIRD_NL_CAP_ACK 1u

#define SIRD_MAX_MSG 65536
#define SIRD_MAX_FDS 4

/* A file the library stands in for, known by its inode. */
struct sird_file {
	int used;
	int kind;
	dev_t dev;
	ino_t ino;
	int conn; /* the library's own socket to softirdma (uverbs, rdma_cm); -1 for netlink */
	uint32_t index; /* N of /dev/infiniband/uverbsN: what fstat reports */
	uint32_t token; /* softirdma's name for the file, by which a forked child attaches */
	uint32_t portid;
	uint32_t nlflags;
	pthread_mutex_t lock;
};

struct sird_real {
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
	int (*__open_2)(const char *, int);
	int (*__open64_2)(const char *, int);
	int (*__openat_2)(int, const char *, int);
	int (*__openat64_2)(int, const char *, int);
	void *(*fopen)(const char *, const char *);
	void *(*fopen64)(const char *, const char *);
	void *(*opendir)(const char *);
	int (*scandir)(const char *, void *, void *, void *);
	int (*scandir64)(const char *, void *, void *, void *);
	int (*access)(const char *, int);
	int (*faccessat)(int, const char *, int, int);
	int (*stat)(const char *, struct stat *);
	int (*lstat)(const char *, struct stat *);
	int (*fstat)(int, struct stat *);
	int (*fstatat)(int, const char *, struct stat *, int);
	int (*stat64)(const char *, void *);
	int (*lstat64)(const char *, void *);
	int (*fstat64)(int, void *);
	int (*fstatat64)(int, const char *, void *, int);
	int (*__xstat)(int, const char *, struct stat *);
	int (*__lxstat)(int, const char *, struct stat *);
	int (*__fxstat)(int, int, struct stat *);
	int (*__xstat64)(int, const char *, void *);
	int (*__lxstat64)(int, const char *, void *);
	int (*__fxstat64)(int, int, void *);
	int (*statx)(int, const char *, int, unsigned int, void *);
	ssize_t (*readlink)(const char *, char *, size_t);
	char *(*realpath)(const char *, char *);
	ssize_t (*write)(int, const void *, size_t);
	int (*ioctl)(int, unsigned long, ...);
	int (*close)(int);
	int (*socket)(int, int, int);
	int (*bind)(int, const void *, unsigned int);
	int (*getsockname)(int, void *, unsigned int *);
	int (*setsockopt)(int, int, int, const void *, unsigned int);
	int (*getsockopt)(int, int, int, void *, unsigned int *);
	ssize_t (*recvmsg)(int, void *, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, void *, unsigned int *);
	ssize_t (*sendto)(int, const void *, size_t, int, const void *, unsigned int);
	ssize_t (*sendmsg)(int, const void *, int);
	int (*connect)(int, const void *, unsigned int);
};

extern struct sird_real sird_real;

void sird_init(void);
struct sird_file *sird_lookup(int fd);
struct sird_file *sird_add(int fd, int kind, int conn);
void sird_forget(struct sird_file *f);
int sird_connect(int kind, uint32_t arg, int *fdout, int cloexec, uint32_t *token);
void sird_log(const char *fmt, ...);
/* Whether the environment variable name is "1": a flag of softirdma run's (-kernel, -memlock). */
int sird_flag(const char *name);

/* Paths: a path the library serves is rewritten into buf (its sysfs tree) or named a device. */
const char *sird_path(const char *path, char *buf, size_t len);
int sird_dev_path(const char *path, int *kind, uint32_t *index);
void sird_fake_cdev(struct stat *st, int kind, uint32_t index);

ssize_t sird_uverbs_write(struct sird_file *f, int fd, const void *buf, size_t len);
void sird_serve_memory(void);
void sird_memory_after_fork(void);
int sird_open_dev(int kind, uint32_t index, int flags);

#endif
