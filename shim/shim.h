/* shim.h - what the shim's parts (and thaw_shim_check.c) share. */
#ifndef THAW_SHIM_H
#define THAW_SHIM_H

#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads exactly len bytes at off; -1 with errno on failure (EIO at the end
 * of the file). */
static inline int read_full(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EIO;
			return -1;
		}
		p += n, len -= (size_t)n, off += n;
	}
	return 0;
}

/* The inherited descriptor announced for path in THAW_SHIM_FD_<n>, or -1. */
int shim_table_fd(const char *path);
/* A new descriptor for path from the table; -2 if path is not in it, -1 with
 * errno on failure. */
int shim_table_dup(const char *path, int flags);

#endif
