"""Where a restored QEMU's CPU goes, from `perf script -F pid,tid,time,ip,sym,dso`
of a system-wide `perf record` during TestResumeBreakdown (see ../../bench/resume.md):
python3 perfsum.py PERF_SCRIPT_TXT SAMPLE_HZ. VMs with over 20000 samples (booted
VMs) are left out; a VM's vCPU thread is its busiest thread other than the main one."""
import collections, re, sys
TRANSLATOR = {"tcg_gen_code", "tcg_optimize", "tb_gen_code", "translator_ldub", "translator_lduw",
              "translator_ldl", "translator_ldq", "translator_loop", "qht_lookup_custom", "qht_insert",
              "tcg_temp_new_internal", "tcg_emit_op", "tcg_constant_internal", "page_collection_lock",
              "tcg_func_start", "tb_link_page", "tcg_tb_alloc", "tb_htable_lookup", "tb_lookup"}
rows = []
for line in open(sys.argv[1]):
    m = re.match(r'\s*(\d+)/(\d+)\s+([\d.]+):\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$', line)
    if m:
        rows.append((int(m[1]), int(m[2]), m[5], m[6]))
hz = float(sys.argv[2])
threads = collections.defaultdict(collections.Counter)
for p, t, _, _ in rows:
    threads[p][t] += 1
vcpu = {}
for p, c in threads.items():
    others = [t for t in c if t != p]
    if sum(c.values()) <= 20000 and others:
        vcpu[p] = max(others, key=lambda t: c[t])
def group(sym, dso):
    if "perf-" in dso and dso.endswith(".map"):
        return "guest code run from the translation cache (JIT)"
    if "kernel" in dso:
        return "host kernel (page faults, zeroing, scheduling)"
    if dso.endswith("qemu-system-x86_64"):
        if sym in TRANSLATOR:
            return "QEMU: TCG translation, named functions"
        if sym == "[unknown]":
            return "QEMU: unnamed static functions (x86 translator's disas_insn/gen_*, helpers)"
        return "QEMU: other named functions (helpers, devices, main loop)"
    return "libraries (glib, libc, ld.so)"
g = {"vcpu": collections.Counter(), "other": collections.Counter()}
for p, t, sym, dso in rows:
    if p in vcpu:
        g["vcpu" if t == vcpu[p] else "other"][group(sym, dso)] += 1
n = len(vcpu)
print(f"{n} restored VMs (samples at {hz:.0f} Hz, ms of CPU per VM)")
for k, c in g.items():
    tot = sum(c.values())
    print(f"{'vCPU thread' if k == 'vcpu' else 'other QEMU threads'}: {tot / hz / n * 1000:.1f} ms")
    for name, x in c.most_common():
        print(f"  {x / hz / n * 1000:6.1f} ms {100 * x / tot:5.1f}%  {name}")
