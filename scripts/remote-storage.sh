#!/usr/bin/env bash
# Emulated remote block storage (an EBS-like volume) on this host, for
# benchmarks whose snapshots live on it (FaaSnap §6.7, Figure 11):
#
#   FUSE disk image (thaw bench remote-disk: every request waits LATENCY after
#   IOPS and bandwidth token buckets; no page cache)
#     -> loop device with direct I/O (nothing cached below the file system)
#       -> ext4, mounted at MOUNTPOINT (its page cache and readahead as on a disk)
#
#   scripts/remote-storage.sh up MOUNTPOINT STATE [FIO_OUT]
#       sets it up (root), records the settings in FIO_OUT/storage.json and,
#       with FIO_OUT, checks it with fio (O_DIRECT reads of a 1 GiB file: 4 KiB
#       random at queue depth 1 and 32, 1 MiB sequential at 16) into
#       FIO_OUT/fio-*.json. STATE is a new directory for the backing file and
#       what `down` needs. Fails (after tearing down what it made) if anything
#       does not work.
#   scripts/remote-storage.sh down STATE
#       unmounts, detaches the loop device, stops the FUSE server, removes STATE.
#
# Variables: REMOTE_LATENCY (default 500us), REMOTE_IOPS (16000),
# REMOTE_BANDWIDTH_MBPS (1000), REMOTE_DISK_GIB (volume size, sparse: 32).
# The defaults are an EBS gp3 volume at its maximum (16,000 IOPS, 1,000 MB/s)
# with the sub-millisecond latency EBS documents.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "[remote-storage] $*" >&2; exit 1; }

down() {
  local state=$1
  [[ -d $state ]] || return 0
  if [[ -f $state/mountpoint ]]; then
    local mnt
    mnt=$(cat "$state/mountpoint")
    if mountpoint -q "$mnt"; then
      umount "$mnt" || umount -l "$mnt" || echo "[remote-storage] could not unmount $mnt" >&2
    fi
  fi
  if [[ -f $state/loop ]]; then
    losetup -d "$(cat "$state/loop")" 2>/dev/null || true
    # Detaching is asynchronous: wait until the image is released.
    for _ in $(seq 1 50); do
      losetup -j "$state/fuse/disk.img" 2>/dev/null | grep -q . || break
      sleep 0.1
    done
  fi
  if [[ -f $state/server.pid ]]; then
    local pid
    pid=$(cat "$state/server.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 350); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    tail -n 1 "$state/server.log" 2>/dev/null || true
  fi
  # A FUSE mount whose server is gone fails stat (so `mountpoint` misses it):
  # look in the mount table.
  if grep -qs " $state/fuse " /proc/mounts; then
    umount "$state/fuse" 2>/dev/null || umount -l "$state/fuse"
  fi
  rm -rf "$state"
}

fio_check() {
  local mnt=$1 out=$2
  command -v fio >/dev/null || die "fio is not installed (scripts/install-deps.sh installs it)"
  local f=$mnt/fio-check.dat
  fio --name=fill --filename="$f" --size=1G --rw=write --bs=1M --direct=1 --ioengine=libaio \
    --iodepth=16 --output-format=terse >/dev/null
  local job name rw bs qd
  for job in "1-randread-4k-qd1 randread 4k 1" "2-randread-4k-qd32 randread 4k 32" "3-read-1m-qd16 read 1M 16"; do
    read -r name rw bs qd <<<"$job"
    fio --name="$name" --filename="$f" --size=1G --rw="$rw" --bs="$bs" --iodepth="$qd" --direct=1 \
      --ioengine=libaio --runtime=10 --time_based --output-format=json >"$out/fio-$name.json"
  done
  rm -f "$f"
}

up() {
  local mnt=$1 state=$2 out=${3:-}
  [[ $(id -u) == 0 ]] || die "needs root (FUSE mount, loop device, mount)"
  [[ -x bin/thaw ]] || die "bin/thaw is missing: make build"
  [[ ! -e $state ]] || die "$state exists"
  mkdir -p "$state/fuse" "$mnt"
  UP_STATE=$state # the trap runs outside this function
  trap 'rc=$?; [[ $rc == 0 ]] || down "$UP_STATE"' EXIT
  echo "$mnt" >"$state/mountpoint"
  truncate -s "${REMOTE_DISK_GIB:-32}G" "$state/volume"
  local settings=$state/storage.json
  bin/thaw bench remote-disk "$state/fuse" --backing "$state/volume" --settings "$settings" \
    --latency "${REMOTE_LATENCY:-500us}" --iops "${REMOTE_IOPS:-16000}" \
    --bandwidth-mbps "${REMOTE_BANDWIDTH_MBPS:-1000}" >"$state/server.log" 2>&1 &
  echo $! >"$state/server.pid"
  for _ in $(seq 1 100); do [[ -f $settings ]] && break; kill -0 "$(cat "$state/server.pid")" 2>/dev/null || break; sleep 0.1; done
  [[ -f $settings ]] || { cat "$state/server.log" >&2; false; }
  losetup --direct-io=on --find --show "$state/fuse/disk.img" >"$state/loop"
  local loop
  loop=$(cat "$state/loop")
  [[ $(cat "/sys/block/${loop#/dev/}/loop/dio") == 1 ]] || die "$loop: direct I/O refused"
  mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 "$loop"
  mount "$loop" "$mnt"
  echo "[remote-storage] $mnt: ext4 on $loop on $state/fuse/disk.img ($(head -n 1 "$state/server.log"))"
  if [[ -n $out ]]; then
    mkdir -p "$out"
    cp "$settings" "$out/storage.json"
    fio_check "$mnt" "$out"
    echo "[remote-storage] fio reports in $out"
  fi
  trap - EXIT
}

case ${1:-} in
up) [[ $# -ge 3 ]] || die "usage: $0 up MOUNTPOINT STATE [FIO_OUT]"; up "$2" "$3" "${4:-}" ;;
down) [[ $# -eq 2 ]] || die "usage: $0 down STATE"; down "$2" ;;
*) die "usage: $0 up MOUNTPOINT STATE [FIO_OUT] | down STATE" ;;
esac
