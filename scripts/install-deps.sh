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
