#!/usr/bin/env bash
# An experiment initrd for the microvm machine: the image's initrd plus
# virtio_mmio.ko (loaded after virtio.ko; the Debian kernel has it as a
# module and microvm's devices are virtio-mmio, described in its ACPI
# tables), and one console line listing the guest's ACPI devices and what
# the vmgenid driver bound to. For TestMachineVariants (THAW_MMIO_INITRD);
# thaw itself runs pc and never uses it.
#   usage: scripts/mmio-initrd.sh IMAGE_DIR MODULES_DIR OUT
#   e.g.   scripts/mmio-initrd.sh ~/.cache/thaw/images/current \
#            ~/.cache/thaw/kernel-modules/6.1.0-56-amd64 /tmp/initrd-mmio.img
set -euo pipefail
IMG=$(readlink -f "$1"); MODS=$(readlink -f "$2"); OUT=$(readlink -m "$3")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
zstd -dc "$IMG/initrd.img" | cpio -idm --quiet
cp "$MODS/kernel/drivers/virtio/virtio_mmio.ko" lib/modules/
sed -i 's/^virtio\.ko$/virtio.ko\nvirtio_mmio.ko/' lib/modules/load-order
grep -qx virtio_mmio.ko lib/modules/load-order || { echo "no virtio.ko line in load-order" >&2; exit 1; }
check='echo "VMGENID-CHECK: $(ls /sys/bus/acpi/drivers/vmgenid/ | tr "\\n" " ") ACPI: $(ls /sys/bus/acpi/devices | tr "\\n" " ")" >/dev/console'
awk -v check="$check" '/^mount -t ext4/ && !done { print check; done=1 } { print }' init >init.new
mv init.new init; chmod 755 init
find . | cpio -o -H newc --quiet | zstd -q -f -o "$OUT"
echo "$OUT"
