/* shim.h - what the shim's parts share. */
#ifndef THAW_SHIM_H
#define THAW_SHIM_H

/* The inherited descriptor announced for path in THAW_SHIM_FD_<n>, or -1. */
int shim_table_fd(const char *path);
/* A new descriptor for path from the table; -2 if path is not in it, -1 with
 * errno on failure. */
int shim_table_dup(const char *path, int flags);

#endif
