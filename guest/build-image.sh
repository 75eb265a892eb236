#!/usr/bin/env bash
# Build the thaw guest image: kernel, initramfs and read-only ext4 rootfs.
#
# Usage: guest/build-image.sh [--print-dir]
#
# Prints the image directory as the only line on stdout; progress goes to stderr.
# The result is cached under ${THAW_CACHE:-$HOME/.cache/thaw}/images/<hash>/, where
# <hash> covers every input of the build (files under guest/, the host busybox binary
# and the resolved Debian kernel package; pypi.txt pins the PyPI files by sha256),
# so a cache hit costs only the hashing.
# --print-dir is accepted for clarity; printing the directory is the only mode.
#
# Needs root (debootstrap, mknod) and: debootstrap, apt-get, dpkg-deb, busybox-static,
# cpio, zstd, xz (xz-utils), mkfs.ext4 (e2fsprogs), flock (util-linux), sha256sum,
# and python3 with pip (python3-pip) to download the files pinned in pypi.txt.
set -euo pipefail

case "${1:-}" in
  "" | --print-dir) ;;
  -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--print-dir]" >&2; exit 2 ;;
esac

# Keep stdout clean for the final path: everything else, including the output of
# the tools we run, goes to stderr.
exec 3>&1 1>&2

GUEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${THAW_CACHE:-$HOME/.cache/thaw}"
IMAGES_DIR="$CACHE_ROOT/images"
SUITE=bookworm
MIRROR="${THAW_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BUSYBOX=/bin/busybox
NSTEPS=6

# Modules loaded by the initramfs, in this order; dependencies come from modules.dep
# and are loaded first. crc32c is listed explicitly because ext4/jbd2 look it up
# through the crypto API (request_module), which the initramfs cannot service.
# crc32c-intel is just the faster implementation; loading it may fail harmlessly.
# erofs: the file system of functions' dependency layers (mounted by the agent).
MODULES=(virtio_pci virtio_blk virtio_net virtio_console virtio_balloon
         crc32c_generic crc32c-intel ext4 erofs)

# Recommended kernel command line; the daemon appends its own thaw.* parameters.
# panic=-1: a guest panic reboots at once, and with -no-reboot QEMU then exits.
# The rest trims boot time under TCG: no timer/TSC calibration checks, no
# Spectre-style mitigations, a single UART to probe, no i8042 probing, and the
# CPU's RDRAND trusted so the CRNG is ready immediately.
CMDLINE="console=ttyS0 root=/dev/vda rootfstype=ext4 ro quiet loglevel=3 panic=-1"
CMDLINE+=" no_timer_check tsc=reliable mitigations=off 8250.nr_uarts=1"
CMDLINE+=" random.trust_cpu=on i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd"
CMDLINE+=" cryptomgr.notests"

log() { echo "[thaw image] $*"; }
die() { echo "[thaw image] error: $*"; exit 1; }
step() { log "step $1/$NSTEPS: $2"; }

for tool in apt-cache apt-get dpkg-deb debootstrap cpio zstd xz gzip mkfs.ext4 flock sha256sum; do
  command -v "$tool" >/dev/null || die "missing tool: $tool"
done
[[ -x $BUSYBOX ]] || die "$BUSYBOX not found (apt-get install busybox-static)"
PYTHON="${THAW_PYTHON:-python3}"

# --- Inputs and cache key ------------------------------------------------------

# The kernel is whatever linux-image-amd64 currently points to, so a Debian kernel
# update (after apt-get update) produces a new image. apt-cache takes ~0.7 s per
# call here (the pkgcache is disabled, as in Debian's container images), too slow
# for the cached path, so the answer is memoized per state of the apt lists.
resolve_kernel() {
  local pkg version
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')"
  if [[ -z $pkg && $(id -u) == 0 ]]; then
    # A machine with everything installed may still have no package lists.
    echo "[thaw image] no apt package lists: running apt-get update" >&2
    apt-get update -q >/dev/null 2>&1 || true
    pkg="$(apt-cache depends linux-image-amd64 2>/dev/null |
      awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')"
  fi
  [[ -n $pkg ]] || die "cannot resolve linux-image-amd64 (run apt-get update?)"
  version="$(apt-cache policy "$pkg" | awk '$1 == "Candidate:" { print $2; exit }')"
  [[ -n $version && $version != "(none)" ]] || die "no installable version of $pkg"
  echo "$pkg $version"
}
apt_state="$(
  shopt -s nullglob
  { stat -c '%n %s %Y' /var/lib/apt/lists/*Packages* /etc/apt/sources.list \
    /etc/apt/sources.list.d/* /etc/apt/preferences /etc/apt/preferences.d/* 2>/dev/null || true; } |
    sha256sum | cut -c1-16
)"
kernel_memo="$IMAGES_DIR/.kernel-$apt_state"
if [[ -f $kernel_memo ]]; then
  read -r kernel_pkg kernel_pkg_version <"$kernel_memo"
else
  resolved="$(resolve_kernel)"
  read -r kernel_pkg kernel_pkg_version <<<"$resolved"
  mkdir -p "$IMAGES_DIR"
  rm -f "$IMAGES_DIR"/.kernel-*
  echo "$resolved" >"$kernel_memo.$$" && mv "$kernel_memo.$$" "$kernel_memo"
fi
kernel_version="${kernel_pkg#linux-image-}"

input_files() {
  cd "$GUEST_DIR"
  {
    echo build-image.sh
    echo packages.txt
    echo pypi.txt
    find initramfs agent lib -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path 'lib/tests/*'
    [[ -d rootfs-overlay ]] && find rootfs-overlay -type f
  } | LC_ALL=C sort
}

hash="$(
  {
    (cd "$GUEST_DIR" && input_files | xargs -d '\n' sha256sum)
    sha256sum "$BUSYBOX" | cut -d' ' -f1
    echo "kernel $kernel_pkg $kernel_pkg_version"
    echo "debian $SUITE $MIRROR"
  } | sha256sum | cut -c1-16
)"
final="$IMAGES_DIR/$hash"

point_current() {
  [[ "$(readlink "$IMAGES_DIR/current" 2>/dev/null)" == "$hash" ]] && return 0
  ln -sfn "$hash" "$IMAGES_DIR/current.$$"
  mv -T "$IMAGES_DIR/current.$$" "$IMAGES_DIR/current"
}

finish() {
  point_current
  echo "$final" >&3
  exit 0
}

# image.json is written last, so its presence means the directory is complete.
[[ -f $final/image.json ]] && finish

mkdir -p "$IMAGES_DIR"
# Serialize builds: a second caller waits and then finds the finished image.
exec 4>"$IMAGES_DIR/.build.lock"
log "waiting for build lock" && flock 4
[[ -f $final/image.json ]] && finish

# --- Build ---------------------------------------------------------------------

tmp="$IMAGES_DIR/$hash.tmp.$$"
cleanup() { rm -rf "$tmp"; rm -f "$IMAGES_DIR/current.$$"; }
trap cleanup EXIT
trap 'exit 130' INT TERM  # make the EXIT trap run on signals too
rm -rf "$tmp"
# Only complete directories are ever renamed into place, but clear debris from a
# manual copy or a disk-full accident so the final rename can succeed.
[[ -e $final ]] && rm -rf "$final"
mkdir -p "$tmp/work"
work="$tmp/work"
log "building image $hash (kernel $kernel_pkg $kernel_pkg_version) in $tmp"

step 1 "kernel: apt-get download $kernel_pkg=$kernel_pkg_version"
(cd "$work" && apt-get -q -o APT::Sandbox::User=root download "$kernel_pkg=$kernel_pkg_version")
dpkg-deb -x "$work/${kernel_pkg}_"*.deb "$work/kernel"
cp "$work/kernel/boot/vmlinuz-$kernel_version" "$tmp/vmlinuz"
# Also ship the uncompressed ELF kernel: QEMU boots it through its PVH entry point
# (CONFIG_PVH=y), which skips the real-mode setup and the in-guest decompression
# of the bzImage. Under TCG that decompression dominates: the probe boot takes
# ~2.3 s with vmlinux against ~6.9 s with vmlinuz.
extract_vmlinux() { # bzImage -> ELF, by finding the compressed payload's magic
  local magic tool off
  for magic in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dc'; do
    tool="${magic#*:}" magic="${magic%%:*}"
    for off in $(LC_ALL=C grep -obUaP "$magic" "$1" | cut -d: -f1 | head -n 5); do
      # The decompressor stops at the end of the payload, which fails the
      # pipeline (trailing data, SIGPIPE): only the ELF magic decides success.
      tail -c +$((off + 1)) "$1" | $tool >"$2" 2>/dev/null || true
      [[ "$(head -c 4 "$2" | od -An -tx1 | tr -d ' ')" == 7f454c46 ]] && return 0
    done
  done
  return 1
}
extract_vmlinux "$tmp/vmlinuz" "$tmp/vmlinux" || die "cannot extract vmlinux from vmlinuz"
moddir="$work/kernel/lib/modules/$kernel_version"
# The package ships no modules.dep (its postinst runs depmod); busybox's depmod
# generates one without needing kmod on the host.
[[ -f $moddir/modules.dep ]] || "$BUSYBOX" depmod -b "$work/kernel" "$kernel_version"

step 2 "initramfs: busybox + ${MODULES[*]}"
# Resolve the modules and their dependencies into load order (dependencies first).
declare -A visited=()
load_order=()
module_path() { # module name -> path relative to $moddir, "" if built in, fails if absent
  local name alt path
  for name in "$1" "${1//_/-}" "${1//-/_}"; do
    path="$(awk -v m="/$name.ko:" 'substr($1, length($1) - length(m) + 1) == m { sub(":$", "", $1); print $1; exit }' "$moddir/modules.dep")"
    [[ -n $path ]] && { echo "$path"; return 0; }
    if grep -q "/$name\.ko\$" "$moddir/modules.builtin"; then return 0; fi
  done
  return 1
}
visit() { # path relative to $moddir
  local dep
  [[ -n ${visited[$1]:-} ]] && return 0
  visited[$1]=1
  for dep in $(awk -v m="$1:" '$1 == m { $1 = ""; print; exit }' "$moddir/modules.dep"); do
    visit "$dep"
  done
  load_order+=("$1")
}
for m in "${MODULES[@]}"; do
  path="$(module_path "$m")" || die "kernel module $m not found in $kernel_pkg"
  if [[ -z $path ]]; then log "  $m is built into the kernel"; continue; fi
  visit "$path"
done

initramfs="$work/initramfs"
mkdir -p "$initramfs"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$BUSYBOX" "$initramfs/bin/busybox"
for applet in $("$BUSYBOX" --list); do
  [[ $applet == busybox ]] || ln -s busybox "$initramfs/bin/$applet"
done
# The kernel opens /dev/console before running /init, before devtmpfs is mounted.
mknod -m 600 "$initramfs/dev/console" c 5 1
install -m 755 "$GUEST_DIR/initramfs/init" "$initramfs/init"
for path in "${load_order[@]}"; do
  cp "$moddir/$path" "$initramfs/lib/modules/"
  basename "$path" >>"$initramfs/lib/modules/load-order"
  log "  module $(basename "$path" .ko)"
done
(cd "$initramfs" && find . -mindepth 1 | LC_ALL=C sort |
  cpio --quiet -o -H newc -R 0:0 --reproducible | zstd -q -19 >"$tmp/initrd.img")

step 3 "PyPI: pip download -r pypi.txt (static ffmpeg)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "$PYTHON has no pip (apt-get install python3-pip, or set THAW_PYTHON)"
# Wheels only, for the guest's platform whatever the host's: nothing is built or run.
# pip checks every file against the sha256 pinned in pypi.txt (--require-hashes).
if ! "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 \
  -r "$GUEST_DIR/pypi.txt" -d "$work/pypi"; then
  die "pip download -r $GUEST_DIR/pypi.txt failed"
fi
# imageio-ffmpeg's wheel carries one static ffmpeg; only that binary is used.
"$PYTHON" - "$work/pypi" "$work/ffmpeg" <<'PY' || die "no ffmpeg binary in the imageio-ffmpeg wheel"
import glob, re, shutil, sys, zipfile
(whl,) = glob.glob(sys.argv[1] + "/imageio_ffmpeg-*.whl")
with zipfile.ZipFile(whl) as z:
    (name,) = [n for n in z.namelist() if re.fullmatch(r"imageio_ffmpeg/binaries/ffmpeg-linux-x86_64-v[0-9.]+", n)]
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
print("  " + name)
PY

step 4 "debootstrap $SUITE ($MIRROR)"
packages="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$GUEST_DIR/packages.txt" | grep -v '^$' | paste -sd, -)"
rootfs="$work/rootfs"
if ! debootstrap --variant=minbase --include="$packages" "$SUITE" "$rootfs" "$MIRROR" \
  >"$work/debootstrap.log" 2>&1; then
  log "debootstrap failed; last lines of its log:"
  tail -n 40 "$work/debootstrap.log"
  [[ -f $rootfs/debootstrap/debootstrap.log ]] && tail -n 40 "$rootfs/debootstrap/debootstrap.log"
  die "debootstrap failed"
fi

step 5 "rootfs: trim, install agent and ffmpeg, mkfs.ext4"
# Nothing in the guest reads docs, locales or package indexes; numpy's test
# suites are the biggest remaining dead weight.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
  "$rootfs"/usr/share/{doc,man,info,lintian,linda,bug} "$rootfs"/usr/share/locale/* \
  "$rootfs"/var/log/* "$rootfs"/debootstrap
find "$rootfs/usr/lib/python3/dist-packages/numpy" -depth -type d -name tests -exec rm -rf {} +
# Guest identity. The fs is read-only at run time, so bake these in: QEMU user-mode
# networking serves DNS at 10.0.2.3.
echo thaw >"$rootfs/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tthaw\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
rm -f "$rootfs/etc/resolv.conf"
echo "nameserver 10.0.2.3" >"$rootfs/etc/resolv.conf"
: >"$rootfs/etc/machine-id"
install -d -m 755 "$rootfs/usr/local/lib/thaw" "$rootfs/fn" "$rootfs/deps"
install -m 644 "$GUEST_DIR/agent/thaw_agent.py" "$rootfs/usr/local/lib/thaw/thaw_agent.py"
install -m 755 "$GUEST_DIR/agent/thaw-init" "$rootfs/usr/sbin/thaw-init"
# Helper modules for functions (guest/lib: thaw_redis, ...), importable from any
# python3 in the guest through a .pth file in Debian's site directory.
install -m 644 "$GUEST_DIR"/lib/*.py "$rootfs/usr/local/lib/thaw/"
echo /usr/local/lib/thaw >"$rootfs/usr/lib/python3/dist-packages/thaw.pth"
install -m 755 "$work/ffmpeg" "$rootfs/usr/local/bin/ffmpeg"
ffmpeg_version="$(chroot "$rootfs" /usr/local/bin/ffmpeg -hide_banner -version)" ||
  die "the static ffmpeg does not run"
log "  ${ffmpeg_version%%$'\n'*}"
[[ -e $rootfs/sbin/thaw-init ]] || die "/sbin/thaw-init not reachable (is /sbin merged into /usr?)"
if [[ -d $GUEST_DIR/rootfs-overlay ]]; then cp -a "$GUEST_DIR/rootfs-overlay/." "$rootfs/"; fi

used_mib="$(du -sm "$rootfs" | cut -f1)"
size_mib=$(( (used_mib + 64 + 15) / 16 * 16 ))
nfiles="$(find "$rootfs" | wc -l)"
# Read-only image: no journal, no reserved blocks; inodes sized to the tree.
# The UUID derives from the hash so identical inputs give an identical superblock id.
uuid="$(echo "$hash" | sha256sum | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12}).*/\1-\2-\3-\4-\5/')"
mkfs.ext4 -q -F -L thawroot -U "$uuid" -O ^has_journal -m 0 -N $((nfiles + nfiles / 4 + 1024)) \
  -E root_owner=0:0 -d "$rootfs" "$tmp/rootfs.ext4" "${size_mib}M"
log "  rootfs: ${used_mib} MiB used, image ${size_mib} MiB, $nfiles files"

step 6 "manifest"
rm -rf "$work"
file_entry() { # name -> json object with size and sha256
  printf '"%s":{"size":%d,"sha256":"%s"}' "$1" "$(stat -c %s "$tmp/$1")" \
    "$(sha256sum "$tmp/$1" | cut -d' ' -f1)"
}
printf '{"format":1,"hash":"%s","kernel_version":"%s","kernel_package":"%s","kernel_package_version":"%s","files":{%s,%s,%s,%s},"modules":[%s],"cmdline":"%s","built_at":"%s"}\n' \
  "$hash" "$kernel_version" "$kernel_pkg" "$kernel_pkg_version" \
  "$(file_entry vmlinuz)" "$(file_entry vmlinux)" "$(file_entry initrd.img)" "$(file_entry rootfs.ext4)" \
  "$(for p in "${load_order[@]}"; do printf '"%s"\n' "$(basename "$p" .ko)"; done | paste -sd, -)" \
  "$CMDLINE" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$tmp/image.json"

# rename(2) is atomic; it fails if another builder got there first, which is fine.
if ! mv -T "$tmp" "$final" 2>/dev/null; then
  [[ -f $final/image.json ]] || die "cannot move $tmp to $final"
fi
trap - EXIT
cleanup
log "done: $final"
finish
