package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapbpf"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/thawcache"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// defaultConfigFile is read when --config is not given, if it exists.
const defaultConfigFile = "/etc/thaw/thawd.yaml"

// libDir is where the Debian package installs the interposer and the
// eBPF capture program.
const libDir = "/usr/lib/thaw"

// envPrefix names a setting in the environment: THAWD_DATA_DIR for
// --data-dir.
const envPrefix = "THAWD_"

func defaultImageDir() string {
	return thawcache.Path("images", "current")
}

// defaultLibFile is name beside the thawd binary (make build puts it
// there), else in libDir (where the package installs it) if it is there,
// else beside the binary again, so that a start-up error names that place.
func defaultLibFile(name string) string {
	beside := ""
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(beside); err == nil {
			return beside
		}
	}
	if p := filepath.Join(libDir, name); fileExists(p) {
		return p
	}
	return beside
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// settings is thawd's configuration: every setting is a flag, an
// environment variable and a key of the config file, by one name.
type settings struct {
	serve     serveConfig
	verbose   bool
	logFormat string
	uidBase   uint
	uidCount  uint
	// shim is QEMU's interposer, one of the QEMU backend's settings
	// (daemon.Config.VMMSettings when --vmm is qemu).
	shim string
	// registryFile is the snapshot registry's config file; chunkCacheMiB
	// the chunk cache's budget.
	registryFile   string
	chunkCacheMiB  int64
	registryImport bool  // --registry-import
	depsCacheMiB   int64 // --deps-cache-budget

	fs     *pflag.FlagSet // the settings' flags, in definition order
	source map[string]string
	bad    []error // values that did not parse, wherever they came from
}

// newSettings defines every setting with its default.
func newSettings() *settings {
	s := &settings{fs: pflag.NewFlagSet("thawd", pflag.ContinueOnError), source: map[string]string{}}
	s.fs.SortFlags = false
	fs, cfg, d := s.fs, &s.serve, &s.serve.Daemon
	apiFlags(fs, cfg)
	vmFlags(s, d)
	capacityFlags(fs, d)
	registryFlags(s, d)
	depsFlags(s, d)
	retentionFlags(fs, d)
	defineTriggerFlags(fs, &cfg.Triggers)
	fs.BoolVarP(&s.verbose, "verbose", "v", false, "log every request")
	fs.StringVar(&s.logFormat, "log-format", "text", "log lines as text (key=value) or json (one object a line)")
	fs.VisitAll(func(f *pflag.Flag) {
		f.Value = &lenientValue{Value: f.Value, name: f.Name, s: s}
		// Behind the wrapper pflag no longer sees that an empty list is
		// the zero value, and the usage would say "(default [])".
		if isList(f) && f.DefValue == "[]" {
			f.DefValue = ""
		}
	})
	return s
}

// apiFlags defines the settings of the API's listeners, their access and the node's name.
func apiFlags(fs *pflag.FlagSet, cfg *serveConfig) {
	fs.StringArrayVar(&cfg.Listen, "listen", nil, "address to serve the API on, repeatable: a Unix socket (an absolute path or unix:PATH) or host:port for TCP, which needs the API token and, off loopback, TLS (default "+defaultSocket+")")
	fs.StringVar(&cfg.SocketGroup, "socket-group", "", "group that may use the Unix socket (mode 0660) and create functions from host directories (default: root's group)")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "API token for TCP clients, read from this file (0600, not a symlink; default: <data-dir>/"+api.TokenFileName+", generated at first start)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate (PEM) for the TCP listeners; required, with --tls-key, for an address that is not loopback")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "TLS private key (PEM) of --tls-cert")
	fs.StringArrayVar(&cfg.AllowedHosts, "allowed-host", nil, "Host header value accepted over TCP besides loopback names and addresses, repeatable (without a port: any port)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "loopback host:port serving GET /metrics alone, without the token, for a Prometheus on this host (metrics are also at /metrics on every --listen, with the token over TCP)")
	fs.StringArrayVar(&cfg.AllowedOrigins, "allowed-origin", nil, "web origin (scheme://host[:port]) whose browser requests are served, repeatable; requests from any other origin are refused")
	fs.StringVar(&cfg.NodeName, "node-name", "", "this daemon's name among a cluster's nodes, in every answer's Thaw-Node header and in GET /v1/health (default: the host name)")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", 0, "on SIGTERM, how long GET /v1/health answers 503 draining while requests are still served, before the listeners close (give a load balancer's health checks time to take the node out)")
}

// vmFlags defines the settings of where the daemon keeps its data and how it starts and confines VMs.
func vmFlags(s *settings, d *daemon.Config) {
	fs := s.fs
	fs.StringVar(&d.DataDir, "data-dir", "/var/lib/thaw", "catalog, functions, snapshots and VM run directories")
	fs.StringVar(&d.ImageDir, "image", defaultImageDir(), "guest image directory (built by 'make image'; default $THAW_CACHE/images/current)")
	fs.StringVar(&d.VMMName, "vmm", vmm.DefaultBackend, "virtual machine monitor VMs run in, by the name its backend registers: "+strings.Join(vmm.Backends(), ", "))
	fs.StringVar(&d.Accel, "accel", "auto", "accelerator: auto (probe KVM, else TCG), kvm or tcg")
	fs.IntVar(&d.DefaultMemoryMiB, "memory", 512, "default guest memory in MiB")
	fs.IntVar(&d.DefaultVCPUs, "vcpus", 1, "default number of vCPUs")
	fs.DurationVar(&d.BootTimeout, "boot-timeout", 90*time.Second, "how long a guest may take to boot or resume")
	fs.DurationVar(&d.InvokeTimeout, "invoke-timeout", 60*time.Second, "default invocation timeout")
	fs.StringVar(&s.shim, "shim", defaultLibFile("libthaw_shim.so"), "interposer preloaded into every QEMU: hands it its files as descriptors, lays out memory for the reap, faasnap and premap strategies (default: beside thawd, else "+libDir+")")
	fs.StringVar(&d.StoreDir, "store-dir", "", "snapshot memory store for premap: a directory on tmpfs, on hugetlbfs (with vm.nr_hugepages configured) or on a filesystem mounted with -o dax, or a device-DAX device /dev/daxX.Y (thaw manages it; default "+store.DefaultDir+"/<hash of the data dir>)")
	fs.StringVar(&d.StoreDeviceFile, "store-device-file", "", "instead of --store-dir: a fixed-size file on tmpfs used as a device-DAX device (the devdax tier on a host without persistent memory: tests and measurements); create it first, e.g. truncate -s 4G /dev/shm/thaw-region")
	fs.StringVar(&d.SnapBPFObject, "snapbpf-object", defaultLibFile(snapbpf.ObjectFile), "eBPF capture program for the snapbpf strategy (prepare; default: beside thawd, else "+libDir+")")
	fs.StringVar(&d.FaultTraceObject, "fault-trace-object", "", "eBPF tracepoint program (bin/"+faulttrace.ObjectFile+") counting each invocation's VMM page faults, read requests and time blocked, and the daemon's reads (the invocation's trace); empty: off")
	fs.UintVar(&s.uidBase, "vm-uid-base", daemon.DefaultVMUIDBase, "first of the user ids QEMU runs as, one per live VM (a range no other user or service uses)")
	fs.UintVar(&s.uidCount, "vm-uid-count", daemon.DefaultVMUIDCount, "how many user ids from --vm-uid-base")
	fs.IntVar(&d.VMMemoryOverheadMiB, "vm-memory-overhead", daemon.DefaultVMMemoryOverheadMiB, "memory in MiB a VM's cgroup may use beyond guest RAM (QEMU, TCG's code cache, page cache)")
	fs.IntVar(&d.VMCPUWeight, "vm-cpu-weight", 100, "CPU weight of each VM's cgroup, 1-10000 (100 is an ordinary process's share)")
	fs.Int64Var(&d.ConsoleLogLimit, "console-log-limit", 1<<20, "bytes of each guest's console kept in its console.log (then only the last 16 KiB)")
	fs.StringVar(&d.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup file system for per-VM cgroups (v1 or v2); none disables them")
	fs.BoolVar(&d.AllowFullEgress, "allow-full-egress", false, "let functions declare full egress: their guests reach beyond this host (never the host itself); turns on IP forwarding and installs the nftables table inet thaw")
	fs.StringArrayVar(&d.FunctionRoots, "function-roots", nil, "host directory functions may be created from (by root or --socket-group over the socket), repeatable; none: functions come only as uploaded archives")
}

// capacityFlags defines the settings of how many VMs run at once and which are kept ahead of requests: admission, keep-alive, the VMM pool, ready clones.
func capacityFlags(fs *pflag.FlagSet, d *daemon.Config) {
	fs.IntVar(&d.MaxVMs, "max-vms", 0, "live VMs at once; more wait in the admission queue (default: host memory over default guest memory plus --vm-memory-overhead)")
	fs.IntVar(&d.VMMemoryBudgetMiB, "vm-memory-budget", 0, "MiB live VMs may use together, guest memory plus --vm-memory-overhead each (default: nine tenths of host memory)")
	fs.IntVar(&d.AdmissionQueue, "admission-queue", 64, "VM starts that may wait for room (live VMs, memory budget, a function's max_concurrency); more get 429")
	fs.DurationVar(&d.KeepAlive, "keep-alive", 60*time.Second, "how long a VM is kept idle after a cold invocation, for its function's next invocations (that name no snapshot or strategy) to run on it warm; a function's keep_alive_s overrides it; negative: never")
	fs.IntVar(&d.KeepAliveMaxIdle, "keep-alive-max-idle", 2, "idle VMs kept per function")
	fs.IntVar(&d.KeepAliveMinAvailableMiB, "keep-alive-min-available", 0, "MiB of host memory (MemAvailable) below which idle VMs are stopped, the longest idle first (default: a twentieth of host memory, at least 512; negative: never)")
	fs.BoolVar(&d.HugePageHint, "hugepage-hint", false, "keep QEMU's MADV_HUGEPAGE hint on restored guests' snapshot memory, so each major fault reads about 4 MiB whatever the readahead; by default it is dropped, as Firecracker maps snapshots")
	fs.IntVar(&d.VMMPool, "vmm-pool", 1, "VMMs started ahead of restores per snapshot and strategy once that pair has been restored, so a restore skips the VMM's start; a function's vmm_pool overrides it; negative: no VMM pool")
	fs.DurationVar(&d.VMMPoolTTL, "vmm-pool-ttl", 5*time.Minute, "how long a VMM started ahead of a restore waits for one before it is stopped (a function's vmm_pool_ttl_s overrides it)")
	fs.IntVar(&d.VMMPoolMemoryMiB, "vmm-pool-memory", 0, "MiB the VMM pool's standby VMs may hold together, guest memory plus --vm-memory-overhead each (default: an eighth of host memory)")
	fs.IntVar(&d.Ready.MemoryMiB, "standby-memory", 0, "MiB ready clones may hold together, each counting its VMM's PSS measured once ready (guest memory plus --vm-memory-overhead until one of its version is measured): VMs restored, resumed and warmed ahead of requests, each serving one request that names no snapshot or strategy at near-warm latency, as many per function version as its recent arrivals and refill time need; 0: none")
	fs.IntVar(&d.Ready.MinReady, "min-ready", 0, "ready clones each function version with traffic keeps even when idle (needs --standby-memory)")
	fs.DurationVar(&d.Ready.MaxAge, "ready-max-age", 10*time.Minute, "a ready clone that has waited this long is replaced by a fresh one")
	fs.DurationVar(&d.Ready.Settle, "ready-settle", 100*time.Millisecond, "how long after a request a ready clone served no refill starts, so that its answer leaves first; negative: none")
	fs.DurationVar(&d.Ready.Window, "ready-window", time.Minute, "how far back a function version's arrivals are read to size its ready clones (enough for 92% of them within a refill time); none once it saw no request for this long")
}

// registryFlags defines the settings of the snapshot registry: its config, chunk cache, imports, remote strategies, collection and trust.
func registryFlags(s *settings, d *daemon.Config) {
	fs := s.fs
	fs.StringVar(&s.registryFile, "registry-config", "", "snapshot registry config file (YAML or JSON, mode 0600: endpoint, bucket, region, access_key, secret_key, secure, ca_file, chunk_size; or type: fs, path: a directory shared by the nodes, chunk_size); without it the "+registry.EnvEndpoint+" and "+registry.EnvBucket+" environment variables (with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) configure one; none: no push or pull")
	fs.Int64Var(&s.chunkCacheMiB, "chunk-cache-budget", daemon.DefaultChunkCacheBudget>>20, "MiB of disk the registry's chunk cache (<data-dir>/chunks) may use; chunks of snapshots in use are kept beyond it (negative: no bound)")
	fs.BoolVar(&s.registryImport, "registry-import", true, "an invocation of a function this node does not have, or has no snapshot of, imports it lazily from the registry (memory fetched on demand) and restores")
	fs.StringVar(&d.RemoteStrategy, "remote-strategy", string(restore.RemoteDefault()), "the strategy of a cold start that names none when the snapshot's memory is in the registry (an import, a lazy pull): "+restore.JoinKinds(restore.LazyKinds()))
	adaptiveFlags(fs, &d.Adaptive)
	fs.IntVar(&d.LazyReadahead, "lazy-readahead", 0, "chunks after a missed one that a lazy restore's memory fault also fetches in the background (sequential readahead; 0: none)")
	fs.BoolVar(&d.RegistryPushOnPrepare, "registry-push-on-prepare", false, "push every prepared warm snapshot to the registry (a failed push is logged; the snapshot stays local)")
	fs.DurationVar(&d.RegistryGCInterval, "registry-gc-every", 0, "run a registry collection this often (deletes chunks and code archives no snapshot or function names, older than --registry-gc-grace; several nodes may run it); 0: only when asked (thaw registry gc)")
	fs.DurationVar(&d.RegistryGCGrace, "registry-gc-grace", daemon.DefaultGCGrace, "how old an unreferenced registry object must be before a scheduled collection deletes it")
	fs.DurationVar(&d.RegistryRefresh, "registry-refresh", daemon.DefaultRegistryRefresh, "how often the functions here are compared with the registry's records: a function published again elsewhere (other code, a newer snapshot) is removed here once nothing uses it, and its next invocation imports the new version; 0: never (needs --registry-import)")
	fs.StringArrayVar(&d.RegistryTrustedKeys, "registry-trusted-keys", nil, "public keys whose signed registry records (snapshot manifests, function records) this node pulls and imports besides its own, repeatable: a key line 'thaw-ed25519 BASE64 [comment]' (what 'thawd registry key' and 'thaw info' print on each node) or a file of them, one a line, # for comments, writable only by its owner; anything else in the registry is refused")
}

// depsFlags defines the settings of how functions' Python requirements are resolved and cached.
func depsFlags(s *settings, d *daemon.Config) {
	fs := s.fs
	fs.StringVar(&d.Deps.IndexURL, "pip-index-url", deps.DefaultIndexURL, "Python package index (a PEP 503/691 simple index: PyPI or a mirror) that functions' requirements.txt are resolved against, with the host's pip, wheels only; "+deps.NoIndex+": only --pip-find-links (offline)")
	fs.StringArrayVar(&d.Deps.FindLinks, "pip-find-links", nil, "directory or URL of wheels pip also searches for functions' requirements.txt, repeatable")
	fs.StringVar(&d.Deps.Python, "pip-python", "python3", "the host's CPython "+deps.PythonVersion+" (the guest's version) that runs pip and precompiles dependency layers; no package's code runs on the host")
	fs.DurationVar(&d.Deps.Timeout, "pip-timeout", deps.DefaultTimeout, "how long pip (and thawd, when it reads the index to say why a requirement failed) waits for one connection or read of the package index")
	fs.StringVar(&d.Deps.Format, "deps-layer-format", string(deps.FormatErofs), "file system of new dependency layers: erofs (smaller, faster first imports) or ext4")
	fs.Int64Var(&s.depsCacheMiB, "deps-cache-budget", daemon.DefaultDepsBudget>>20, "MiB of disk cached wheels and dependency layers no function or snapshot uses may take (<data-dir>/deps), the least recently used removed first; layers in use are kept beyond it (negative: no bound)")
}

// retentionFlags defines the settings of how many snapshots, versions, invocation records and log bytes are kept.
func retentionFlags(fs *pflag.FlagSet, d *daemon.Config) {
	fs.IntVar(&d.SnapshotKeep, "snapshot-keep", 0, "keep each function's newest N snapshots and delete older ones that are not pinned or in use (0: delete only when asked)")
	fs.IntVar(&d.VersionKeep, "version-keep", daemon.DefaultVersionKeep, "keep the snapshots of each function's newest N versions and of every version an alias routes to; older versions' snapshots are collected, here and in the registry")
	fs.IntVar(&d.HistoryMax, "history-max", 100_000, "invocation records kept, the newest (negative: no bound)")
	fs.DurationVar(&d.HistoryMaxAge, "history-max-age", 30*24*time.Hour, "invocation records older than this are pruned (negative: no bound)")
	fs.DurationVar(&d.AdmissionTimeout, "admission-timeout", 30*time.Second, "how long a VM start waits for room before 429")
	fs.IntVar(&d.MaxStoredResultBytes, "max-stored-result", daemon.DefaultMaxStoredResult, "result bytes an invocation's history keeps (the caller always gets the whole result)")
	fs.IntVar(&d.MaxLogBytes, "max-logs", agent.DefaultMaxLogs, "bytes of each invocation's stdout and stderr its logs keep, 4096 to 1048576 (beyond it, the first and last parts)")
	fs.Int64Var(&d.HistoryMaxLogBytes, "history-max-log-bytes", daemon.DefaultHistoryMaxLogBytes, "bytes of logs the invocation history keeps in all, the oldest dropped first (logs also go with their invocation records: --history-max, --history-max-age; negative: no bound)")
}

// lenientValue records a command-line value that does not parse instead
// of stopping there, so that one run reports every bad value.
type lenientValue struct {
	pflag.Value
	name string
	s    *settings
}

func (v *lenientValue) Set(val string) error {
	if err := setValue(v.Value, val); err != nil {
		v.s.bad = append(v.s.bad, fmt.Errorf("--%s %q: %w", v.name, val, err))
	}
	return nil
}

// setValue sets v from text, leaving it as it was if the text does not
// parse (pflag's numbers would become 0 and cause a second complaint).
func setValue(v pflag.Value, text string) error {
	old := v.String()
	err := v.Set(text)
	if err == nil {
		return nil
	}
	if _, ok := v.(pflag.SliceValue); !ok {
		_ = v.Set(old)
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		if errors.Is(ne.Err, strconv.ErrRange) {
			return fmt.Errorf("out of range for a%s %s", article(v.Type()), v.Type())
		}
		return fmt.Errorf("not a%s %s", article(v.Type()), v.Type())
	}
	return err
}

func article(typ string) string {
	if strings.IndexByte("aeiou", typ[0]) >= 0 {
		return "n"
	}
	return ""
}

// inner is the flag's own value, behind the lenient wrapper.
func inner(f *pflag.Flag) pflag.Value {
	if l, ok := f.Value.(*lenientValue); ok {
		return l.Value
	}
	return f.Value
}

// isList says whether a setting takes several values.
func isList(f *pflag.Flag) bool { return f.Value.Type() == "stringArray" }

// envName is the environment variable of a setting.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// apply fills the settings the command line left alone: from the
// environment, else from the config file (file may be nil). Values that
// do not parse are recorded with where they came from.
func (s *settings) apply(env func(string) (string, bool), file *configFile) {
	s.fs.VisitAll(func(f *pflag.Flag) {
		switch {
		case f.Changed:
			s.source[f.Name] = "flag"
		case s.applyEnv(f, env):
		case file != nil && s.applyFile(f, file):
		default:
			s.source[f.Name] = "default"
		}
	})
	s.serve.Daemon.VMUIDBase, s.serve.Daemon.VMUIDCount = uint32(s.uidBase), uint32(s.uidCount)
	if s.serve.Daemon.VMMName == qemu.Name {
		s.serve.Daemon.VMMSettings = qemu.Settings{Shim: s.shim}.Values()
	}
	s.serve.Daemon.ChunkCacheBudget = s.chunkCacheMiB << 20
	s.serve.Daemon.NoRegistryImport = !s.registryImport
	if s.chunkCacheMiB < 0 {
		s.serve.Daemon.ChunkCacheBudget = -1
	}
	s.serve.Daemon.Deps.Budget = s.depsCacheMiB << 20
	if s.depsCacheMiB < 0 {
		s.serve.Daemon.Deps.Budget = -1
	}
	getenv := func(k string) string { v, _ := env(k); return v }
	switch {
	case s.registryFile != "":
		c, err := registry.LoadConfig(s.registryFile, getenv)
		if err != nil {
			s.bad = append(s.bad, fmt.Errorf("--registry-config: %w", err))
		} else {
			s.serve.Daemon.Registry = &c
		}
	case getenv(registry.EnvEndpoint) != "":
		c, err := registry.ConfigFromEnv(getenv)
		if err != nil {
			s.bad = append(s.bad, err)
		}
		s.serve.Daemon.Registry = &c
	}
}

func (s *settings) applyEnv(f *pflag.Flag, env func(string) (string, bool)) bool {
	name := envName(f.Name)
	val, ok := env(name)
	if !ok {
		return false
	}
	s.source[f.Name] = "env " + name
	vals := []string{val}
	if isList(f) {
		vals = splitList(val)
	}
	for _, v := range vals {
		if err := setValue(inner(f), v); err != nil {
			s.bad = append(s.bad, fmt.Errorf("%s=%q: %w", name, val, err))
		}
	}
	if isList(f) && len(vals) == 0 {
		_ = inner(f).(pflag.SliceValue).Replace(nil)
	}
	return true
}

// splitList splits a list setting from the environment at commas.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func (s *settings) applyFile(f *pflag.Flag, file *configFile) bool {
	e, ok := file.values[f.Name]
	if !ok {
		return false
	}
	s.source[f.Name] = fmt.Sprintf("%s:%d", file.path, e.line)
	if isList(f) {
		_ = inner(f).(pflag.SliceValue).Replace(nil)
	}
	for _, v := range e.vals {
		if err := setValue(inner(f), v); err != nil {
			s.bad = append(s.bad, fmt.Errorf("%s:%d: %s %q: %w", file.path, e.line, f.Name, v, err))
		}
	}
	return true
}

// validate reports every problem of the settings at once: values that did
// not parse, the listeners and their security (check), and the daemon's
// own bounds. Nothing is created.
func (s *settings) validate() error {
	errs := append([]error(nil), s.bad...)
	if _, err := newLogger(s.logFormat, 0); err != nil {
		errs = append(errs, err)
	}
	if s.uidBase > 1<<32-1 || s.uidCount > 1<<32-1 {
		errs = append(errs, fmt.Errorf("--vm-uid-base %d, --vm-uid-count %d: user ids are 32-bit", s.uidBase, s.uidCount))
	}
	d := s.serve.Daemon
	for _, c := range []struct {
		name string
		v    int
	}{{"keep-alive-max-idle", d.KeepAliveMaxIdle}, {"snapshot-keep", d.SnapshotKeep}, {"version-keep", d.VersionKeep}} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("--%s %d: must not be negative", c.name, c.v))
		}
	}
	if d.StoreDir != "" && d.StoreDeviceFile != "" {
		errs = append(errs, errors.New("--store-dir and --store-device-file: give one"))
	}
	if _, err := check(s.serve); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	if err := d.Check(); err != nil {
		errs = append(errs, unjoin(err)...)
	}
	return errors.Join(errs...)
}

// unjoin lists the errors errors.Join put together, however nested (or
// err alone).
func unjoin(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, unjoin(e)...)
	}
	return out
}

// configProblems formats a validation error as one problem a line.
func configProblems(err error) string {
	var b strings.Builder
	for _, e := range unjoin(err) {
		fmt.Fprintf(&b, "  - %s\n", strings.ReplaceAll(e.Error(), "\n", "\n    "))
	}
	return b.String()
}
