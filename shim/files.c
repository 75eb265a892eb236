/*
 * files.c - the shim's file table: QEMU runs as an unprivileged user that
 * cannot open thaw's files by path, so the daemon opens them and hands them
 * over as inherited descriptors, announced as THAW_SHIM_FD_<n>=<fd>:<path>.
 * An open(2)/fopen(3) of such a path (by QEMU, glib or the shim itself)
 * returns a duplicate of the inherited descriptor instead of touching the
 * file system. The access mode is the daemon's: a file it opened read-only
 * stays read-only whatever flags the caller asked for (QEMU opens a
 * memory-backend-file O_RDWR even when it maps it private).
 * Interface: docs/shim-layout.md ("File table").
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"

#define MAX_FILES 64

static struct {
	int n;
	struct {
		int fd;
		const char *path; /* points into the environment */
	} e[MAX_FILES];
} table;

static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void load_table(void)
{
	char name[32];

	for (int i = 0; i < MAX_FILES; i++) {
		snprintf(name, sizeof(name), "THAW_SHIM_FD_%d", i);
		const char *v = getenv(name);
		if (!v)
			break;
		char *end;
		long fd = strtol(v, &end, 10);
		if (end == v || *end != ':' || fd < 0 || fd > 65535 || end[1] != '/')
			continue; /* malformed: never matches, so the open fails visibly */
		table.e[table.n].fd = (int)fd;
		table.e[table.n].path = end + 1;
		table.n++;
	}
}

int shim_table_fd(const char *path)
{
	if (!path)
		return -1;
	pthread_once(&table_once, load_table);
	for (int i = 0; i < table.n; i++)
		if (!strcmp(table.e[i].path, path))
			return table.e[i].fd;
	return -1;
}

int shim_table_dup(const char *path, int flags)
{
	int fd = shim_table_fd(path);

	if (fd < 0)
		return -2;
	/* A fresh descriptor per open, so the caller may close it; close-on-exec
	 * (QEMU never execs). It shares the file offset like dup(2): rewind it. */
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (d < 0)
		return -1;
	if (flags & O_TRUNC) {
		if (ftruncate(d, 0) < 0) {
			int err = errno;
			close(d);
			errno = err;
			return -1;
		}
	}
	lseek(d, 0, SEEK_SET);
	return d;
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef FILE *(*fopen_fn)(const char *, const char *);

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define REAL(type, name)                                                                           \
	static type real_##name;                                                                   \
	if (!real_##name)                                                                          \
		real_##name = (type)dlsym(RTLD_NEXT, #name);

/* Returns what the next definition of name (of type) returns for the
 * arguments; fail, with errno ENOSYS, if there is none. */
#define CALL_REAL(type, name, fail, ...)                                                           \
	REAL(type, name);                                                                          \
	if (!real_##name) {                                                                        \
		errno = ENOSYS;                                                                    \
		return fail;                                                                       \
	}                                                                                          \
	return real_##name(__VA_ARGS__)

/* Declares mode, the mode argument that follows flags (0 if there is none). */
#define MODE_ARG(mode, flags)                                                                      \
	va_list ap;                                                                                \
	va_start(ap, flags);                                                                       \
	mode_t mode = mode_arg(flags, ap);                                                         \
	va_end(ap)

#define OPEN_WRAPPER(name)                                                                         \
	int name(const char *path, int flags, ...)                                                 \
	{                                                                                          \
		MODE_ARG(mode, flags);                                                             \
		int d = shim_table_dup(path, flags);                                               \
		if (d != -2)                                                                       \
			return d;                                                                  \
		CALL_REAL(open_fn, name, -1, path, flags, mode);                                   \
	}

#define OPENAT_WRAPPER(name)                                                                       \
	int name(int dirfd, const char *path, int flags, ...)                                      \
	{                                                                                          \
		MODE_ARG(mode, flags);                                                             \
		if (path[0] == '/') {                                                              \
			int d = shim_table_dup(path, flags);                                       \
			if (d != -2)                                                               \
				return d;                                                          \
		}                                                                                  \
		CALL_REAL(openat_fn, name, -1, dirfd, path, flags, mode);                          \
	}

OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

/* _FORTIFY_SOURCE builds call these instead of open/openat. */
#define FORTIFY_WRAPPER(name, plain)                                                               \
	int name(const char *path, int flags)                                                      \
	{                                                                                          \
		int d = shim_table_dup(path, flags);                                               \
		if (d != -2)                                                                       \
			return d;                                                                  \
		CALL_REAL(open_fn, plain, -1, path, flags);                                        \
	}

FORTIFY_WRAPPER(__open_2, open)
FORTIFY_WRAPPER(__open64_2, open64)

static FILE *table_fopen(const char *path, const char *mode)
{
	int flags = strchr(mode, 'w') ? O_TRUNC : 0;
	int d = shim_table_dup(path, flags);
	if (d == -2)
		return (FILE *)-1;
	if (d < 0)
		return NULL;
	FILE *f = fdopen(d, mode);
	if (!f) {
		int err = errno;
		close(d);
		errno = err;
	}
	return f;
}

#define FOPEN_WRAPPER(name)                                                                        \
	FILE *name(const char *path, const char *mode)                                             \
	{                                                                                          \
		FILE *f = table_fopen(path, mode);                                                 \
		if (f != (FILE *)-1)                                                               \
			return f;                                                                  \
		CALL_REAL(fopen_fn, name, NULL, path, mode);                                       \
	}

FOPEN_WRAPPER(fopen)
FOPEN_WRAPPER(fopen64)
