/*
 * thaw_shim.c - LD_PRELOAD interposer that controls how unmodified QEMU maps
 * guest RAM on restore.  Interface: docs/shim-layout.md.
 *
 * QEMU 7.2 restoring from a memory-backend-file (share=off) maps guest RAM
 * with exactly one mmap(addr, size, PROT_READ|PROT_WRITE,
 * MAP_PRIVATE|MAP_FIXED, memfd, 0).  We replace that one call:
 *
 *   layout mode - FaaSnap §4.8 / Figure 4 ("overlapping mappings"): an
 *                 anonymous base, then file regions (memory file, loading-set
 *                 file) mapped MAP_FIXED on top, later entries over earlier.
 *                 With THAW_SHIM_POPULATE=read (thaw's premap strategy,
 *                 PASS §3-4 "complete address indexing") every page of the
 *                 range is then pre-faulted read-only (MADV_POPULATE_READ):
 *                 file pages map the backing file's page-cache/tmpfs/DAX
 *                 pages, anonymous pages map the shared zero page; writes
 *                 later copy-on-write.  Done before QEMU returns from the
 *                 mmap, so before any vCPU runs.
 *                 Device entries (premap on device-DAX) map the VM's own
 *                 range of THAW_SHIM_DEVICE shared - the kernel maps a DAX
 *                 character device only shared, and the range is this VM's
 *                 alone - and are pre-faulted writable (MADV_POPULATE_WRITE):
 *                 guest writes land in the range, nothing is copied.
 *   uffd mode   - REAP: the range is anonymous and registered with
 *                 userfaultfd (MISSING); the uffd goes to the thaw daemon over
 *                 a Unix socket (SCM_RIGHTS) and the daemon fills every page
 *                 with UFFDIO_COPY.
 *
 * Protection (THAW_SHIM_PROTECT=1, every restore, with or without a mode):
 * QEMU 7.2 discards guest pages the guest reported free (virtio-balloon
 * free page reporting) with ram_block_discard_range(), which punches a hole
 * into the RAM block's *file* even when the file is mapped MAP_PRIVATE -
 * i.e. into the snapshot memory file (or premap's store copy) every clone
 * restores from, silently zeroing pages other clones still use.  The shim
 * turns a FALLOC_FL_PUNCH_HOLE on THAW_SHIM_MEMFILE into a no-op that
 * reports success; QEMU then madvise(MADV_DONTNEED)s the range, which drops
 * the clone's private copies as intended and leaves the file intact (what
 * later QEMU releases do for private file mappings).
 *
 * FaaSnap patched Firecracker to build this layout itself; thaw instead
 * interposes on the libc mmap of an unmodified QEMU binary, so the VMM can be
 * a stock distribution package.  QEMU 7.2 on Debian 12 is built with
 * _FILE_OFFSET_BITS=64 and imports mmap64; we still hook both names.
 *
 * Failure policy: once THAW_SHIM_MODE is set, any problem makes the matched
 * mmap fail (one "thaw-shim: ..." line on stderr).  A silent fallback to the
 * plain mapping would let a restore "succeed" while measuring the wrong
 * strategy.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

#define LAYOUT_MAGIC "THAWLAY1"
#define UFFD_MAGIC "THAWUFD1"
#define MAX_ENTRIES (1u << 22)
#define ACK_TIMEOUT_MS 30000

enum { KIND_ANON = 0, KIND_MEMFILE = 1, KIND_LSFILE = 2, KIND_DEVICE = 3 };

struct layout_header {
	char magic[8];
	uint32_t version;
	uint32_t count;
	uint64_t mem_size;
	uint64_t reserved;
};

struct layout_entry {
	uint64_t guest_off;
	uint64_t length;
	uint64_t file_off;
	uint32_t kind;
	uint32_t reserved;
};

struct uffd_hello {
	char magic[8];
	uint64_t addr;
	uint64_t length;
	uint32_t page_size;
	uint32_t pid;
};

_Static_assert(sizeof(struct layout_header) == 32, "header layout");
_Static_assert(sizeof(struct layout_entry) == 32, "entry layout");
_Static_assert(sizeof(struct uffd_hello) == 32, "uffd message layout");

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);

static mmap_fn real_mmap, real_mmap64;

enum mode { MODE_OFF, MODE_LAYOUT, MODE_UFFD, MODE_BAD };

static struct {
	enum mode mode;
	char memfile[PATH_MAX]; /* THAW_SHIM_MEMFILE, for messages */
	dev_t mem_dev;	       /* the memory file's identity: a descriptor */
	ino_t mem_ino;	       /* for it is matched by fstat, not by path */
	const char *layout, *lsfile, *sock, *device;
	int populate;	    /* THAW_SHIM_POPULATE=read */
	int protect;	    /* THAW_SHIM_PROTECT=1 */
	int punch_pass;	    /* THAW_SHIM_PUNCH=pass: punches into the memory file go through */
	int hugepage;	    /* THAW_SHIM_HUGEPAGE=keep: QEMU's MADV_HUGEPAGE on guest RAM stays */
	int no_readahead;   /* THAW_SHIM_READAHEAD=off: guest RAM mapped MADV_RANDOM (record VMs) */
	int memfile_ok;	    /* mem_dev/mem_ino identify the memory file */
	const char *stats; /* THAW_SHIM_STATS: where populate reports */
	char bad[PATH_MAX + 128]; /* why MODE_BAD, reported on every candidate */
} cfg;

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

/* One write(2) per line so QEMU's other threads cannot interleave. */
static void shim_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t r = write(STDERR_FILENO, buf, (size_t)n);
	(void)r;
}

/* Log "thaw-shim: <what>: <strerror(err)>" and set errno. */
static void vfail(int err, const char *fmt, va_list ap)
{
	char what[768];

	vsnprintf(what, sizeof(what), fmt, ap);
	shim_log("thaw-shim: %s: %s", what, strerror(err));
	errno = err;
}

/* vfail, returning MAP_FAILED (for the intercepted mmap). */
static void *fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(err, fmt, ap);
	va_end(ap);
	return MAP_FAILED;
}

/* vfail, returning -1 (for helpers). */
static int failed(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail(err, fmt, ap);
	va_end(ap);
	return -1;
}

/*
 * Resolved in a constructor so that the first intercepted call never runs
 * dlsym; if something maps before that, the raw syscall stands in.
 */
__attribute__((constructor)) static void resolve_real(void)
{
	if (!real_mmap)
		real_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
	if (!real_mmap64)
		real_mmap64 = (mmap_fn)dlsym(RTLD_NEXT, "mmap64");
}

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* The mmap used for our own mappings (never re-enters the interposer). */
static void *do_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (real_mmap)
		return real_mmap(addr, len, prot, flags, fd, off);
	return sys_mmap(addr, len, prot, flags, fd, off);
}

/* Identifies the memory file: through the file table when the daemon
 * passed it (QEMU's user may not be able to stat its path), else by path. */
static int identify_memfile(const char *mem)
{
	struct stat st;
	int fd = shim_table_fd(mem);

	if ((fd >= 0 ? fstat(fd, &st) : stat(mem, &st)) < 0)
		return -1;
	cfg.mem_dev = st.st_dev;
	cfg.mem_ino = st.st_ino;
	snprintf(cfg.memfile, sizeof(cfg.memfile), "%s", mem);
	return 0;
}

static void load_config(void)
{
	const char *mode = getenv("THAW_SHIM_MODE");
	const char *mem = getenv("THAW_SHIM_MEMFILE");
	const char *protect = getenv("THAW_SHIM_PROTECT");

	const char *huge = getenv("THAW_SHIM_HUGEPAGE");

	cfg.protect = protect && !strcmp(protect, "1");
	cfg.punch_pass = getenv("THAW_SHIM_PUNCH") && !strcmp(getenv("THAW_SHIM_PUNCH"), "pass");
	cfg.hugepage = huge && !strcmp(huge, "keep");
	cfg.no_readahead = getenv("THAW_SHIM_READAHEAD") && !strcmp(getenv("THAW_SHIM_READAHEAD"), "off");
	cfg.memfile_ok = mem && *mem && identify_memfile(mem) == 0;
	if (!mode || !*mode) {
		cfg.mode = MODE_OFF;
		return;
	}
	cfg.layout = getenv("THAW_SHIM_LAYOUT");
	cfg.lsfile = getenv("THAW_SHIM_LSFILE");
	cfg.device = getenv("THAW_SHIM_DEVICE");
	cfg.sock = getenv("THAW_SHIM_UFFD_SOCK");
	cfg.stats = getenv("THAW_SHIM_STATS");
	const char *pop = getenv("THAW_SHIM_POPULATE");
	cfg.mode = MODE_BAD;
	if (pop && *pop && strcmp(pop, "read") != 0) {
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_POPULATE=%s is not read", pop);
		return;
	}
	cfg.populate = pop && *pop;
	if (!strcmp(mode, "layout"))
		cfg.mode = MODE_LAYOUT;
	else if (!strcmp(mode, "uffd"))
		cfg.mode = MODE_UFFD;
	else
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_MODE=%s is not layout or uffd", mode);

	if (cfg.mode != MODE_BAD && (!mem || !*mem)) {
		cfg.mode = MODE_BAD;
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_MEMFILE not set");
	} else if (cfg.mode != MODE_BAD && !cfg.memfile_ok) {
		int err = errno;
		cfg.mode = MODE_BAD;
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_MEMFILE %s: %s", mem, strerror(err));
	}
	if (cfg.mode == MODE_LAYOUT && (!cfg.layout || !*cfg.layout)) {
		cfg.mode = MODE_BAD;
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_LAYOUT not set");
	}
	if (cfg.mode == MODE_UFFD && cfg.populate) {
		cfg.mode = MODE_BAD;
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_POPULATE needs layout mode");
	}
	if (cfg.mode == MODE_UFFD && (!cfg.sock || !*cfg.sock)) {
		cfg.mode = MODE_BAD;
		snprintf(cfg.bad, sizeof(cfg.bad), "THAW_SHIM_UFFD_SOCK not set");
	}
}

static int fd_is_memfile(int fd)
{
	struct stat st;

	return cfg.memfile_ok && fstat(fd, &st) == 0 && st.st_dev == cfg.mem_dev && st.st_ino == cfg.mem_ino;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/*
 * After a failure part-way through, put back what QEMU had there before (its
 * PROT_NONE reservation) so no half-built guest memory stays mapped.
 */
static void restore_reservation(void *addr, size_t len)
{
	do_mmap(addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

static int range_ok(uint64_t off, uint64_t len, uint64_t limit)
{
	return off <= limit && len <= limit - off;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * Pre-fault [addr, addr+len) for reading.  MADV_POPULATE_READ (Linux 5.14)
 * maps file pages shared and read-only (a later write copies) and anonymous
 * pages to the zero page.  MAP_POPULATE or mlock would not do: on a private
 * writable mapping they take write faults and copy every page.  Older
 * kernels get the same effect by reading one byte of every page.
 */
static int populate_read(void *addr, size_t len)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (madvise(addr, len, MADV_POPULATE_READ) == 0)
		return 0;
	if (errno != EINVAL)
		return -1;
	for (size_t off = 0; off < len; off += page)
		(void)*(volatile const char *)((const char *)addr + off);
	return 0;
}

/*
 * Pre-fault a shared device range writable, so the guest's first write to
 * it takes no fault either (the range is the VM's own: nothing is copied).
 * Kernels before 5.14 get a read pass (writes then take a minor fault).
 */
static int populate_write(void *addr, size_t len)
{
	if (madvise(addr, len, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL)
		return -1;
	return populate_read(addr, len);
}

/*
 * Size of the device behind fd: a regular file's size, or a character
 * device's from sysfs (device-DAX publishes /sys/dev/char/M:m/size).
 */
static int device_size(int fd, uint64_t *size)
{
	struct stat st;
	char path[96], buf[32];
	int sfd;
	ssize_t n;

	if (fstat(fd, &st) < 0)
		return -1;
	if (S_ISREG(st.st_mode)) {
		*size = (uint64_t)st.st_size;
		return 0;
	}
	if (!S_ISCHR(st.st_mode)) {
		errno = ENODEV;
		return -1;
	}
	snprintf(path, sizeof(path), "/sys/dev/char/%u:%u/size", major(st.st_rdev), minor(st.st_rdev));
	sfd = open(path, O_RDONLY | O_CLOEXEC);
	if (sfd < 0)
		return -1;
	n = read(sfd, buf, sizeof(buf) - 1);
	close(sfd);
	if (n <= 0) {
		errno = n < 0 ? errno : EIO;
		return -1;
	}
	buf[n] = '\0';
	*size = strtoull(buf, NULL, 0);
	return 0;
}

/* Write "populate_us <n>\nbytes <n>\n" to THAW_SHIM_STATS for the daemon. */
static void write_stats(uint64_t us, size_t len)
{
	char buf[128];
	int fd, n;

	if (!cfg.stats || !*cfg.stats)
		return;
	fd = open(cfg.stats, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "populate_us %llu\nbytes %zu\n", (unsigned long long)us, len);
	if (write(fd, buf, (size_t)n) != n)
		shim_log("thaw-shim: writing %s failed", cfg.stats);
	close(fd);
}

/* A layout table and the files its entries map. */
struct layout {
	struct layout_header h;
	struct layout_entry *ents;
	int tfd, lsfd, devfd;
	uint64_t memfile_size, ls_size, dev_size;
};

/* Reads and checks the table's header and entries (not their ranges). */
static int read_table(struct layout *l, size_t len)
{
	struct layout_header *h = &l->h;
	struct stat st;

	l->tfd = open(cfg.layout, O_RDONLY | O_CLOEXEC);
	if (l->tfd < 0)
		return failed(errno, "open layout table %s", cfg.layout);
	if (fstat(l->tfd, &st) < 0)
		return failed(errno, "fstat layout table %s", cfg.layout);
	if ((uint64_t)st.st_size < sizeof(*h))
		return failed(EINVAL, "layout table %s: %lld bytes, shorter than the header", cfg.layout,
			      (long long)st.st_size);
	if (read_full(l->tfd, h, sizeof(*h), 0) < 0)
		return failed(errno, "read layout table %s", cfg.layout);
	if (memcmp(h->magic, LAYOUT_MAGIC, 8) != 0)
		return failed(EINVAL, "layout table %s: bad magic", cfg.layout);
	if (h->version != 1 || h->reserved != 0)
		return failed(EINVAL, "layout table %s: version %u reserved %llu, want 1 and 0", cfg.layout,
			      h->version, (unsigned long long)h->reserved);
	if (h->count > MAX_ENTRIES)
		return failed(EINVAL, "layout table %s: %u entries exceeds %u", cfg.layout, h->count, MAX_ENTRIES);
	uint64_t want = sizeof(*h) + (uint64_t)h->count * sizeof(*l->ents);
	if ((uint64_t)st.st_size != want)
		return failed(EINVAL, "layout table %s: %lld bytes, want %llu for %u entries", cfg.layout,
			      (long long)st.st_size, (unsigned long long)want, h->count);
	if (h->mem_size != len)
		return failed(EINVAL, "layout table %s: mem_size %llu but QEMU maps %zu bytes", cfg.layout,
			      (unsigned long long)h->mem_size, len);
	if (!h->count)
		return 0;
	l->ents = malloc((size_t)h->count * sizeof(*l->ents));
	if (!l->ents)
		return failed(ENOMEM, "layout table %s: allocating %u entries", cfg.layout, h->count);
	if (read_full(l->tfd, l->ents, (size_t)h->count * sizeof(*l->ents), sizeof(*h)) < 0)
		return failed(errno, "read layout table %s", cfg.layout);
	return 0;
}

static int file_size(int fd, uint64_t *size)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -1;
	*size = (uint64_t)st.st_size;
	return 0;
}

/* A file entries may map besides the memory file, as messages name it. */
struct backing {
	const char *kind;     /* "... has <kind> entries" */
	const char *env;      /* the variable that names it */
	const char *name;     /* "open <name> <path>" */
	int flags;            /* open flags besides O_CLOEXEC */
	const char *size_op;  /* "<size_op> <name> <path>" */
	int (*size_of)(int fd, uint64_t *size);
};

static const struct backing device_backing = {
	.kind = "device", .env = "THAW_SHIM_DEVICE", .name = "device",
	.flags = O_RDWR, .size_op = "size of", .size_of = device_size,
};
static const struct backing lsfile_backing = {
	.kind = "loading-set", .env = "THAW_SHIM_LSFILE", .name = "loading-set file",
	.flags = O_RDONLY, .size_op = "fstat", .size_of = file_size,
};

/* Opens b at path (from its variable) into *fd and sizes it into *size. */
static int open_sized(const struct backing *b, const char *path, int *fd, uint64_t *size)
{
	if (!path || !*path)
		return failed(EINVAL, "layout table %s has %s entries but %s is not set", cfg.layout, b->kind,
			      b->env);
	*fd = open(path, b->flags | O_CLOEXEC);
	if (*fd < 0)
		return failed(errno, "open %s %s", b->name, path);
	if (b->size_of(*fd, size) < 0)
		return failed(errno, "%s %s %s", b->size_op, b->name, path);
	return 0;
}

/* Opens what the entries map besides the memory file, and sizes it all. */
static int open_backing(struct layout *l, int memfd)
{
	struct stat st;
	int need_ls = 0, need_dev = 0;

	if (fstat(memfd, &st) < 0)
		return failed(errno, "fstat memory file fd %d", memfd);
	l->memfile_size = (uint64_t)st.st_size;
	for (uint32_t i = 0; i < l->h.count; i++) {
		need_ls |= l->ents[i].kind == KIND_LSFILE;
		need_dev |= l->ents[i].kind == KIND_DEVICE;
	}
	if (need_dev && open_sized(&device_backing, cfg.device, &l->devfd, &l->dev_size) < 0)
		return -1;
	if (need_ls && open_sized(&lsfile_backing, cfg.lsfile, &l->lsfd, &l->ls_size) < 0)
		return -1;
	return 0;
}

/* Checks every entry's ranges before QEMU's reservation is touched. */
static int validate(const struct layout *l)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	for (uint32_t i = 0; i < l->h.count; i++) {
		const struct layout_entry *e = &l->ents[i];
		const char *why = NULL;

		if (e->kind > KIND_DEVICE)
			why = "invalid kind";
		else if (e->reserved)
			why = "reserved field not 0";
		else if (!e->length)
			why = "zero length";
		else if ((e->guest_off | e->length | e->file_off) % page)
			why = "not page-aligned";
		else if (!range_ok(e->guest_off, e->length, l->h.mem_size))
			why = "beyond mem_size";
		else if (e->kind == KIND_ANON && e->file_off)
			why = "anonymous entry with file_off";
		else if (e->kind == KIND_MEMFILE && !range_ok(e->file_off, e->length, l->memfile_size))
			why = "beyond the end of the memory file";
		else if (e->kind == KIND_LSFILE && !range_ok(e->file_off, e->length, l->ls_size))
			why = "beyond the end of the loading-set file";
		else if (e->kind == KIND_DEVICE && !range_ok(e->file_off, e->length, l->dev_size))
			why = "beyond the end of the device";
		if (why)
			return failed(EINVAL,
				      "layout table %s: entry %u (guest_off %#llx length %#llx file_off %#llx kind %u): %s",
				      cfg.layout, i, (unsigned long long)e->guest_off, (unsigned long long)e->length,
				      (unsigned long long)e->file_off, e->kind, why);
	}
	return 0;
}

/*
 * Maps an anonymous base, then every entry on top. MAP_NORESERVE on
 * anonymous parts: untouched guest pages are never committed; QEMU's own
 * MAP_NORESERVE (reserve=off) carries over to the file parts. On failure
 * QEMU's reservation is restored.
 */
static int map_entries(const struct layout *l, void *addr, size_t len, int prot, int flags, int memfd,
		       unsigned nkind[4])
{
	const int anon = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;
	const int filef = MAP_PRIVATE | MAP_FIXED | (flags & MAP_NORESERVE);
	const int devf = MAP_SHARED | MAP_FIXED;

	if (do_mmap(addr, len, prot, anon, -1, 0) == MAP_FAILED)
		return failed(errno, "mmap anonymous base (%zu bytes)", len);
	for (uint32_t i = 0; i < l->h.count; i++) {
		const struct layout_entry *e = &l->ents[i];
		char *dst = (char *)addr + e->guest_off;
		void *p;

		if (e->kind == KIND_ANON)
			p = do_mmap(dst, e->length, prot, anon, -1, 0);
		else if (e->kind == KIND_DEVICE)
			p = do_mmap(dst, e->length, prot, devf, l->devfd, (off_t)e->file_off);
		else
			p = do_mmap(dst, e->length, prot, filef, e->kind == KIND_MEMFILE ? memfd : l->lsfd,
				    (off_t)e->file_off);
		if (p == MAP_FAILED) {
			int err = errno;
			restore_reservation(addr, len);
			/* Each entry can split a VMA: the usual ENOMEM is vm.max_map_count. */
			const char *hint = "";
			if (err == ENOMEM)
				hint = " (vm.max_map_count?)";
			else if (err == EINVAL && e->kind == KIND_DEVICE)
				hint = " (not aligned to the device's alignment?)";
			return failed(err, "mmap entry %u of %u (kind %u, guest_off %#llx)%s", i, l->h.count, e->kind,
				      (unsigned long long)e->guest_off, hint);
		}
		nkind[e->kind]++;
	}
	return 0;
}

/* Pre-faults the range: device entries writable, then everything readable. */
static int populate(const struct layout *l, void *addr, size_t len)
{
	uint64_t t1 = now_us();
	int err;

	for (uint32_t i = 0; i < l->h.count; i++) {
		const struct layout_entry *e = &l->ents[i];

		if (e->kind == KIND_DEVICE && populate_write((char *)addr + e->guest_off, e->length) < 0) {
			err = errno;
			restore_reservation(addr, len);
			return failed(err, "populate device entry %u (%llu bytes at guest_off %#llx)", i,
				      (unsigned long long)e->length, (unsigned long long)e->guest_off);
		}
	}
	if (populate_read(addr, len) < 0) {
		err = errno;
		restore_reservation(addr, len);
		return failed(err, "populate %zu bytes of guest memory", len);
	}
	write_stats(now_us() - t1, len);
	shim_log("thaw-shim: populated %zu bytes in %llu us", len, (unsigned long long)(now_us() - t1));
	return 0;
}

static void *map_layout(void *addr, size_t len, int prot, int flags, int memfd)
{
	struct layout l = {.tfd = -1, .lsfd = -1, .devfd = -1};
	unsigned nkind[4] = {0, 0, 0, 0};
	uint64_t t0 = now_us();
	void *ret = MAP_FAILED;
	int err;

	if (read_table(&l, len) == 0 && open_backing(&l, memfd) == 0 && validate(&l) == 0 &&
	    map_entries(&l, addr, len, prot, flags, memfd, nkind) == 0 &&
	    (!cfg.populate || populate(&l, addr, len) == 0)) {
		ret = addr;
		shim_log("thaw-shim: layout: %u entries (%u anon, %u memory-file, %u loading-set, %u device) over %zu bytes in %llu us",
			 l.h.count, nkind[0], nkind[1], nkind[2], nkind[3], len, (unsigned long long)(now_us() - t0));
	}
	err = errno;
	free(l.ents);
	if (l.tfd >= 0)
		close(l.tfd);
	if (l.lsfd >= 0)
		close(l.lsfd); /* the mappings hold their own reference */
	if (l.devfd >= 0)
		close(l.devfd);
	errno = err;
	return ret;
}

static int send_hello(int sock, int uffd, void *addr, size_t len)
{
	struct uffd_hello m;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov;
	struct msghdr msg;
	size_t sent = 0;

	memset(&m, 0, sizeof(m));
	memcpy(m.magic, UFFD_MAGIC, 8);
	m.addr = (uint64_t)(uintptr_t)addr;
	m.length = len;
	m.page_size = (uint32_t)sysconf(_SC_PAGESIZE);
	m.pid = (uint32_t)getpid();

	while (sent < sizeof(m)) {
		memset(&msg, 0, sizeof(msg));
		iov.iov_base = (char *)&m + sent;
		iov.iov_len = sizeof(m) - sent;
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		if (!sent) { /* the fd rides on the first byte */
			memset(&ctl, 0, sizeof(ctl));
			msg.msg_control = ctl.buf;
			msg.msg_controllen = sizeof(ctl.buf);
			struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &uffd, sizeof(int));
		}
		ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		sent += (size_t)n;
	}
	return 0;
}

/* 0 on ack; -1 with errno (ETIMEDOUT, or ECONNRESET when the daemon hung up). */
static int wait_ack(int sock)
{
	uint64_t deadline = now_us() + (uint64_t)ACK_TIMEOUT_MS * 1000u;
	struct pollfd pfd = {.fd = sock, .events = POLLIN};
	char ack;

	for (;;) {
		uint64_t now = now_us();
		if (now >= deadline) {
			errno = ETIMEDOUT;
			return -1;
		}
		int r = poll(&pfd, 1, (int)((deadline - now + 999) / 1000));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			continue; /* re-check the deadline */
		ssize_t n = recv(sock, &ack, 1, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		return 0;
	}
}

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

/*
 * A userfaultfd for this process. /dev/userfaultfd in the file table (opened
 * by the daemon, Linux 6.1+) lets an unprivileged QEMU create one although
 * vm.unprivileged_userfaultfd is 0: the device's permission is checked at
 * open, by the daemon. Without it, the userfaultfd(2) system call.
 */
static int new_uffd(void)
{
	int dev = shim_table_fd("/dev/userfaultfd");

	if (dev >= 0)
		return ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
	return (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
}

static void *map_uffd(void *addr, size_t len, int prot)
{
	uint64_t t0 = now_us();
	struct sockaddr_un sa;
	struct uffdio_api api = {.api = UFFD_API, .features = 0};
	struct uffdio_register reg;
	int uffd = -1, sock = -1, err;
	void *ret = MAP_FAILED;

	if (strlen(cfg.sock) >= sizeof(sa.sun_path))
		return fail(ENAMETOOLONG, "uffd socket path %s", cfg.sock);
	if (do_mmap(addr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
	    MAP_FAILED)
		return fail(errno, "mmap anonymous base (%zu bytes)", len);

	uffd = new_uffd();
	if (uffd < 0) {
		ret = fail(errno, "userfaultfd");
		goto out;
	}
	if (ioctl(uffd, UFFDIO_API, &api) < 0) {
		ret = fail(errno, "UFFDIO_API");
		goto out;
	}
	memset(&reg, 0, sizeof(reg));
	reg.range.start = (uint64_t)(uintptr_t)addr;
	reg.range.len = len;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
		ret = fail(errno, "UFFDIO_REGISTER %p+%zu", addr, len);
		goto out;
	}
	if (!(reg.ioctls & ((uint64_t)1 << _UFFDIO_COPY))) {
		ret = fail(EINVAL, "UFFDIO_REGISTER: range does not support UFFDIO_COPY (ioctls %#llx)",
			   (unsigned long long)reg.ioctls);
		goto out;
	}

	if (shim_table_fd(cfg.sock) >= 0) {
		/* The daemon connected it for us: QEMU's user may not reach the path. */
		sock = shim_table_dup(cfg.sock, 0);
		if (sock < 0) {
			ret = fail(errno, "uffd socket %s from the file table", cfg.sock);
			goto out;
		}
	} else {
		sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (sock < 0) {
			ret = fail(errno, "socket");
			goto out;
		}
		memset(&sa, 0, sizeof(sa));
		sa.sun_family = AF_UNIX;
		strcpy(sa.sun_path, cfg.sock);
		if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			ret = fail(errno, "connect %s", cfg.sock);
			goto out;
		}
	}
	if (send_hello(sock, uffd, addr, len) < 0) {
		ret = fail(errno, "send uffd to %s", cfg.sock);
		goto out;
	}
	if (wait_ack(sock) < 0) {
		ret = fail(errno, "waiting for daemon ack on %s", cfg.sock);
		goto out;
	}
	ret = addr;
	shim_log("thaw-shim: uffd: registered %zu bytes, fd handed to daemon in %llu us", len,
		 (unsigned long long)(now_us() - t0));
out:
	err = errno;
	if (ret == MAP_FAILED)
		restore_reservation(addr, len); /* also drops the registration */
	if (sock >= 0)
		close(sock);
	/* The daemon holds its own copy; ours would keep the uffd alive after it exits. */
	if (uffd >= 0)
		close(uffd);
	errno = err;
	return ret;
}

/* Guest RAM: where the memory file was mapped (0, 0 until it is). */
static uintptr_t ram_start, ram_end;

static void *note_ram(void *p, size_t len)
{
	if (p != MAP_FAILED) {
		__atomic_store_n(&ram_end, (uintptr_t)p + len, __ATOMIC_RELAXED);
		__atomic_store_n(&ram_start, (uintptr_t)p, __ATOMIC_RELEASE);
	}
	return p;
}

static void *intercept(mmap_fn real, void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	int ram = 0;

	if (!real) {
		resolve_real();
		real = real_mmap64 ? real_mmap64 : real_mmap;
	}
	/* Cheap checks first: almost every mmap in QEMU is not a candidate. */
	if (fd < 0 || !(flags & MAP_FIXED) || off != 0)
		goto pass;
	pthread_once(&cfg_once, load_config);
	switch (cfg.mode) {
	case MODE_OFF:
		ram = cfg.protect && cfg.memfile_ok && fd_is_memfile(fd);
		goto pass;
	case MODE_BAD:
		/* Cannot tell which call is guest RAM: fail every candidate loudly. */
		return fail(EINVAL, "%s", cfg.bad);
	default:
		break;
	}
	if (!fd_is_memfile(fd))
		goto pass;
	if ((flags & MAP_TYPE) != MAP_PRIVATE)
		return fail(EINVAL, "memory file %s mapped with flags %#x, not MAP_PRIVATE (share=on?)",
			    cfg.memfile, flags);
	if (cfg.mode == MODE_LAYOUT)
		return note_ram(map_layout(addr, len, prot, flags, fd), len);
	return note_ram(map_uffd(addr, len, prot), len);
pass:
	if (!ram)
		return real ? real(addr, len, prot, flags, fd, off) : sys_mmap(addr, len, prot, flags, fd, off);
	void *p = real ? real(addr, len, prot, flags, fd, off) : sys_mmap(addr, len, prot, flags, fd, off);
	/*
	 * A record VM (THAW_SHIM_READAHEAD=off): its page faults read only the
	 * page faulted, so the page cache holds what the guest touched, not
	 * what readahead brought around it (thaw's steady recordings).
	 */
	if (p != MAP_FAILED && cfg.no_readahead && syscall(SYS_madvise, p, len, MADV_RANDOM) != 0)
		return fail(errno, "madvise(MADV_RANDOM) on %s's mapping", cfg.memfile);
	return note_ram(p, len);
}

typedef int (*madvise_fn)(void *, size_t, int);

/*
 * madvise: QEMU advises all guest RAM MADV_HUGEPAGE. On the memory file's
 * mapping that makes every major fault read about 4 MiB whatever the host's
 * readahead; Firecracker maps snapshots without it. Unless the restore keeps
 * it (THAW_SHIM_HUGEPAGE=keep), the hint on guest RAM is dropped.
 */
int madvise(void *addr, size_t len, int advice)
{
	static madvise_fn real;
	static int said;
	uintptr_t start = __atomic_load_n(&ram_start, __ATOMIC_ACQUIRE);
	uintptr_t end = __atomic_load_n(&ram_end, __ATOMIC_RELAXED);

	if (advice == MADV_HUGEPAGE && start && !cfg.hugepage && (uintptr_t)addr < end &&
	    (uintptr_t)addr + len > start) {
		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			shim_log("thaw-shim: MADV_HUGEPAGE on guest RAM dropped (faults read what readahead allows)");
		return 0;
	}
	if (!real)
		real = (madvise_fn)dlsym(RTLD_NEXT, "madvise");
	if (!real)
		return (int)syscall(SYS_madvise, addr, len, advice);
	return real(addr, len, advice);
}

typedef int (*fallocate_fn)(int, int, off_t, off_t);

static int intercept_fallocate(const char *name, int fd, int mode, off_t off, off_t len)
{
	static fallocate_fn real;
	static int said;

	if (mode & FALLOC_FL_PUNCH_HOLE) {
		pthread_once(&cfg_once, load_config);
		if (cfg.protect && !cfg.punch_pass && (!cfg.memfile_ok || fd_is_memfile(fd))) {
			if (!cfg.memfile_ok) {
				/* Cannot tell the memory file apart: refuse every punch. */
				errno = EOPNOTSUPP;
				return -1;
			}
			if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
				shim_log("thaw-shim: kept %s intact: hole punches by QEMU (freed guest pages) are ignored",
					 cfg.memfile);
			return 0;
		}
	}
	if (!real)
		real = (fallocate_fn)dlsym(RTLD_NEXT, name);
	if (!real)
		return (int)syscall(SYS_fallocate, fd, mode, off, len);
	return real(fd, mode, off, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	return intercept_fallocate("fallocate", fd, mode, off, len);
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	return intercept_fallocate("fallocate64", fd, mode, (off_t)off, (off_t)len);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return intercept(real_mmap, addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	return intercept(real_mmap64, addr, len, prot, flags, fd, (off_t)off);
}
