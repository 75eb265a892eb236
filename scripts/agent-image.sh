#!/usr/bin/env bash
# A guest image that differs from a built one only in the guest agent: for
# measuring agent changes on real VMs without rebuilding the image (which
# needs debootstrap and the Debian mirror). Copies BASE (an image directory
# from guest/build-image.sh) to OUT, replaces /usr/local/lib/thaw/thaw_agent.py
# in OUT's rootfs.ext4 with AGENT (debugfs; the ext4 image keeps its size),
# and rewrites image.json's rootfs digest and hash so snapshots record the
# difference. Not for production images: `make image` builds those.
#   usage: scripts/agent-image.sh BASE AGENT OUT
set -euo pipefail
BASE=$(readlink -f "$1"); AGENT=$2; OUT=$3
[[ -f $BASE/image.json ]] || { echo "no image at $BASE" >&2; exit 1; }
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
for f in vmlinuz vmlinux initrd.img; do ln "$BASE/$f" "$OUT.tmp/$f" 2>/dev/null || cp "$BASE/$f" "$OUT.tmp/$f"; done
cp --sparse=always "$BASE/rootfs.ext4" "$OUT.tmp/rootfs.ext4"
debugfs -w -f - "$OUT.tmp/rootfs.ext4" >/dev/null 2>"$OUT.tmp/debugfs.log" <<CMDS
rm /usr/local/lib/thaw/thaw_agent.py
write $AGENT /usr/local/lib/thaw/thaw_agent.py
set_inode_field /usr/local/lib/thaw/thaw_agent.py mode 0100644
CMDS
# Check the file inside the image is AGENT, byte for byte.
debugfs -R "cat /usr/local/lib/thaw/thaw_agent.py" "$OUT.tmp/rootfs.ext4" 2>/dev/null | cmp - "$AGENT"
sum=$(sha256sum "$OUT.tmp/rootfs.ext4" | cut -d' ' -f1)
hash=$(printf '%s %s\n' "$(jq -r .hash "$BASE/image.json")" "$(sha256sum "$AGENT" | cut -d' ' -f1)" | sha256sum | cut -c1-16)
jq -c --arg sum "$sum" --arg hash "$hash" '.files["rootfs.ext4"].sha256 = $sum | .hash = $hash' \
  "$BASE/image.json" >"$OUT.tmp/image.json"
rm -f "$OUT.tmp/debugfs.log"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "$OUT"
