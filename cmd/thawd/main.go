// Command thawd is thaw's daemon: it runs functions in microVMs, snapshots
// them and restores them, behind a REST API (see docs/api.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/api"
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

func main() {
	var cfg daemon.Config
	listen := flag.String("listen", "127.0.0.1:7380", "address to serve the API on (host:port, or a path for a Unix socket)")
	flag.StringVar(&cfg.DataDir, "data-dir", "/var/lib/thaw", "catalog, functions, snapshots and VM run directories")
	flag.StringVar(&cfg.ImageDir, "image", defaultImageDir(), "guest image directory (built by 'make image')")
	flag.StringVar(&cfg.Accel, "accel", "auto", "accelerator: auto (probe KVM, else TCG), kvm or tcg")
	flag.IntVar(&cfg.DefaultMemoryMiB, "memory", 512, "default guest memory in MiB")
	flag.IntVar(&cfg.DefaultVCPUs, "vcpus", 1, "default number of vCPUs")
	flag.DurationVar(&cfg.BootTimeout, "boot-timeout", 90*time.Second, "how long a guest may take to boot or resume")
	flag.DurationVar(&cfg.InvokeTimeout, "invoke-timeout", 60*time.Second, "default invocation timeout")
	flag.StringVar(&cfg.ShimPath, "shim", defaultShim(), "memory-layout interposer for the reap, faasnap and premap strategies")
	flag.StringVar(&cfg.StoreDir, "store-dir", "", "snapshot memory store for premap: a directory on tmpfs, on hugetlbfs (with vm.nr_hugepages configured) or on a filesystem mounted with -o dax, or a device-DAX device /dev/daxX.Y (thaw manages it; default "+store.DefaultDir+"/<hash of the data dir>)")
	flag.StringVar(&cfg.StoreRegion, "store-region", "", "instead of --store-dir: a fixed-size file on tmpfs used as a device-DAX device (the devdax tier on a host without persistent memory: tests and measurements); create it first, e.g. truncate -s 4G /dev/shm/thaw-region")
	flag.StringVar(&cfg.SnapBPFObject, "snapbpf-object", defaultSnapBPFObject(), "eBPF capture program for the snapbpf strategy (prepare)")
	verbose := flag.Bool("v", false, "log every request")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(cfg, *listen, log); err != nil {
		log.Error("thawd failed", "err", err)
		os.Exit(1)
	}
}

func run(cfg daemon.Config, listen string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.StoreDir == "" {
		cfg.StoreDir = store.DefaultDirFor(cfg.DataDir)
	}
	svc, err := daemon.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	network := "tcp"
	if filepath.IsAbs(listen) {
		network = "unix"
		_ = os.Remove(listen)
	}
	ln, err := net.Listen(network, listen)
	if err != nil {
		_ = svc.Close(context.Background())
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	srv := &http.Server{Handler: api.New(svc, log), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("serving API", "listen", ln.Addr().String())
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if cerr := svc.Close(sctx); err == nil || errors.Is(err, http.ErrServerClosed) {
		err = cerr
	}
	return err
}
