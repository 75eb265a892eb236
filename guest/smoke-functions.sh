#!/usr/bin/env bash
# Manual end-to-end check of the bundled functions (FaaSnap Table 2) in real VMs:
# builds the guest image if needed, starts a throw-away redis-server on the host
# loopback, stores each function's default input in it, then boots every function
# under QEMU (TCG), invokes it with the inline fallback and with its input from
# Redis (guest -> 10.0.2.2:<port>), checks the results and prints the guest time
# of each invocation. See guest/smoke-functions.py for the details.
#
# Usage: guest/smoke-functions.sh [--memory MIB] [--reps N] [--keep] [--json FILE] [FUNCTION...]
# Env: THAW_CACHE selects the image cache, as for guest/build-image.sh.
# Host needs (installed with apt-get when missing): redis-server, and Debian's
# python3 with python3-numpy and python3-pil (the same versions as the guest's).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
"$PY" -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
"$PY" -c 'import PIL' 2>/dev/null || missing+=(python3-pil)
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
IMG="$("$ROOT/guest/build-image.sh")"
exec "$PY" "$ROOT/guest/smoke-functions.py" --image "$IMG" "$@"
