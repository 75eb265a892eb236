// SPDX-License-Identifier: GPL-2.0
/*
 * snapbpf_capture.bpf.c - SnapBPF's in-kernel working-set capture
 * (HotStorage'25, "eBPF capture and prefetch"), as thaw runs it.
 *
 * Attached to the tracepoint filemap:mm_filemap_add_to_page_cache. Every
 * folio that enters the page cache for the one memory file under capture
 * (matched by inode number and the superblock's device) is appended, in
 * arrival order, to the array map `events` as (index << 8 | order): the
 * file page index of the folio's first page and the folio's order.
 *
 * Where thaw differs from SnapBPF: SnapBPF hooks the kernel's page-cache
 * insertion path with its own probes; the kernels thaw targets offer no
 * kprobes or fentry, so thaw uses the stable tracepoint on the same path.
 * The tracepoint's record is read through CO-RE (preserve_access_index)
 * against the kernel's BTF, so a layout change in a later kernel is
 * relocated at load time instead of read wrongly.
 *
 * Build: clang -O2 -g -target bpf (Makefile target `bpf`); thawd loads the
 * object from beside its binary (bin/snapbpf_capture.bpf.o).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* The tracepoint's record (trace_event_raw_<class>); ___thaw is a CO-RE
 * flavour: only the fields named here are relocated against kernel BTF. */
struct trace_event_raw_mm_filemap_op_page_cache___thaw {
	unsigned long i_ino;
	unsigned long index;
	__u32 s_dev;
	unsigned char order;
} __attribute__((preserve_access_index));

/* Set by the loader before the program is loaded. */
const volatile __u64 target_ino = 0;
const volatile __u32 target_dev = 0; /* kernel dev_t: major << 20 | minor */

/* Read by the loader after the capture. */
__u64 captured = 0; /* events seen (may exceed max_entries) */
__u64 dropped = 0;  /* events that did not fit in `events` */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* resized by the loader */
	__type(key, __u32);
	__type(value, __u64);
} events SEC(".maps");

SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int snapbpf_capture(struct trace_event_raw_mm_filemap_op_page_cache___thaw *ctx)
{
	if (ctx->i_ino != target_ino || ctx->s_dev != target_dev)
		return 0;
	__u64 slot = __sync_fetch_and_add(&captured, 1);
	if (slot >= 0xffffffffULL) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	__u32 key = (__u32)slot;
	__u64 *v = bpf_map_lookup_elem(&events, &key);
	if (!v) { /* beyond max_entries */
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	*v = ((__u64)ctx->index << 8) | ctx->order;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
