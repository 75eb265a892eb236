// Command thawd is thaw's daemon: it runs functions in microVMs, snapshots
// them and restores them, behind a REST API (internal/api/openapi.json), on a Unix socket
// and, with a token, on TCP (serve.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/snapbpf"
	"github.com/thaw-dev/thaw/internal/store"
)

func defaultImageDir() string {
	cache := os.Getenv("THAW_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "thaw")
	}
	return filepath.Join(cache, "images", "current")
}

// defaultShim is libthaw_shim.so beside the thawd binary (make build puts
// it there).
func defaultShim() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), "libthaw_shim.so")
}

// defaultSnapBPFObject is the snapbpf capture program beside the thawd
// binary (make build compiles it there), found like the shim.
func defaultSnapBPFObject() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), snapbpf.ObjectFile)
}

// listFlag is a flag that may be given more than once.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var cfg serveConfig
	flag.Var((*listFlag)(&cfg.Listen), "listen", "address to serve the API on, repeatable: a Unix socket (an absolute path or unix:PATH) or host:port for TCP, which needs the API token and, off loopback, TLS (default "+defaultSocket+")")
	flag.StringVar(&cfg.SocketGroup, "socket-group", "", "group that may use the Unix socket (mode 0660) and create functions from host directories (default: root's group)")
	flag.StringVar(&cfg.TokenFile, "token-file", "", "API token for TCP clients, read from this file (0600, not a symlink; default: <data-dir>/"+api.TokenFileName+", generated at first start)")
	flag.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate (PEM) for the TCP listeners; required, with --tls-key, for an address that is not loopback")
	flag.StringVar(&cfg.TLSKey, "tls-key", "", "TLS private key (PEM) of --tls-cert")
	flag.Var((*listFlag)(&cfg.AllowedHosts), "allowed-host", "Host header value accepted over TCP besides loopback names and addresses, repeatable (without a port: any port)")
	flag.StringVar(&cfg.MetricsListen, "metrics-listen", "", "loopback host:port serving GET /metrics alone, without the token, for a Prometheus on this host (metrics are also at /metrics on every --listen, with the token over TCP)")
	flag.Var((*listFlag)(&cfg.AllowedOrigins), "allowed-origin", "web origin (scheme://host[:port]) whose browser requests are served, repeatable; requests from any other origin are refused")
	d := &cfg.Daemon
	flag.StringVar(&d.DataDir, "data-dir", "/var/lib/thaw", "catalog, functions, snapshots and VM run directories")
	flag.StringVar(&d.ImageDir, "image", defaultImageDir(), "guest image directory (built by 'make image')")
	flag.StringVar(&d.Accel, "accel", "auto", "accelerator: auto (probe KVM, else TCG), kvm or tcg")
	flag.IntVar(&d.DefaultMemoryMiB, "memory", 512, "default guest memory in MiB")
	flag.IntVar(&d.DefaultVCPUs, "vcpus", 1, "default number of vCPUs")
	flag.DurationVar(&d.BootTimeout, "boot-timeout", 90*time.Second, "how long a guest may take to boot or resume")
	flag.DurationVar(&d.InvokeTimeout, "invoke-timeout", 60*time.Second, "default invocation timeout")
	flag.StringVar(&d.ShimPath, "shim", defaultShim(), "interposer preloaded into every QEMU: hands it its files as descriptors, lays out memory for the reap, faasnap and premap strategies")
	flag.StringVar(&d.StoreDir, "store-dir", "", "snapshot memory store for premap: a directory on tmpfs, on hugetlbfs (with vm.nr_hugepages configured) or on a filesystem mounted with -o dax, or a device-DAX device /dev/daxX.Y (thaw manages it; default "+store.DefaultDir+"/<hash of the data dir>)")
	flag.StringVar(&d.StoreDeviceFile, "store-device-file", "", "instead of --store-dir: a fixed-size file on tmpfs used as a device-DAX device (the devdax tier on a host without persistent memory: tests and measurements); create it first, e.g. truncate -s 4G /dev/shm/thaw-region")
	flag.StringVar(&d.SnapBPFObject, "snapbpf-object", defaultSnapBPFObject(), "eBPF capture program for the snapbpf strategy (prepare)")
	var uidBase, uidCount uint
	flag.UintVar(&uidBase, "vm-uid-base", daemon.DefaultVMUIDBase, "first of the user ids QEMU runs as, one per live VM (a range no other user or service uses)")
	flag.UintVar(&uidCount, "vm-uid-count", daemon.DefaultVMUIDCount, "how many user ids from --vm-uid-base")
	flag.IntVar(&d.VMMemoryOverheadMiB, "vm-memory-overhead", daemon.DefaultVMMemoryOverheadMiB, "memory in MiB a VM's cgroup may use beyond guest RAM (QEMU, TCG's code cache, page cache)")
	flag.IntVar(&d.VMCPUWeight, "vm-cpu-weight", 100, "CPU weight of each VM's cgroup, 1-10000 (100 is an ordinary process's share)")
	flag.Int64Var(&d.ConsoleLogLimit, "console-log-limit", 1<<20, "bytes of each guest's console kept in its console.log (then only the last 16 KiB)")
	flag.StringVar(&d.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup file system for per-VM cgroups (v1 or v2); none disables them")
	flag.BoolVar(&d.AllowFullEgress, "allow-full-egress", false, "let functions declare full egress: their guests reach beyond this host (never the host itself); turns on IP forwarding and installs the nftables table inet thaw")
	flag.Var((*listFlag)(&d.FunctionRoots), "function-roots", "host directory functions may be created from (by root or --socket-group over the socket), repeatable; none: functions come only as uploaded archives")
	flag.IntVar(&d.MaxVMs, "max-vms", 0, "live VMs at once; more wait in the admission queue (default: host memory over default guest memory plus --vm-memory-overhead)")
	flag.IntVar(&d.VMMemoryBudgetMiB, "vm-memory-budget", 0, "MiB live VMs may use together, guest memory plus --vm-memory-overhead each (default: nine tenths of host memory)")
	flag.IntVar(&d.AdmissionQueue, "admission-queue", 64, "VM starts that may wait for room (live VMs, memory budget, a function's max_concurrency); more get 429")
	flag.DurationVar(&d.KeepAlive, "keep-alive", 60*time.Second, "how long a VM is kept idle after a cold invocation, for its function's next invocations (that name no snapshot or strategy) to run on it warm; a function's keep_alive_s overrides it; negative: never")
	flag.IntVar(&d.KeepAliveMaxIdle, "keep-alive-max-idle", 2, "idle VMs kept per function")
	flag.IntVar(&d.KeepAliveMinAvailableMiB, "keep-alive-min-available", 0, "MiB of host memory (MemAvailable) below which idle VMs are stopped, the longest idle first (default: a twentieth of host memory, at least 512; negative: never)")
	flag.IntVar(&d.SnapshotKeep, "snapshot-keep", 0, "keep each function's newest N snapshots and delete older ones that are not pinned or in use (0: delete only when asked)")
	flag.IntVar(&d.HistoryMax, "history-max", 100_000, "invocation records kept, the newest (negative: no bound)")
	flag.DurationVar(&d.HistoryMaxAge, "history-max-age", 30*24*time.Hour, "invocation records older than this are pruned (negative: no bound)")
	flag.DurationVar(&d.AdmissionTimeout, "admission-timeout", 30*time.Second, "how long a VM start waits for room before 429")
	flag.IntVar(&d.MaxStoredResultBytes, "max-stored-result", daemon.DefaultMaxStoredResult, "result bytes an invocation's history keeps (the caller always gets the whole result)")
	verbose := flag.Bool("v", false, "log every request")
	showVersion := flag.Bool("version", false, "print thawd's version and exit")
	logFormat := flag.String("log-format", "text", "log lines as text (key=value) or json (one object a line)")
	flag.Parse()
	if *showVersion {
		fmt.Println("thawd", buildinfo.String())
		return
	}
	d.VMUIDBase, d.VMUIDCount = uint32(uidBase), uint32(uidCount)
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "thawd: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log, err := newLogger(*logFormat, level)
	if err != nil {
		fmt.Fprintln(os.Stderr, "thawd:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error("thawd failed", "err", err)
		stop()
		os.Exit(1)
	}
}

// newLogger logs to stderr in format ("text" or "json").
func newLogger(format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
