#!/usr/bin/env bash
# Run the memory store's filesystem-DAX test (internal/store TestFSDAX) on
# real persistent-memory code paths, on hosts without persistent memory: boot
# the thaw guest kernel with memmap=128M!256M (the kernel turns that RAM into
# a legacy pmem device, /dev/pmem0, which supports DAX), format it ext4, mount
# it -o dax, and run the test binary there. Prints the guest's console; exits
# 0 only if the test passed.
#   usage: scripts/fsdax-guest.sh IMAGE_DIR
# Needs: qemu-system-x86_64, busybox (static), cpio, gzip, dpkg-deb, apt-get
# (the kernel package's nvdimm modules are fetched once into $THAW_CACHE).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${1:?usage: $0 IMAGE_DIR}
CACHE=${THAW_CACHE:-$HOME/.cache/thaw}
BUSYBOX=/bin/busybox

read -r pkg ver < <(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["kernel_package"], m["kernel_package_version"])' "$IMAGE/image.json")
kver=${pkg#linux-image-}
mods="$CACHE/kernel-modules/$kver"
if [[ ! -f $mods/.done ]]; then
  echo "[fsdax] fetching the modules of $pkg $ver (once)"
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
mkdir -p "$root"/{bin,dev,proc,sys,tmp,r,mnt/dax,lib/modules}
cp "$BUSYBOX" "$root/bin/busybox"
CGO_ENABLED=0 go test -c -o "$root/store.test" ./internal/store

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

cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /lib/modules/load-order); do insmod /lib/modules/$m 2>/dev/null; done
for i in $(seq 50); do [ -b /dev/pmem0 ] && [ -b /dev/vda ] && break; sleep 0.2; done
ls -l /dev/pmem0 /dev/vda
# mkfs.ext4 comes from the thaw root file system (read-only); DAX needs 4 KiB blocks.
mount -t ext4 -o ro /dev/vda /r && mount -t devtmpfs dev /r/dev && mount -t proc proc /r/proc
chroot /r /sbin/mkfs.ext4 -q -F -b 4096 /dev/pmem0
mount -t ext4 -o dax /dev/pmem0 /mnt/dax && grep pmem0 /proc/mounts
THAW_FSDAX_DIR=/mnt/dax TMPDIR=/tmp /store.test -test.run '^TestFSDAX$' -test.v
echo "THAW-FSDAX-EXIT $?"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initrd"

out="$tmp/console"
timeout 600 qemu-system-x86_64 -accel tcg -m 512M -smp 1 -nographic -no-reboot -nodefaults \
  -serial stdio -kernel "$IMAGE/vmlinuz" -initrd "$tmp/initrd" \
  -append "console=ttyS0 memmap=128M!256M panic=-1 quiet" \
  -drive "file=$IMAGE/rootfs.ext4,if=virtio,format=raw,readonly=on" | tee "$out"
grep -q "^--- PASS: TestFSDAX" "$out" && grep -q "THAW-FSDAX-EXIT 0" "$out"
