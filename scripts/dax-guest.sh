#!/usr/bin/env bash
# Run the memory store's DAX tests on the kernel's real persistent-memory
# code, on hosts without persistent memory: boot the thaw guest kernel with
# memmap=128M!256M (the kernel turns that RAM into a legacy pmem namespace)
# and run a test binary there.
#   fsdax:  format the namespace (/dev/pmem0) ext4, mount it -o dax, run
#           internal/store's TestFSDAX on it.
#   devdax: reconfigure the namespace as device-DAX through sysfs (what
#           `ndctl create-namespace -m devdax` does: claim it with the dax
#           seed, 2 MiB alignment, struct pages in RAM, bind dax_pmem), and
#           run TestDevDAX on /dev/dax0.0, with the interposer and its
#           QEMU-like checker run from the thaw root file system.
# Prints the guest's console; exits 0 only if the test passed.
#   usage: scripts/dax-guest.sh fsdax|devdax IMAGE_DIR
# Needs: qemu-system-x86_64, busybox (static), cpio, gzip, dpkg-deb, apt-get
# (the kernel package's nvdimm/dax modules are fetched once into
# $THAW_CACHE), and the built interposer (make -C shim) for devdax.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: $0 fsdax|devdax IMAGE_DIR}
IMAGE=${2:?usage: $0 fsdax|devdax IMAGE_DIR}
CACHE=${THAW_CACHE:-$HOME/.cache/thaw}
BUSYBOX=/bin/busybox
case $MODE in
fsdax) TEST=TestFSDAX ;;
devdax) TEST=TestDevDAX ;;
*) echo "unknown mode $MODE (fsdax or devdax)" >&2; exit 2 ;;
esac

read -r pkg ver < <(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["kernel_package"], m["kernel_package_version"])' "$IMAGE/image.json")
kver=${pkg#linux-image-}
mods="$CACHE/kernel-modules/$kver"
if [[ ! -f $mods/.done ]]; then
  echo "[dax] fetching the modules of $pkg $ver (once)"
  work=$(mktemp -d)
  (cd "$work" && apt-get -q -o APT::Sandbox::User=root download "$pkg=$ver" >/dev/null)
  dpkg-deb -x "$work"/*.deb "$work/k"
  [[ -f $work/k/lib/modules/$kver/modules.dep ]] || "$BUSYBOX" depmod -b "$work/k" "$kver"
  rm -rf "$mods" && mkdir -p "$(dirname "$mods")"
  mv "$work/k/lib/modules/$kver" "$mods"
  rm -rf "$work"
  touch "$mods/.done"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,r,mnt/dax,lib/modules,shim}
cp "$BUSYBOX" "$root/bin/busybox"
CGO_ENABLED=0 go test -c -o "$root/store.test" ./internal/store
if [[ $MODE == devdax ]]; then
  for f in libthaw_shim.so thaw-shim-check; do
    [[ -f shim/build/$f ]] || { echo "shim/build/$f is missing: make -C shim" >&2; exit 1; }
    cp "shim/build/$f" "$root/shim/"
  done
fi

# Modules in load order, dependencies first (modules.dep).
declare -A seen=()
add() {
  local m=$1 path dep
  path=$(awk -v m="/$m.ko:" 'substr($1, length($1) - length(m) + 1) == m { sub(":$", "", $1); print $1; exit }' "$mods/modules.dep")
  [[ -n $path ]] || { grep -q "/$m\.ko\$" "$mods/modules.builtin" && return 0; echo "module $m not found" >&2; exit 1; }
  [[ -n ${seen[$path]:-} ]] && return 0
  for dep in $(awk -v p="$path:" '$1 == p { $1 = ""; print; exit }' "$mods/modules.dep"); do
    add "$(basename "$dep" .ko)"
  done
  seen[$path]=1
  cp "$mods/$path" "$root/lib/modules/"
  basename "$path" >>"$root/lib/modules/load-order"
}
for m in virtio_pci virtio_blk crc32c_generic ext4 nd_e820 nd_pmem; do add "$m"; done
[[ $MODE == devdax ]] && for m in device_dax dax_pmem; do add "$m"; done

cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/load-order); do insmod /lib/modules/$m 2>/dev/null; done
for i in $(seq 50); do [ -b /dev/pmem0 ] && [ -b /dev/vda ] && break; sleep 0.2; done
ls -l /dev/pmem0 /dev/vda
mount -t ext4 -o ro /dev/vda /r && mount -t devtmpfs dev /r/dev && mount -t proc proc /r/proc
INIT
if [[ $MODE == fsdax ]]; then
  cat >>"$root/init" <<'INIT'
# mkfs.ext4 comes from the thaw root file system (read-only); DAX needs 4 KiB blocks.
chroot /r /sbin/mkfs.ext4 -q -F -b 4096 /dev/pmem0
mount -t ext4 -o dax /dev/pmem0 /mnt/dax && chmod 0700 /mnt/dax && grep pmem0 /proc/mounts
THAW_FSDAX_DIR=/mnt/dax TMPDIR=/tmp /store.test -test.run '^TestFSDAX$' -test.v
echo "THAW-DAX-EXIT $?"
INIT
else
  cat >>"$root/init" <<'INIT'
# namespace0.0 -> devdax, as ndctl create-namespace -f -e namespace0.0 -m devdax -a 2M --map=mem.
seed=$(cat /sys/bus/nd/devices/region0/dax_seed)
d=/sys/bus/nd/devices/$seed
echo namespace0.0 >/sys/bus/nd/drivers/nd_pmem/unbind
cat /proc/sys/kernel/random/uuid >$d/uuid
echo 2097152 >$d/align
echo ram >$d/mode
echo namespace0.0 >$d/namespace
echo "$seed" >/sys/bus/nd/drivers/dax_pmem/bind
for i in $(seq 50); do [ -c /dev/dax0.0 ] && break; sleep 0.2; done
ls -l /dev/dax0.0 && echo "dax0.0 size $(cat /sys/bus/dax/devices/dax0.0/size) align $(cat /sys/bus/dax/devices/dax0.0/align)"
# The interposer and its checker run in the thaw root file system (glibc),
# from a tmpfs; sysfs there lets the interposer size the device.
mount -t tmpfs tmp /r/tmp && mount -t sysfs sys /r/sys && cp /shim/* /r/tmp/
THAW_DEVDAX=/dev/dax0.0 THAW_DEVDAX_CHROOT=/r THAW_DEVDAX_SHIM_DIR=/tmp TMPDIR=/tmp \
  /store.test -test.run '^TestDevDAX$' -test.v
echo "THAW-DAX-EXIT $?"
INIT
fi
echo 'poweroff -f' >>"$root/init"
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initrd"

out="$tmp/console"
timeout 600 qemu-system-x86_64 -accel tcg -m 512M -smp 1 -nographic -no-reboot -nodefaults \
  -serial stdio -kernel "$IMAGE/vmlinuz" -initrd "$tmp/initrd" \
  -append "console=ttyS0 memmap=128M!256M panic=-1 quiet" \
  -drive "file=$IMAGE/rootfs.ext4,if=virtio,format=raw,readonly=on" | tee "$out"
grep -q "^--- PASS: $TEST" "$out" && grep -q "THAW-DAX-EXIT 0" "$out"
