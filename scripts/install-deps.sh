#!/usr/bin/env bash
# Installs what thaw needs on a fresh Debian 12 machine, and nothing when it
# is all there already (so `make demo` and `make test` can always call it).
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have qemu-system-x86_64 || need+=(qemu-system-x86)
have qemu-img           || need+=(qemu-utils)
have debootstrap        || need+=(debootstrap)
have mkfs.ext4          || need+=(e2fsprogs)
have cpio               || need+=(cpio)
have zstd               || need+=(zstd)
[ -x /bin/busybox ] || dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
have redis-server       || need+=(redis-server)
have prometheus         || need+=(prometheus)     # tests: a real Prometheus scrapes thawd
have curl               || need+=(curl)
have clang              || need+=(clang)          # compiles the snapbpf capture program
have nft                || need+=(nftables)       # full egress: the host's forwarding rules
have ip                 || need+=(iproute2)       # tests: network namespaces standing in for the outside
have nsenter            || need+=(util-linux)     # cluster: thawd nodes run in network namespaces
have haproxy            || need+=(haproxy)        # cluster: the load balancer in front of the nodes
have python3            || need+=(python3)        # tests: the guest agent's own tests run on the host
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)   # functions' requirements.txt: pip download (wheels only)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)  # tests: pypiserver's virtual environment
have mkfs.erofs         || need+=(erofs-utils)    # functions' dependency layers
have fio                || need+=(fio)            # checks the emulated remote storage (make bench STORAGE=remote)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "thaw needs these Debian packages: ${need[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "[thaw deps] installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

if ! have go; then
  echo "thaw needs Go (1.22 or newer) on PATH" >&2
  exit 1
fi

# MinIO, the S3-compatible server the registry tests run against, built from
# its Go module at a pinned version (~1.5 min the first time).
MINIO_VERSION=${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}
MINIO_DIR=${THAW_CACHE:-$HOME/.cache/thaw}/minio/$MINIO_VERSION
if [ ! -x "$MINIO_DIR/minio" ]; then
  echo "[thaw deps] building MinIO $MINIO_VERSION into $MINIO_DIR" >&2
  mkdir -p "$MINIO_DIR"
  GOBIN=$MINIO_DIR go install "github.com/minio/minio@$MINIO_VERSION"
fi

# The tests' package index: pypiserver in a virtual environment, exactly the
# versions and hashes pinned in scripts/pypiserver.txt.
SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${THAW_CACHE:-$HOME/.cache/thaw}
PYPISERVER_VERSION=${PYPISERVER_VERSION:-2.4.2}
PYPISERVER_DIR=$CACHE/pypiserver/$PYPISERVER_VERSION
if [ ! -x "$PYPISERVER_DIR/bin/pypi-server" ]; then
  echo "[thaw deps] installing pypiserver $PYPISERVER_VERSION into $PYPISERVER_DIR" >&2
  rm -rf "$PYPISERVER_DIR.tmp"
  python3 -m venv "$PYPISERVER_DIR.tmp"
  "$PYPISERVER_DIR.tmp/bin/python" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes -r "$SCRIPTS/pypiserver.txt"
  rm -rf "$PYPISERVER_DIR" && mv "$PYPISERVER_DIR.tmp" "$PYPISERVER_DIR"
  # The venv's scripts name their interpreter by path: repair them after the move.
  sed -i "1s|^#!.*python.*|#!$PYPISERVER_DIR/bin/python|" "$PYPISERVER_DIR"/bin/pypi-server
fi

# The packages the tests' indexes serve (scripts/test-packages.txt: wheels for
# the guest; scripts/test-sdists.txt: source distributions, never unpacked),
# downloaded once and checked against their pinned sha256.
WHEELS=$CACHE/wheels
if [ ! -f "$WHEELS/.complete" ] || [ "$(cat "$WHEELS/.complete")" != "$(cat "$SCRIPTS/test-packages.txt" "$SCRIPTS/test-sdists.txt" | sha256sum)" ]; then
  echo "[thaw deps] downloading the test packages into $WHEELS" >&2
  mkdir -p "$WHEELS"
  platforms=()
  for minor in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  python3 -m pip download -q --disable-pip-version-check --isolated --no-deps --require-hashes --only-binary=:all: \
    "${platforms[@]}" --python-version 3.11 --implementation cp --abi cp311 -r "$SCRIPTS/test-packages.txt" -d "$WHEELS"
  while read -r url sum; do
    case "$url" in "" | "#"*) continue ;; esac
    file=$WHEELS/${url##*/}
    if ! echo "$sum  $file" | sha256sum -c --status 2>/dev/null; then
      curl -fsSL -o "$file.tmp" "$url"
      echo "$sum  $file.tmp" | sha256sum -c --status || { echo "[thaw deps] $url: sha256 mismatch" >&2; rm -f "$file.tmp"; exit 1; }
      mv "$file.tmp" "$file"
    fi
  done <"$SCRIPTS/test-sdists.txt"
  cat "$SCRIPTS/test-packages.txt" "$SCRIPTS/test-sdists.txt" | sha256sum >"$WHEELS/.complete"
fi
