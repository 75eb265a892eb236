SHELL := /bin/bash
# thaw: `make demo` sets everything up and shows a cold start; `make test`
# sets everything up and runs every test. Guest artifacts are cached by the
# content hash of their inputs under $(THAW_CACHE)/images.

GO        ?= go
THAW_CACHE ?= $(HOME)/.cache/thaw
export THAW_CACHE
BIN       := bin
IMAGE_DIR := $(THAW_CACHE)/images/current
# MinIO for the registry tests (scripts/install-deps.sh builds it there).
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_BIN := $(THAW_CACHE)/minio/$(MINIO_VERSION)/minio
# The package index of the dependency tests (pypiserver) and the packages it
# serves (scripts/install-deps.sh installs and downloads both).
PYPISERVER_BIN := $(THAW_CACHE)/pypiserver/2.4.2/bin/pypi-server
WHEELS_DIR := $(THAW_CACHE)/wheels

.PHONY: all build deps image demo test unit lint fmt shim bpf clean help bench fuzz deb cluster-demo

all: build

help:
	@echo "make demo    set up what is missing, boot a VM, snapshot it, cold-start it"
	@echo "make test    set up what is missing and run every test (unit + real VMs)"
	@echo "make build   build bin/: thaw, thawd, the QEMU interposer and the eBPF objects"
	@echo "make deb     the Debian package build/thaw_<version>_<arch>.deb (binaries, unit, config, completions)"
	@echo "make cluster-demo  two thawd nodes in network namespaces behind HAProxy: routing and failover (docs/cluster.md)"
	@echo "make image   build (or reuse) the guest kernel, initramfs and root filesystem"
	@echo "make unit    unit tests only (no VMs)"
	@echo "make lint    gofmt and go vet"
	@echo "make fuzz    every Go fuzz target for FUZZTIME each (default 60s; make test runs them for 3s)"
	@echo "make bench   the evaluation (FaaSnap section 6) into docs/results/eval-<date>; filters:"
	@echo "             EXPERIMENTS=exec,size,burst,breakdown,memory,restore FUNCTIONS=... STRATEGIES=... REPS=5 OUT=dir"
	@echo "             STORE_TIER=hugetlbfs (premap store in huge pages; root) HUGEPAGES=4096"
	@echo "             STORE_TIER=devdax-file (device-DAX tier on a tmpfs file, DEVICE_FILE_GIB=6) or devdax:/dev/daxX.Y"
	@echo "             STORAGE=remote (snapshots on emulated remote block storage, checked with fio; root)"
	@echo "             REMOTE_LATENCY=500us REMOTE_IOPS=16000 REMOTE_BANDWIDTH_MBPS=1000"

deps:
	@MINIO_VERSION=$(MINIO_VERSION) scripts/install-deps.sh

# The version comes from git (a tag, or the commit) and is stamped into both
# binaries; `thaw version` and `thawd --version` print it.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/thaw-dev/thaw/internal/buildinfo.Version=$(VERSION)

build: shim bpf
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/thawd ./cmd/thawd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/thaw ./cmd/thaw

# The C interposer preloaded into every QEMU thawd starts (it maps guest
# memory for reap, faasnap and premap); thawd looks for it beside its own
# binary.
shim:
	$(MAKE) -C shim
	@mkdir -p $(BIN) && cp shim/build/libthaw_shim.so $(BIN)/libthaw_shim.so

# SnapBPF's capture program (eBPF, compiled from C with clang); thawd loads
# it from beside its own binary, like the shim.
BPF_CFLAGS := -O2 -g -Wall -Werror -target bpf -I/usr/include/$(shell uname -m)-linux-gnu
bpf: $(BIN)/snapbpf_capture.bpf.o $(BIN)/faulttrace.bpf.o

# The ablation's tracepoint counters (thawd --fault-trace-object).
$(BIN)/faulttrace.bpf.o: bpf/faulttrace.bpf.c
	@mkdir -p $(BIN)
	clang $(BPF_CFLAGS) -c $< -o $@

$(BIN)/snapbpf_capture.bpf.o: bpf/snapbpf_capture.bpf.c
	@mkdir -p $(BIN)
	clang $(BPF_CFLAGS) -c $< -o $@

# The Debian package: /usr/bin/thawd and thaw, /usr/lib/thaw (interposer and
# eBPF object), the systemd unit, /etc/thaw/thawd.yaml, completions, docs.
deb: build
	@scripts/build-deb.sh $(VERSION) build

image: deps
	@guest/build-image.sh >/dev/null

demo: deps build image
	@scripts/demo.sh

# A cluster on this machine: nodes in network namespaces behind HAProxy.
cluster-demo: deps build image
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/thaw-cluster ./cmd/thaw-cluster
	@scripts/cluster-demo.sh

unit: build
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /e2e)

# The end-to-end tests boot real QEMU VMs; THAW_IMAGE makes them mandatory,
# as THAW_MINIO makes the registry tests against a real MinIO and
# THAW_PYPISERVER and THAW_WHEELS the dependency tests against a real index
# (without them, a plain `go test ./...` skips those and says why).
test: deps build image lint deb
	THAW_IMAGE=$(IMAGE_DIR) THAW_MINIO=$(MINIO_BIN) THAW_PYPISERVER=$(PYPISERVER_BIN) THAW_WHEELS=$(WHEELS_DIR) \
	$(GO) test -count=1 -parallel 3 -timeout 40m ./... 2>&1 | tee test-output.log; exit $${PIPESTATUS[0]}
	FUZZTIME=3s scripts/fuzz.sh

# Every fuzz target (request decoding, archives, the agent protocol, QMP,
# on-disk formats, text escaped for the terminal) for FUZZTIME each.
FUZZTIME ?= 60s
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# The whole evaluation on real VMs (hours under TCG; `thaw bench eval
# --estimate` says how long). Starts its own thawd and redis-server.
bench: deps build image
	OUT="$(OUT)" EXPERIMENTS="$(EXPERIMENTS)" FUNCTIONS="$(FUNCTIONS)" STRATEGIES="$(STRATEGIES)" \
	REPS="$(REPS)" BENCH_ARGS="$(BENCH_ARGS)" THAWD_ARGS="$(THAWD_ARGS)" STORE_TIER="$(STORE_TIER)" HUGEPAGES="$(HUGEPAGES)" DEVICE_FILE_GIB="$(DEVICE_FILE_GIB)" \
	STORAGE="$(STORAGE)" REMOTE_LATENCY="$(REMOTE_LATENCY)" REMOTE_IOPS="$(REMOTE_IOPS)" REMOTE_BANDWIDTH_MBPS="$(REMOTE_BANDWIDTH_MBPS)" \
	CONCURRENCY="$(CONCURRENCY)" RESTORE_STRATEGIES="$(RESTORE_STRATEGIES)" VMM_POOL_MEMORY="$(VMM_POOL_MEMORY)" scripts/bench.sh

lint:
	@out=$$(gofmt -l cmd internal client e2e wire 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w cmd internal client e2e wire

clean:
	rm -rf $(BIN) build test-output.log
	$(MAKE) -C shim clean
