/*
 * thaw_shim_check.c - maps a memory file exactly the way QEMU 7.2 maps guest
 * RAM on restore (memory-backend-file, share=off) and verifies that what the
 * mapping shows equals the file, whatever libthaw_shim.so did underneath.
 *
 *   thaw-shim-check [--threads N] [--write-check] [--qemu-madvise] [--align N] MEMFILE
 *
 * --threads N     read pages from N threads (interleaved), so uffd faults
 *                 reach the daemon concurrently, as vCPUs would.
 * --write-check   write every 7th page through the mapping and check that the
 *                 file stays unchanged (the mapping must be copy-on-write).
 * --qemu-madvise  also issue QEMU's follow-up madvise calls (HUGEPAGE,
 *                 DONTFORK, MERGEABLE) to see how they interact with the
 *                 replaced mapping.
 * --align N       place the mapping at an N-aligned address, as QEMU does
 *                 for memory-backend-file,align=N (device-DAX needs it).
 *
 * Prints one JSON line; exit 0 iff no mismatch and the file is unmodified,
 * 2 if the mmap itself failed, 1 otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

static char *map;
static int memfd;
static size_t page, npages;
static int nthreads = 1;

struct worker {
	pthread_t tid;
	int idx;
	uint64_t mismatches;
	int64_t first; /* lowest mismatching offset seen by this thread, or -1 */
	int err;
};

static void *reader(void *arg)
{
	struct worker *w = arg;
	char *buf = malloc(page);

	w->first = -1;
	if (!buf) {
		w->err = ENOMEM;
		return NULL;
	}
	for (size_t i = (size_t)w->idx; i < npages; i += (size_t)nthreads) {
		off_t off = (off_t)(i * page);
		if (read_full(memfd, buf, page, off) < 0) {
			w->err = errno;
			break;
		}
		if (memcmp(map + off, buf, page) != 0) {
			if (w->first < 0)
				w->first = off;
			w->mismatches++;
		}
	}
	free(buf);
	return NULL;
}

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (n--)
		h = (h ^ *p++) * 0x100000001b3ull;
	return h;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void usage(void)
{
	fprintf(stderr, "usage: thaw-shim-check [--threads N] [--write-check] [--qemu-madvise] [--align N] MEMFILE\n");
	exit(1);
}

int main(int argc, char **argv)
{
	int write_check = 0, qemu_madvise = 0, file_modified = 0, i;
	size_t align = 0;
	const char *path = NULL;
	struct stat st;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			nthreads = atoi(argv[++i]);
			if (nthreads < 1 || nthreads > 1024)
				usage();
		} else if (!strcmp(argv[i], "--write-check")) {
			write_check = 1;
		} else if (!strcmp(argv[i], "--qemu-madvise")) {
			qemu_madvise = 1;
		} else if (!strcmp(argv[i], "--align") && i + 1 < argc) {
			align = (size_t)strtoull(argv[++i], NULL, 0);
			if (!align || (align & (align - 1)))
				usage();
		} else if (argv[i][0] == '-' || path) {
			usage();
		} else {
			path = argv[i];
		}
	}
	if (!path)
		usage();

	page = (size_t)sysconf(_SC_PAGESIZE);
	memfd = open(path, O_RDWR);
	if (memfd < 0 || fstat(memfd, &st) < 0) {
		fprintf(stderr, "thaw-shim-check: %s: %s\n", path, strerror(errno));
		return 1;
	}
	size_t size = (size_t)st.st_size;
	if (!size || size % page) {
		fprintf(stderr, "thaw-shim-check: %s: size %zu is not a positive multiple of %zu\n", path,
			size, page);
		return 1;
	}
	npages = size / page;

	/*
	 * QEMU: qemu_ram_mmap() reserves size + align, then maps the file over
	 * the reservation at the first aligned address.
	 */
	void *resv = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (resv == MAP_FAILED) {
		fprintf(stderr, "thaw-shim-check: reserve %zu bytes: %s\n", size, strerror(errno));
		return 1;
	}
	if (align)
		resv = (void *)(((uintptr_t)resv + align - 1) & ~(uintptr_t)(align - 1));
	map = mmap(resv, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, memfd, 0);
	if (map == MAP_FAILED) {
		fprintf(stderr, "thaw-shim-check: mmap %s: %s\n", path, strerror(errno));
		return 2;
	}
	if (map != resv) {
		fprintf(stderr, "thaw-shim-check: mmap returned %p, not the reserved %p\n", (void *)map, resv);
		return 2;
	}
	if (qemu_madvise) {
		/* Same order as QEMU's ram_block_add() / qemu_ram_setup_dump(). */
		if (madvise(map, size, MADV_HUGEPAGE) < 0)
			fprintf(stderr, "thaw-shim-check: madvise HUGEPAGE: %s\n", strerror(errno));
		if (madvise(map, size, MADV_DONTFORK) < 0)
			fprintf(stderr, "thaw-shim-check: madvise DONTFORK: %s\n", strerror(errno));
		if (madvise(map, size, MADV_MERGEABLE) < 0)
			fprintf(stderr, "thaw-shim-check: madvise MERGEABLE: %s\n", strerror(errno));
	}

	struct worker *w = calloc((size_t)nthreads, sizeof(*w));
	if (!w)
		return 1;
	double t0 = now_ms();
	for (i = 0; i < nthreads; i++) {
		w[i].idx = i;
		if (pthread_create(&w[i].tid, NULL, reader, &w[i]) != 0) {
			fprintf(stderr, "thaw-shim-check: pthread_create failed\n");
			return 1;
		}
	}
	uint64_t mismatches = 0;
	int64_t first = -1;
	int err = 0;
	for (i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		mismatches += w[i].mismatches;
		if (w[i].first >= 0 && (first < 0 || w[i].first < first))
			first = w[i].first;
		if (w[i].err)
			err = w[i].err;
	}
	double read_ms = now_ms() - t0;
	if (err) {
		fprintf(stderr, "thaw-shim-check: pread %s: %s\n", path, strerror(err));
		return 1;
	}

	int write_bad = 0;
	if (write_check) {
		char *buf = malloc(page);
		size_t n = (npages + 6) / 7;
		uint64_t *orig = calloc(n, sizeof(*orig));
		if (!buf || !orig)
			return 1;
		for (size_t k = 0; k < n; k++) {
			if (read_full(memfd, buf, page, (off_t)(k * 7 * page)) < 0)
				return 1;
			orig[k] = fnv1a((unsigned char *)buf, page);
		}
		for (size_t k = 0; k < n; k++) {
			char *p = map + k * 7 * page;
			memset(p, 0xA5, page);
			memcpy(p, &k, sizeof(k)); /* differs per page */
		}
		for (size_t k = 0; k < n; k++) {
			char *p = map + k * 7 * page;
			size_t kk;
			memcpy(&kk, p, sizeof(kk));
			if (kk != k || (unsigned char)p[page - 1] != 0xA5)
				write_bad = 1; /* the write did not stick in the mapping */
			if (read_full(memfd, buf, page, (off_t)(k * 7 * page)) < 0)
				return 1;
			if (fnv1a((unsigned char *)buf, page) != orig[k])
				file_modified = 1;
		}
		if (write_bad)
			fprintf(stderr, "thaw-shim-check: writes through the mapping did not read back\n");
		free(orig);
		free(buf);
	}

	printf("{\"pages\":%zu,\"mismatches\":%llu,\"first_mismatch\":%lld,\"file_modified\":%s,\"read_ms\":%.3f}\n",
	       npages, (unsigned long long)mismatches, (long long)first, file_modified ? "true" : "false",
	       read_ms);
	fflush(stdout);
	return (mismatches == 0 && !file_modified && !write_bad) ? 0 : 1;
}
