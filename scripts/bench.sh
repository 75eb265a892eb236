#!/usr/bin/env bash
# The evaluation (FaaSnap §6 on thaw), end to end: start a private thawd on a
# temporary data directory and a Unix socket in it, run `thaw bench eval` (which
# starts its own redis-server on loopback for the inputs), write the results
# into OUT, stop the daemon and remove its data. Variables (all optional):
#   OUT          result directory (default docs/results/eval-<UTC date>)
#   EXPERIMENTS  exec,size,burst,breakdown,memory,restore,ablation (default all but ablation;
#                for ablation add THAWD_ARGS="--fault-trace-object $PWD/bin/faulttrace.bpf.o")
#   MEMORY_FUNCTIONS  functions of the memory-per-clone experiment (default hello,image)
#   CLONES       clone counts of the memory experiment (default 1,4,8,16)
#   CONCURRENCY  concurrent cold starts of the restore experiment (default 1,4,16)
#   RESTORE_STRATEGIES  its strategies (default STRATEGIES, else vanilla,faasnap)
#   FUNCTIONS    filter every experiment's functions (default: no filter)
#   STRATEGIES   cold strategies (default: every strategy the daemon offers)
#   REPS         repetitions (default 5)
#   BENCH_ARGS   more `thaw bench eval` flags, e.g. "--burst-sizes 1,2 --no-warm"
#   STORE_TIER   premap's memory store: tmpfs (default) or hugetlbfs (needs root:
#                grows the 2 MiB huge page pool by HUGEPAGES, default 4096, for the
#                run, mounts hugetlbfs, and gives both back after), or devdax-file
#                (the device-DAX tier on a DEVICE_FILE_GIB GiB file, default 6, standing in for a
#                device: thawd --store-device-file; as root the file is on a tmpfs mounted
#                huge=always, so it maps in 2 MiB pages as a device-DAX device does),
#                or devdax:/dev/daxX.Y (a real one)
#   VMM_POOL_MEMORY  thawd --vmm-pool-memory in MiB (default 16384)
#   THAWD_ARGS   more thawd flags, e.g. "--hugepage-hint" (keep QEMU's huge-page hint: a
#                sensitivity run; the default drops it, as Firecracker maps snapshots)
#   The eval runs at read_ahead_kb 128 (Linux's default, the paper's); BENCH_ARGS="--readahead-kb 0"
#   keeps the host's own (a sensitivity run).
#   THAW_BENCH_DIR  data directory (default: a new one under /var/tmp; removed after)
#   STORAGE      local (default) or remote: the data directory on emulated remote block
#                storage (scripts/remote-storage.sh; root; REMOTE_LATENCY, REMOTE_IOPS,
#                REMOTE_BANDWIDTH_MBPS set it), checked with fio first; its settings and the
#                fio reports go to OUT/storage and into the results (`--storage`). premap's
#                store copy stays in host memory (STORE_TIER).
#   PIP_INDEX    package index of the functions' requirements.txt (chameleon, pagerank);
#                default: a private pypiserver over the packages scripts/install-deps.sh
#                downloaded (scripts/test-packages.txt), so the run needs no network
#   KEEP=1       keep the data directory and the daemon log
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-docs/results/eval-$(date -u +%Y%m%d-%H%M)}
REPS=${REPS:-5}
DATA=${THAW_BENCH_DIR:-$(mktemp -d /var/tmp/thaw-bench.XXXXXX)}
export THAW_URL="unix:$DATA/thawd.sock"

# memory per clone and the restore path are commands of their own (`thaw bench
# memory`, `thaw bench restore`); the rest is `thaw bench eval`.
run_memory=1
run_restore=1
eval_exps=${EXPERIMENTS:-}
if [[ -n $eval_exps ]]; then
  [[ ,$eval_exps, == *,memory,* ]] || run_memory=0
  [[ ,$eval_exps, == *,restore,* ]] || run_restore=0
  eval_exps=$(tr ',' '\n' <<<"$eval_exps" | { grep -vx -e memory -e restore || true; } | paste -sd, -)
fi
run_eval=1
[[ -n ${EXPERIMENTS:-} && -z $eval_exps ]] && run_eval=0
args=(bench eval --out "$OUT" --reps "$REPS")
[[ -n $eval_exps ]] && args+=(--experiments "$eval_exps")
[[ -n ${FUNCTIONS:-} ]] && args+=(--functions "$FUNCTIONS")
[[ -n ${STRATEGIES:-} ]] && args+=(--strategies "$STRATEGIES")
# shellcheck disable=SC2206
[[ -n ${BENCH_ARGS:-} ]] && args+=($BENCH_ARGS)

REMOTE_STATE=
case ${STORAGE:-local} in
local) ;;
remote)
  [[ -z ${THAW_BENCH_DIR:-} ]] || { echo "[bench] STORAGE=remote makes its own data directory: unset THAW_BENCH_DIR" >&2; exit 1; }
  REMOTE_STATE=$(mktemp -d -u /var/tmp/thaw-remote.XXXXXX)
  scripts/remote-storage.sh up "$DATA" "$REMOTE_STATE" "$OUT/storage"
  trap 'scripts/remote-storage.sh down "$REMOTE_STATE"; rmdir "$DATA"' EXIT
  args+=(--storage "$OUT/storage")
  ;;
*) echo "[bench] STORAGE must be local or remote" >&2; exit 1 ;;
esac
mkdir -p "$DATA"
chmod go-w "$DATA" # the socket's directory: thawd refuses one others may write to
# premap's memory store lives in shared memory, removed with the data.
HUGE_ADDED=0
case ${STORE_TIER:-tmpfs} in
tmpfs) STORE=$(mktemp -d /dev/shm/thaw-bench-store.XXXXXX) ;;
hugetlbfs)
  [[ $(id -u) == 0 ]] || { echo "[bench] STORE_TIER=hugetlbfs needs root (huge page pool, mount)" >&2; exit 1; }
  STORE=$(mktemp -d /var/tmp/thaw-bench-huge.XXXXXX)
  nr=$(cat /proc/sys/vm/nr_hugepages)
  HUGE_ADDED=${HUGEPAGES:-4096}
  echo $((nr + HUGE_ADDED)) >/proc/sys/vm/nr_hugepages
  got=$(($(cat /proc/sys/vm/nr_hugepages) - nr))
  echo "[bench] huge page pool grown by $got of $HUGE_ADDED 2 MiB pages"
  HUGE_ADDED=$got
  mount -t hugetlbfs -o pagesize=2M thaw-bench "$STORE"
  ;;
devdax-file)
  REGION_MNT=
  if [[ $(id -u) == 0 ]]; then
    REGION_MNT=$(mktemp -d /var/tmp/thaw-bench-region.XXXXXX)
    mount -t tmpfs -o "huge=always,size=$((${DEVICE_FILE_GIB:-6} + 1))G" thaw-bench-region "$REGION_MNT"
    STORE=$REGION_MNT/region
  else
    echo "[bench] not root: the region is on /dev/shm in 4 KiB pages (a device maps 2 MiB ones)" >&2
    STORE=$(mktemp /dev/shm/thaw-bench-region.XXXXXX)
  fi
  truncate -s "${DEVICE_FILE_GIB:-6}G" "$STORE"
  ;;
devdax:/dev/dax*) STORE=${STORE_TIER#devdax:} ;;
*) echo "[bench] STORE_TIER must be tmpfs, hugetlbfs, devdax-file or devdax:/dev/daxX.Y" >&2; exit 1 ;;
esac
store_flag=(--store-dir "$STORE")
[[ ${STORE_TIER:-tmpfs} == devdax-file ]] && store_flag=(--store-device-file "$STORE")
# No VMM pool by default: the paper's experiments measure restores that start
# their VMM, and background refills would compete with the runs for the CPUs.
# The restore experiment's functions set their own vmm_pool (up to 16), so the
# pool's memory budget fits 16 standby VMs of 512 MiB (+384 MiB overhead each).
PYPI=
if [[ -z ${PIP_INDEX:-} ]]; then
  CACHE=${THAW_CACHE:-$HOME/.cache/thaw}
  PYPI_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$CACHE/pypiserver/2.4.2/bin/pypi-server" run -p "$PYPI_PORT" -i 127.0.0.1 --hash-algo sha256 \
    --backend simple-dir -a . -P . --disable-fallback "$CACHE/wheels" >"$DATA/pypiserver.log" 2>&1 &
  PYPI=$!
  PIP_INDEX=http://127.0.0.1:$PYPI_PORT/simple/
fi
bin/thawd --data-dir "$DATA/data" "${store_flag[@]}" --listen "$DATA/thawd.sock" --boot-timeout 5m --vmm-pool -1 \
  --vmm-pool-memory "${VMM_POOL_MEMORY:-16384}" --pip-index-url "$PIP_INDEX" ${THAWD_ARGS:-} >"$DATA/thawd.log" 2>&1 &
THAWD=$!
export THAWD_PID=$THAWD # the restore experiment reads thawd's CPU time
cleanup() {
  kill "$THAWD" 2>/dev/null || true
  wait "$THAWD" 2>/dev/null || true
  if [[ -n $PYPI ]]; then
    kill "$PYPI" 2>/dev/null || true
    wait "$PYPI" 2>/dev/null || true
  fi
  if [[ ${STORE_TIER:-tmpfs} == hugetlbfs ]]; then
    umount "$STORE" 2>/dev/null || true
    rmdir "$STORE" 2>/dev/null || true
    echo $(($(cat /proc/sys/vm/nr_hugepages) - HUGE_ADDED)) >/proc/sys/vm/nr_hugepages
    rm -rf "/dev/shm/thaw-store-meta/$(printf %s "$STORE" | sha256sum | cut -c1-12)"
  elif [[ ${STORE_TIER:-tmpfs} == devdax:* ]]; then
    :  # a real device: thawd removed its copies with the snapshots
  elif [[ -n ${REGION_MNT:-} ]]; then
    umount "$REGION_MNT" 2>/dev/null || true
    rmdir "$REGION_MNT" 2>/dev/null || true
  else
    rm -rf "$STORE"
  fi
  if [[ -n $REMOTE_STATE ]]; then
    # The volume goes with its contents.
    cp "$DATA/thawd.log" "$OUT/thawd.log" 2>/dev/null || true
    scripts/remote-storage.sh down "$REMOTE_STATE"
    rmdir "$DATA"
  elif [[ ${KEEP:-0} == 1 ]]; then
    echo "[bench] data and daemon log kept in $DATA"
  else
    cp "$DATA/thawd.log" "$OUT/thawd.log" 2>/dev/null || true
    rm -rf "$DATA"
  fi
}
trap cleanup EXIT

echo "[bench] thawd on $THAW_URL, data in $DATA (first start probes KVM: up to 20 s)"
for _ in $(seq 1 300); do
  bin/thaw info >/dev/null 2>&1 && break
  kill -0 "$THAWD" 2>/dev/null || { cat "$DATA/thawd.log"; exit 1; }
  sleep 0.2
done
bin/thaw info
mkdir -p "$OUT"
if [[ $run_eval == 1 ]]; then
  bin/thaw "${args[@]}" --estimate
  bin/thaw --timeout 48h "${args[@]}" >/dev/null
  echo "[bench] results in $OUT (eval.md, eval.json, eval.jsonl, *.svg)"
fi
if [[ $run_memory == 1 ]]; then
  margs=(bench memory --functions "${MEMORY_FUNCTIONS:-hello,image}" --clones "${CLONES:-1,4,8,16}" --out "$OUT/memory")
  [[ -n ${STRATEGIES:-} ]] && margs+=(--strategies "$STRATEGIES")
  bin/thaw --timeout 12h "${margs[@]}" >/dev/null
  echo "[bench] memory per clone in $OUT/memory (memory.md, memory.json, memory.jsonl, memory-<function>.svg)"
fi
if [[ $run_restore == 1 ]]; then
  rargs=(bench restore --concurrency "${CONCURRENCY:-1,4,16}" --reps "$REPS" --out "$OUT/restore")
  rs=${RESTORE_STRATEGIES:-${STRATEGIES:-}}
  [[ -n $rs ]] && rargs+=(--strategies "$rs")
  bin/thaw --timeout 12h "${rargs[@]}" >/dev/null
  echo "[bench] restore path in $OUT/restore (restore.md, restore.json, restore.jsonl, restore-*.svg)"
fi
