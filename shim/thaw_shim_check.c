/*
 * thaw_shim_check.c - maps a memory file exactly the way QEMU 7.2 maps guest
 * RAM on restore (memory-backend-file, share=off) and verifies that what the
 * mapping shows equals the file, whatever libthaw_shim.so did underneath.
 *
 *   thaw-shim-check [--threads N] [--write-check] [--qemu-madvise] [--align N] [--standby MS] [--expect FILE] MEMFILE
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
 * --standby MS    wait MS milliseconds between mapping and reading, as a VMM
 *                 of thaw's VMM pool waits, memory laid out, for its restore.
 * --expect FILE   compare the mapping with FILE instead of MEMFILE (a lazy
 *                 restore: MEMFILE is a placeholder, the bytes come from a
 *                 memory source through userfaultfd).
 *
 * The JSON line also says whether the mapping's first VMA carries the
 * huge-page hint (VmFlags "hg" in /proc/self/smaps) after QEMU's madvise
 * calls (--qemu-madvise): the interposer drops it unless told to keep it.
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
static int reffd; /* what pages must equal: memfd, or --expect's file */
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
		if (read_full(reffd, buf, page, off) < 0) {
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
	fprintf(stderr, "usage: thaw-shim-check [--threads N] [--write-check] [--qemu-madvise] [--align N] [--standby MS] [--expect FILE] MEMFILE\n");
	exit(1);
}

struct options {
	int write_check, qemu_madvise;
	long standby_ms;
	size_t align;
	const char *path, *expect;
};

static void parse_args(int argc, char **argv, struct options *o)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			nthreads = atoi(argv[++i]);
			if (nthreads < 1 || nthreads > 1024)
				usage();
		} else if (!strcmp(argv[i], "--write-check")) {
			o->write_check = 1;
		} else if (!strcmp(argv[i], "--qemu-madvise")) {
			o->qemu_madvise = 1;
		} else if (!strcmp(argv[i], "--align") && i + 1 < argc) {
			o->align = (size_t)strtoull(argv[++i], NULL, 0);
			if (!o->align || (o->align & (o->align - 1)))
				usage();
		} else if (!strcmp(argv[i], "--standby") && i + 1 < argc) {
			o->standby_ms = atol(argv[++i]);
			if (o->standby_ms < 0 || o->standby_ms > 600000)
				usage();
		} else if (!strcmp(argv[i], "--expect") && i + 1 < argc) {
			o->expect = argv[++i];
		} else if (argv[i][0] == '-' || o->path) {
			usage();
		} else {
			o->path = argv[i];
		}
	}
	if (!o->path)
		usage();
}

/*
 * map_like_qemu opens the file and maps it as QEMU does: qemu_ram_mmap()
 * reserves size + align, then maps the file over the reservation at the
 * first aligned address. Returns 0, or the exit code.
 */
static int map_like_qemu(const struct options *o, size_t *size)
{
	struct stat st;

	page = (size_t)sysconf(_SC_PAGESIZE);
	memfd = open(o->path, O_RDWR);
	if (memfd < 0 || fstat(memfd, &st) < 0) {
		fprintf(stderr, "thaw-shim-check: %s: %s\n", o->path, strerror(errno));
		return 1;
	}
	reffd = memfd;
	if (o->expect) {
		struct stat rst;

		reffd = open(o->expect, O_RDONLY);
		if (reffd < 0 || fstat(reffd, &rst) < 0 || rst.st_size != st.st_size) {
			fprintf(stderr, "thaw-shim-check: %s: %s\n", o->expect, reffd < 0 ? strerror(errno) : "size differs from MEMFILE");
			return 1;
		}
	}
	*size = (size_t)st.st_size;
	if (!*size || *size % page) {
		fprintf(stderr, "thaw-shim-check: %s: size %zu is not a positive multiple of %zu\n", o->path,
			*size, page);
		return 1;
	}
	npages = *size / page;
	void *resv = mmap(NULL, *size + o->align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (resv == MAP_FAILED) {
		fprintf(stderr, "thaw-shim-check: reserve %zu bytes: %s\n", *size, strerror(errno));
		return 1;
	}
	if (o->align)
		resv = (void *)(((uintptr_t)resv + o->align - 1) & ~(uintptr_t)(o->align - 1));
	map = mmap(resv, *size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, memfd, 0);
	if (map == MAP_FAILED) {
		fprintf(stderr, "thaw-shim-check: mmap %s: %s\n", o->path, strerror(errno));
		return 2;
	}
	if (map != resv) {
		fprintf(stderr, "thaw-shim-check: mmap returned %p, not the reserved %p\n", (void *)map, resv);
		return 2;
	}
	if (o->qemu_madvise) {
		/* Same order as QEMU's ram_block_add() / qemu_ram_setup_dump(). */
		if (madvise(map, *size, MADV_HUGEPAGE) < 0)
			fprintf(stderr, "thaw-shim-check: madvise HUGEPAGE: %s\n", strerror(errno));
		if (madvise(map, *size, MADV_DONTFORK) < 0)
			fprintf(stderr, "thaw-shim-check: madvise DONTFORK: %s\n", strerror(errno));
		if (madvise(map, *size, MADV_MERGEABLE) < 0)
			fprintf(stderr, "thaw-shim-check: madvise MERGEABLE: %s\n", strerror(errno));
	}
	return 0;
}

/* vma_flag says whether the VMA at addr has the smaps VmFlags flag (" hg"). */
static int vma_flag(const void *addr, const char *flag)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, hg = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (in && !strncmp(line, "VmFlags:", 8)) {
			hg = strstr(line, flag) != NULL;
			break;
		}
	}
	fclose(f);
	return hg;
}

/* read_all compares every page from nthreads readers; -1 on a read error. */
static int read_all(uint64_t *mismatches, int64_t *first)
{
	struct worker *w = calloc((size_t)nthreads, sizeof(*w));
	int err = 0;

	if (!w)
		return -1;
	for (int i = 0; i < nthreads; i++) {
		w[i].idx = i;
		if (pthread_create(&w[i].tid, NULL, reader, &w[i]) != 0) {
			fprintf(stderr, "thaw-shim-check: pthread_create failed\n");
			return -1;
		}
	}
	*mismatches = 0;
	*first = -1;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		*mismatches += w[i].mismatches;
		if (w[i].first >= 0 && (*first < 0 || w[i].first < *first))
			*first = w[i].first;
		if (w[i].err)
			err = w[i].err;
	}
	free(w);
	if (err) {
		fprintf(stderr, "thaw-shim-check: pread: %s\n", strerror(err));
		return -1;
	}
	return 0;
}

/*
 * check_writes writes every 7th page through the mapping: the writes must
 * read back and the file must not change (copy-on-write). -1 on an I/O
 * error; otherwise sets *write_bad and *file_modified.
 */
static int check_writes(int *write_bad, int *file_modified)
{
	char *buf = malloc(page);
	size_t n = (npages + 6) / 7;
	uint64_t *orig = calloc(n, sizeof(*orig));

	if (!buf || !orig)
		return -1;
	for (size_t k = 0; k < n; k++) {
		if (read_full(memfd, buf, page, (off_t)(k * 7 * page)) < 0)
			return -1;
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
			*write_bad = 1; /* the write did not stick in the mapping */
		if (read_full(memfd, buf, page, (off_t)(k * 7 * page)) < 0)
			return -1;
		if (fnv1a((unsigned char *)buf, page) != orig[k])
			*file_modified = 1;
	}
	if (*write_bad)
		fprintf(stderr, "thaw-shim-check: writes through the mapping did not read back\n");
	free(orig);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	struct options o = {0};
	int file_modified = 0, write_bad = 0, rc;
	uint64_t mismatches;
	int64_t first;
	size_t size;

	parse_args(argc, argv, &o);
	if ((rc = map_like_qemu(&o, &size)) != 0)
		return rc;
	if (o.standby_ms > 0) {
		struct timespec ts = {o.standby_ms / 1000, (o.standby_ms % 1000) * 1000000L};

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	double t0 = now_ms();
	if (read_all(&mismatches, &first) < 0)
		return 1;
	double read_ms = now_ms() - t0;
	if (o.write_check && check_writes(&write_bad, &file_modified) < 0)
		return 1;
	printf("{\"pages\":%zu,\"mismatches\":%llu,\"first_mismatch\":%lld,\"file_modified\":%s,\"read_ms\":%.3f,"
	       "\"hugepage_hint\":%s,\"random_read\":%s}\n",
	       npages, (unsigned long long)mismatches, (long long)first, file_modified ? "true" : "false",
	       read_ms, vma_flag(map, " hg") ? "true" : "false", vma_flag(map, " rr") ? "true" : "false");
	fflush(stdout);
	return (mismatches == 0 && !file_modified && !write_bad) ? 0 : 1;
}
