// SPDX-License-Identifier: GPL-2.0
/*
 * faulttrace.bpf.c - per-process page-fault and I/O counters for the
 * FaaSnap ablation (docs/bench/ablation.md), on tracepoints only.
 *
 * For every process (keyed by tgid, LRU) it counts:
 *   - user page faults (exceptions:page_fault_user, at fault entry);
 *   - read bios the process submitted and their bytes
 *     (block:block_bio_queue; readahead of a page fault is submitted by the
 *     faulting thread, the daemon's loader reads are submitted by thawd);
 *   - time its threads spent blocked in uninterruptible sleep (D state),
 *     from sched:sched_switch with prev_state D to sched:sched_wakeup: the
 *     time page faults waited for I/O (a QEMU thread does no other
 *     uninterruptible waits on a restore of local memory).
 *
 * The paper measures fault handling time per fault with bpftrace kprobes;
 * this kernel has no kprobes or fentry, and no tracepoint marks the end of
 * a fault, so the time blocked is what thaw reports instead.
 *
 * Build: clang -O2 -g -target bpf (Makefile target `bpf`).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct trace_event_raw_block_bio___thaw {
	unsigned int nr_sector;
	char rwbs[10];
} __attribute__((preserve_access_index));

struct trace_event_raw_sched_switch___thaw {
	int prev_pid;
	long prev_state;
} __attribute__((preserve_access_index));

struct trace_event_raw_sched_wakeup_template___thaw {
	int pid;
} __attribute__((preserve_access_index));

/* Must match internal/faulttrace.Counters. */
struct counters {
	__u64 faults;
	__u64 read_bios;
	__u64 read_bytes;
	__u64 blocked_ns;
	__u64 blocked;
};

struct sleeper {
	__u64 since;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct counters);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct sleeper);
} sleeping SEC(".maps");

#define TASK_UNINTERRUPTIBLE 2

static struct counters *counters_of(__u32 tgid)
{
	struct counters *c = bpf_map_lookup_elem(&procs, &tgid);
	if (c)
		return c;
	struct counters zero = {};
	bpf_map_update_elem(&procs, &tgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&procs, &tgid);
}

SEC("tracepoint/exceptions/page_fault_user")
int faulttrace_fault(void *ctx)
{
	struct counters *c = counters_of(bpf_get_current_pid_tgid() >> 32);
	if (c)
		__sync_fetch_and_add(&c->faults, 1);
	return 0;
}

SEC("tracepoint/block/block_bio_queue")
int faulttrace_bio(struct trace_event_raw_block_bio___thaw *ctx)
{
	char rw[2];
	if (bpf_probe_read_kernel(rw, sizeof(rw), ctx->rwbs) < 0)
		return 0;
	if (rw[0] != 'R' && rw[1] != 'R') /* reads: "R", "RA", "RS", "FR"... */
		return 0;
	struct counters *c = counters_of(bpf_get_current_pid_tgid() >> 32);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->read_bios, 1);
	__sync_fetch_and_add(&c->read_bytes, (__u64)ctx->nr_sector * 512);
	return 0;
}

SEC("tracepoint/sched/sched_switch")
int faulttrace_switch(struct trace_event_raw_sched_switch___thaw *ctx)
{
	if (!(ctx->prev_state & TASK_UNINTERRUPTIBLE))
		return 0;
	__u32 tid = ctx->prev_pid;
	struct sleeper s = {.since = bpf_ktime_get_ns(), .tgid = bpf_get_current_pid_tgid() >> 32};
	bpf_map_update_elem(&sleeping, &tid, &s, BPF_ANY);
	return 0;
}

SEC("tracepoint/sched/sched_wakeup")
int faulttrace_wakeup(struct trace_event_raw_sched_wakeup_template___thaw *ctx)
{
	__u32 tid = ctx->pid;
	struct sleeper *s = bpf_map_lookup_elem(&sleeping, &tid);
	if (!s)
		return 0;
	__u64 d = bpf_ktime_get_ns() - s->since;
	struct counters *c = counters_of(s->tgid);
	if (c) {
		__sync_fetch_and_add(&c->blocked_ns, d);
		__sync_fetch_and_add(&c->blocked, 1);
	}
	bpf_map_delete_elem(&sleeping, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
