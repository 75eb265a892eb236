// Package wire is thaw's HTTP API contract in Go: every request and answer
// body, defined once. The daemon serves these types, the client decodes
// them, and internal/api/openapi.json documents the same shapes (its tests
// check them against these types and real answers against the document).
// The package imports nothing of thaw, so users of the client need nothing
// from thaw's internals.
package wire

import (
	"encoding/json"
	"time"
)

// List is every collection's body: a page of items and, if more follow,
// the cursor that asks for the next page (?after=NEXT).
type List[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

// Error is every error's body.
type Error struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is what went wrong: the error class and the message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID is the request's id (also its X-Request-Id header and
	// in the daemon's log lines about it).
	RequestID string `json:"request_id,omitempty"`
}

// Function is a deployable function.
type Function struct {
	Name      string  `json:"name"`
	Digest    string  `json:"digest"`     // SHA-256 of the code tree
	CodeDir   string  `json:"code_dir"`   // unpacked code, <dir>/<name>/handler.py
	Disk      string  `json:"disk"`       // ext4 image of CodeDir, attached read-only
	MemoryMiB int     `json:"memory_mib"` // guest memory
	VCPUs     int     `json:"vcpus"`
	Network   Network `json:"network"` // what its guests may reach
	// MaxConcurrency bounds the function's live VMs (0: only the host's
	// budget does); more starts wait for room, then get 429.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// KeepAliveS is how long its VMs are kept idle after a cold invocation
	// for its next ones, in seconds; absent: the daemon's default; -1:
	// never (every invocation starts from a fresh snapshot).
	KeepAliveS int `json:"keep_alive_s,omitempty"`
	// VMMPool is how many VMMs the VMM pool starts ahead of restores per
	// snapshot and strategy of the function; absent: the daemon's default;
	// -1: none. VMMPoolTTLS is how long one waits unused, in seconds;
	// absent: the daemon's default.
	VMMPool     int       `json:"vmm_pool,omitempty"`
	VMMPoolTTLS int       `json:"vmm_pool_ttl_s,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	// Env is the function's environment: set in its guests at boot, before
	// the handler is imported, so it is part of its snapshots.
	Env map[string]string `json:"env,omitempty"`
	// Secrets maps environment variable names to secrets: set in the
	// guests restored from a snapshot (never at boot, so never in a
	// snapshot), from the secret's value at the restore.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Warnings, in the answer to a create only: what the function's
	// module-level code does that its snapshots freeze (random numbers,
	// the clock, connections taken at import), each with its file and
	// line. Advice: the function is created.
	Warnings []string `json:"warnings,omitempty"`
	// Deps are the function's dependencies, from the requirements.txt in
	// its directory; absent: it has none.
	Deps *FunctionDeps `json:"deps,omitempty"`
	// Restore is how its cold starts restore (GET of one function only).
	Restore *FunctionRestore `json:"restore,omitempty"`
}

// FunctionDeps is what a function's requirements.txt asked for and the
// dependency layer it was resolved into (docs/functions.md).
type FunctionDeps struct {
	// Requested are requirements.txt's requirements, as given.
	Requested []string `json:"requested"`
	// Resolved is every wheel installed, "name==version
	// --hash=sha256:HEX", sorted by name: a requirements.txt that installs
	// exactly this set.
	Resolved []string `json:"resolved"`
	// Layer is the layer's digest (of Resolved and Format): functions with
	// the same set share one layer.
	Layer string `json:"layer"`
	// LayerSHA256 and LayerBytes describe the layer's image file.
	LayerSHA256 string `json:"layer_sha256"`
	LayerBytes  int64  `json:"layer_bytes"`
	// Format is the layer's file system: erofs or ext4.
	Format string `json:"format"`
}

// Secret is what the API shows of a secret: never its value.
type Secret struct {
	Name string `json:"name"`
	// Version counts the secret's sets: 1 at the first.
	Version int `json:"version"`
	// Digest is HMAC-SHA256 of the value under a key derived from the
	// daemon's secret key (hex): it changes with the value and says
	// nothing about it without the key.
	Digest    string    `json:"digest"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SetSecretRequest is the body of PUT /v1/secrets/{name}.
type SetSecretRequest struct {
	Value string `json:"value"`
}

// Network is what a function's guests may reach: egress "none" (the
// default), "services" (the host:port Services, each proxied by the
// daemon; a loopback service is at 10.0.2.2:port for the guest) or "full"
// (beyond the host, if the daemon allows it).
type Network struct {
	Egress   string   `json:"egress"`
	Services []string `json:"services,omitempty"`
}

// VM is a virtual machine thaw started. Restore is set on the answer to a
// restore (POST /v1/vms with a snapshot).
type VM struct {
	ID        string         `json:"id"`
	Function  string         `json:"function"`
	State     string         `json:"state"`
	Reason    string         `json:"reason,omitempty"`
	PID       int            `json:"pid,omitempty"`
	RunDir    string         `json:"run_dir"`
	Snapshot  string         `json:"snapshot,omitempty"` // restored from
	Strategy  string         `json:"strategy,omitempty"`
	Version   int            `json:"version,omitempty"` // the function version it runs
	Accel     string         `json:"accel"`
	MemoryMiB int            `json:"memory_mib"`
	BootMS    float64        `json:"boot_ms,omitempty"` // start to agent ready
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	Restore   *RestoreTiming `json:"restore,omitempty"`
	// Invocation is the invocation the VM is serving (GET /v1/vms/{id}).
	Invocation *RunningInvocation `json:"invocation,omitempty"`
	// Idle marks a VM kept after a cold invocation for its function's
	// next ones (the keep-alive pool; its state is running); IdleUntil is
	// when it is stopped unless an invocation takes it first.
	Idle      bool       `json:"idle,omitempty"`
	IdleUntil *time.Time `json:"idle_until,omitempty"`
	// ReadyMemoryMiB is what a ready clone waiting for a request counts
	// against the standby memory (thawd --standby-memory): its VMM's
	// proportional set size measured once it was ready, rounded up to
	// MiB, or its snapshot's estimate if it could not be measured.
	ReadyMemoryMiB int `json:"ready_memory_mib,omitempty"`
}

// Snapshot is a published snapshot.
type Snapshot struct {
	ID        string    `json:"id"`
	Function  string    `json:"function"`
	SourceVM  string    `json:"source_vm"`
	Dir       string    `json:"dir"`
	MemoryMiB int       `json:"memory_mib"`
	SizeBytes int64     `json:"size_bytes"` // apparent size of all files
	DiskBytes int64     `json:"disk_bytes"` // allocated (memory is sparse)
	CreateMS  float64   `json:"create_ms"`  // pause to published
	PauseMS   float64   `json:"pause_ms"`   // VM paused time during the snapshot
	CreatedAt time.Time `json:"created_at"`
	// Parent is the clean snapshot a warm snapshot was recorded from.
	Parent string `json:"parent,omitempty"`
	// Pinned snapshots are never garbage collected (thawd --snapshot-keep).
	Pinned bool `json:"pinned,omitempty"`
	// Version is the function version the snapshot belongs to (absent: made
	// by hand from an unversioned VM).
	Version int `json:"version,omitempty"`
	// Prepared is the prepare result when the snapshot carries strategy
	// artifacts.
	Prepared *PrepareResult `json:"prepared,omitempty"`
	// Memory says where the snapshot's memory is: MemoryLocal, or
	// MemoryRemote for a lazy snapshot whose pages come from the registry
	// on demand (a full pull completes it).
	Memory string `json:"memory"`
}

// Where a snapshot's memory is (Snapshot.Memory).
const (
	MemoryLocal  = "local"
	MemoryRemote = "remote"
)

// RestoreTiming breaks a restore down, in milliseconds.
type RestoreTiming struct {
	VerifyMS    float64 `json:"verify_ms"`     // snapshot checks
	VMMStartMS  float64 `json:"vmm_start_ms"`  // process start to control channel ready
	LoadStateMS float64 `json:"load_state_ms"` // device state loaded
	SetupMS     float64 `json:"setup_ms"`      // request to vCPUs resumed (all of the above)
	// Source is where the snapshot's memory came from: "local", or
	// "registry" for a lazy snapshot (pages fetched on demand, or pulled
	// first: PullMS).
	Source string `json:"source,omitempty"`
	// PullMS: a strategy that needs the memory file (cached, premap,
	// snapbpf) restored a lazy snapshot; its memory was pulled first, in
	// this time (part of SetupMS).
	PullMS   float64 `json:"pull_ms,omitempty"`
	ResumeMS float64 `json:"resume_ms"` // vCPUs resumed to the guest ready (agent answering, restore done)
	// AgentRestoreMS is the part of ResumeMS the guest spent becoming a
	// clone of its own: clock set, RNGs reseeded, on_restore run.
	AgentRestoreMS float64 `json:"agent_restore_ms"`
	// AdmissionWaitMS is how long the restore waited for room (the host
	// budget or the function's limit) before it began; not part of set-up.
	AdmissionWaitMS float64 `json:"admission_wait_ms,omitempty"`
	// VMM says where the VMM process came from: "pooled", started ahead
	// of the request by the VMM pool (its start is not part of set-up), or
	// "started" for this restore.
	VMM string `json:"vmm"`
	// StandbyCPUMS: for a pooled VMM, the CPU time (user+system) its
	// process had used when the restore took it from the pool (its start
	// and the strategy's part, done ahead of the request).
	StandbyCPUMS float64 `json:"standby_cpu_ms,omitempty"`
	// ContMS is how long the VMM took to acknowledge the resume of
	// the vCPUs (part of SetupMS).
	ContMS float64 `json:"cont_ms,omitempty"`
	// AgentWaitMS is the part of ResumeMS from the restore request written
	// to the channel to the agent's answer read: ResumeMS minus it is the
	// host's own share (writing the request, goroutines).
	AgentWaitMS float64 `json:"agent_wait_ms,omitempty"`
	// AgentSteps is the guest's own account of the restore request, in ms
	// of its CLOCK_MONOTONIC: the steps it reports (decode, clock,
	// kernel_rng, random, numpy, openssl, hook, total) and read, from the request's
	// bytes being read to the restore handler starting (decode: parsing the
	// request). Absent from an agent
	// that does not report them.
	AgentSteps map[string]float64 `json:"agent_steps,omitempty"`
}

// Timing breaks an invocation down, in milliseconds. For a cold invocation
// Restore says where the restore's time went; Total is request to answer
// (teardown of a cold VM happens after the answer is ready and is reported
// apart).
type Timing struct {
	Restore    *RestoreTiming `json:"restore,omitempty"`
	InvokeMS   float64        `json:"invoke_ms"` // request sent to reply received
	GuestMS    float64        `json:"guest_ms"`  // inside handle(), measured by the guest
	TotalMS    float64        `json:"total_ms"`
	TeardownMS float64        `json:"teardown_ms,omitempty"`
	// ImportMS: the function (or its snapshot) was not on this node and
	// was imported lazily from the registry first, in this time (part of
	// TotalMS, not of the restore's set-up).
	ImportMS float64 `json:"import_ms,omitempty"`
	// Build is set when the version that ran is stale: its snapshot was
	// made from a guest image, kernel or machine that has changed since.
	// Until its snapshot is made again (an operation of kind rebuild),
	// each cold start says so here.
	Build *BuildNote `json:"build,omitempty"`
	// Ready is set when the daemon keeps ready clones: whether one served
	// the invocation, and how long it waited (ready.go).
	Ready *ReadyNote `json:"ready,omitempty"`
}

// BuildNote says that an invocation ran an older build of its version,
// why, and how it was served.
type BuildNote struct {
	// Stale says what changed since the version's snapshot was made.
	Stale string `json:"stale"`
	// Served is "snapshot" (the older snapshot could still be restored) or
	// "boot" (it could not: the version booted for this request).
	Served string `json:"served"`
	// BootMS is the boot's time when Served is "boot" (part of TotalMS).
	BootMS float64 `json:"boot_ms,omitempty"`
}

// FunctionError is an exception raised by a handler in the guest.
type FunctionError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// Invocation is the outcome of one invocation.
type Invocation struct {
	ID       string `json:"id"`
	Function string `json:"function"`
	VM       string `json:"vm"`
	Mode     string `json:"mode"` // "warm" (a running VM), "cold" (restored for it), "pooled" (a VM kept from an earlier cold invocation), "ready" (a ready clone, restored ahead and never used) or "record" (prepare)
	Snapshot string `json:"snapshot,omitempty"`
	Strategy string `json:"strategy,omitempty"`
	// Version is the function version that ran (absent: a snapshot made
	// by hand, or a VM booted without one); Alias the alias the request
	// followed to it, if any.
	Version int             `json:"version,omitempty"`
	Alias   string          `json:"alias,omitempty"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *FunctionError  `json:"error,omitempty"`
	// In the invocation history only: a result over the stored limit is
	// kept as its first bytes; the caller got all of it.
	ResultTruncated bool   `json:"result_truncated,omitempty"`
	ResultBytes     int    `json:"result_bytes,omitempty"`
	ResultPrefix    string `json:"result_prefix,omitempty"`
	ErrorTruncated  bool   `json:"error_truncated,omitempty"` // message or traceback cut
	Timing          Timing `json:"timing"`
	// EvictedCache: the snapshot's files were evicted from the host page
	// cache before the restore (a "cold" measurement).
	EvictedCache bool `json:"evicted_cache,omitempty"`
	// StrategyStats is what the restore strategy did (cold invocations).
	StrategyStats *StrategyStats `json:"strategy_stats,omitempty"`
	// StrategyChoice says how the strategy was chosen (cold invocations).
	StrategyChoice *StrategyChoice `json:"strategy_choice,omitempty"`
	// Process is the VMM process's page faults and storage reads from the
	// vCPUs resuming (cold) or the request (warm) to the answer; RSS at the
	// answer.
	Process *ProcessCounters `json:"process,omitempty"`
	// Trace is what tracepoints counted (thawd --trace-faults); absent
	// when tracing is off.
	Trace *FaultTrace `json:"trace,omitempty"`
	// Logs is what the invocation wrote, when the request asked (logs).
	Logs *InvocationLogs `json:"logs,omitempty"`
}

// InvocationRecord is a stored invocation.
type InvocationRecord struct {
	ID        string     `json:"id"`
	Function  string     `json:"function"`
	VM        string     `json:"vm"`
	Snapshot  string     `json:"snapshot,omitempty"`
	Strategy  string     `json:"strategy,omitempty"`
	OK        bool       `json:"ok"`
	Detail    Invocation `json:"detail"`
	CreatedAt time.Time  `json:"created_at"`
}

// FaultTrace is what eBPF tracepoints counted during an invocation (thawd
// --trace-faults): the VMM process from the vCPUs resuming (cold) or the
// request (warm) to the answer, the daemon from the restore (or request)
// to the answer.
type FaultTrace struct {
	// VMMFaults are the VMM's user page faults (exceptions:page_fault_user).
	VMMFaults uint64 `json:"vmm_faults"`
	// VMMReadRequests are the read bios the VMM submitted
	// (block:block_bio_queue): the reads its page faults caused.
	VMMReadRequests uint64 `json:"vmm_read_requests"`
	VMMReadBytes    uint64 `json:"vmm_read_bytes"`
	// VMMBlockedMS is the time the VMM's threads were blocked in
	// uninterruptible sleep (sched_switch to sched_wakeup): page faults
	// waiting for I/O. VMMBlockedWaits counts those waits.
	VMMBlockedMS    float64 `json:"vmm_blocked_ms"`
	VMMBlockedWaits uint64  `json:"vmm_blocked_waits"`
	// DaemonReadRequests are the read bios the daemon submitted (the
	// strategy's loader or prefetch).
	DaemonReadRequests uint64 `json:"daemon_read_requests"`
	DaemonReadBytes    uint64 `json:"daemon_read_bytes"`
}

// ProcessCounters are a process's page faults, storage reads and memory.
type ProcessCounters struct {
	MinorFaults uint64 `json:"minor_faults"`
	MajorFaults uint64 `json:"major_faults"`
	// ReadBytes is what the process caused to be read from storage
	// (/proc/PID/io read_bytes: page-cache misses, including mmap faults).
	ReadBytes uint64 `json:"read_bytes"`
	// RSS breakdown from /proc/PID/status, in KiB.
	RssAnonKiB  uint64 `json:"rss_anon_kib"`
	RssFileKiB  uint64 `json:"rss_file_kib"`
	RssShmemKiB uint64 `json:"rss_shmem_kib"`
	// HugetlbKiB: hugetlbfs pages mapped (premap from a hugetlbfs store);
	// not part of the RSS fields.
	HugetlbKiB uint64 `json:"hugetlb_kib,omitempty"`
	// CPUTotalMS is the CPU time (user+system, every thread) the process
	// has used since it started, at the end of the interval, like RSS:
	// /proc/PID/stat utime+stime, in clock ticks of 10 ms.
	CPUTotalMS float64 `json:"cpu_total_ms"`
}

// AccelInfo says which accelerator the daemon uses and why.
type AccelInfo struct {
	Accel  string `json:"accel"`  // "kvm" or "tcg"
	Source string `json:"source"` // "config", "probe" or "cached-probe"
	Detail string `json:"detail"`
}

// GuestImage describes the guest image (guest/build-image.sh).
type GuestImage struct {
	Dir           string                    `json:"dir"`
	Format        int                       `json:"format"`
	Hash          string                    `json:"hash"`
	KernelVersion string                    `json:"kernel_version"`
	Cmdline       string                    `json:"cmdline"`
	Files         map[string]GuestImageFile `json:"files"`
	BuiltAt       string                    `json:"built_at"`
}

// GuestImageFile is one file of the guest image.
type GuestImageFile struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// VMMInfo is the virtual machine monitor VMs run in (snapshots are bound
// to its name and version).
type VMMInfo struct {
	Name    string `json:"name"`    // the backend's registered name (thawd --vmm)
	Version string `json:"version"` // the monitor's version
	// Machine names the guest hardware it builds (device state loads only
	// into the same hardware).
	Machine string `json:"machine"`
}

// Info describes the daemon.
type Info struct {
	Version    string     `json:"version"`     // the daemon's build
	APIVersion string     `json:"api_version"` // openapi.json's info.version
	Accel      AccelInfo  `json:"accel"`
	VMM        VMMInfo    `json:"vmm"`
	Image      GuestImage `json:"image"`
	DataDir    string     `json:"data_dir"`
	Strategies []string   `json:"strategies"`
	// StrategyDetails: each strategy as it describes itself (its
	// artifacts, its stats and its build), in Strategies' order.
	StrategyDetails []StrategyDescription `json:"strategy_details"`
	// Node is the daemon's node name (thawd --node-name), "" if none.
	Node string `json:"node,omitempty"`
	// HugePageHint: restores keep QEMU's MADV_HUGEPAGE on the snapshot's
	// memory mapping (thawd --hugepage-hint); false, the default, drops it.
	HugePageHint bool `json:"hugepage_hint"`
	// TSCKHz is the host's TSC frequency that every boot's kernel takes
	// (tsc_early_khz=) instead of calibrating its own; 0: not measured
	// (no invariant TSC), guests calibrate.
	TSCKHz int `json:"tsc_khz"`
	// Registry is the snapshot registry the daemon uses; absent without
	// one. Credentials are never shown.
	Registry *RegistryInfo `json:"registry,omitempty"`
	// RegistryKey is the node's public signing key: what it pushes to a
	// registry is signed with it.
	RegistryKey *RegistryKey `json:"registry_key,omitempty"`
	// Limits are the defaults and bounds in force.
	Limits Limits `json:"limits"`
}

// RegistryInfo is the snapshot registry as GET /v1/info shows it.
type RegistryInfo struct {
	Endpoint      string `json:"endpoint"`       // empty for a directory registry
	Bucket        string `json:"bucket"`         // empty for a directory registry
	Path          string `json:"path,omitempty"` // the directory of a directory registry (type fs)
	Secure        bool   `json:"secure"`
	ChunkSize     int64  `json:"chunk_size"`      // of pushes from this node
	PushOnPrepare bool   `json:"push_on_prepare"` // thawd --registry-push-on-prepare
	Import        bool   `json:"import"`          // thawd --registry-import
	// The node's chunk cache: its directory, bytes held and budget
	// (0: unbounded).
	CacheDir         string `json:"cache_dir"`
	CacheUsedBytes   int64  `json:"cache_used_bytes"`
	CacheBudgetBytes int64  `json:"cache_budget_bytes"`
	// TrustedKeys are the ids of the keys whose records the node imports
	// (its own and thawd --registry-trusted-keys).
	TrustedKeys []string `json:"trusted_keys"`
}

// Health is GET /v1/health's body: whether the daemon serves.
type Health struct {
	Status string `json:"status"`         // HealthOK, HealthStarting or HealthDraining
	Node   string `json:"node,omitempty"` // thawd --node-name
}

// Health statuses: only HealthOK answers 200; the others 503.
const (
	HealthOK       = "ok"
	HealthStarting = "starting"
	HealthDraining = "draining"
)

// StoreEntry is a snapshot's copy in the memory store (premap).
type StoreEntry struct {
	Snapshot string `json:"snapshot"`
	Path     string `json:"path"`
	Size     int64  `json:"size"`   // bytes of guest memory
	SHA256   string `json:"sha256"` // of every byte, holes as zeros
	Bytes    int64  `json:"bytes"`  // store memory it takes (allocated)
	Regions  int    `json:"regions"`
	// PageSize is the tier's page (bytes): the unit the copy is allocated
	// and mapped in. 4096 except on hugetlbfs.
	PageSize int64 `json:"page_size,omitempty"`
	// Extents are the copy's data regions where the tier cannot report
	// them itself (hugetlbfs has no SEEK_DATA; a device has no files).
	Extents []StoreExtent `json:"extents,omitempty"`
	// DeviceOffset (devdax) is where the copy's units start on the
	// device, packed in the order of Extents.
	DeviceOffset int64     `json:"device_offset,omitempty"`
	StoredMS     float64   `json:"stored_ms"`
	StoredAt     time.Time `json:"stored_at"`
}

// StoreExtent is a data region of a stored copy, in 4 KiB pages.
type StoreExtent struct {
	Start uint64 `json:"start_page"`
	Pages uint64 `json:"pages"`
}

// StoreInfo is the snapshot memory store's state.
type StoreInfo struct {
	Available     bool   `json:"available"`
	Error         string `json:"error,omitempty"` // why it is not available
	Dir           string `json:"dir,omitempty"`
	Kind          string `json:"kind,omitempty"` // tmpfs, hugetlbfs, fsdax or devdax
	PageSize      int64  `json:"page_size,omitempty"`
	CapacityBytes int64  `json:"capacity_bytes"`
	FreeBytes     int64  `json:"free_bytes"`
	UsedBytes     int64  `json:"used_bytes"`
	// ReservedBytes is memory held for live premap clones beyond the
	// copies (hugetlbfs reservations for copy-on-write, devdax ranges).
	ReservedBytes int64        `json:"reserved_bytes,omitempty"`
	Clones        int          `json:"clones,omitempty"` // devdax: live clone ranges
	Entries       []StoreEntry `json:"entries"`
}

// SnapshotMemory is the host memory a snapshot's files hold (shared by
// every VM restored from it).
type SnapshotMemory struct {
	Snapshot       string           `json:"snapshot"`
	PageCacheBytes int64            `json:"page_cache_bytes"`
	Files          map[string]int64 `json:"files"` // path relative to the snapshot -> resident bytes
	StoreBytes     int64            `json:"store_bytes"`
}

// ProcessMemory is a process's memory (smaps_rollup and numa_maps).
type ProcessMemory struct {
	RSSBytes     uint64 `json:"rss_bytes"`
	PSSBytes     uint64 `json:"pss_bytes"`   // shared pages divided among the processes mapping them
	AnonBytes    uint64 `json:"anon_bytes"`  // private anonymous (written guest pages, QEMU's heap)
	FileBytes    uint64 `json:"file_bytes"`  // mapped page-cache pages (shared)
	ShmemBytes   uint64 `json:"shmem_bytes"` // mapped tmpfs pages (the premap store; shared)
	SwapBytes    uint64 `json:"swap_bytes"`  // swapped out
	PrivateDirty uint64 `json:"private_dirty_bytes"`
	// Huge pages (hugetlbfs mappings, not part of RSS): all the process
	// maps, and the anonymous ones among them (those a clone copied on
	// write, which it holds alone).
	HugetlbBytes     uint64 `json:"hugetlb_bytes"`
	HugetlbAnonBytes uint64 `json:"hugetlb_anon_bytes"`
}

// VMMemory is a running VM's VMM process memory.
type VMMemory struct {
	VM string `json:"vm"`
	ProcessMemory
}

// Requests.

// CreateFunctionRequest is the JSON form of POST /v1/functions (a host
// directory; archives are uploaded as the body instead).
type CreateFunctionRequest struct {
	Name      string   `json:"name"`
	Directory string   `json:"directory"`
	MemoryMiB int      `json:"memory_mib,omitempty"`
	VCPUs     int      `json:"vcpus,omitempty"`
	Network   *Network `json:"network,omitempty"` // absent: egress none
	// MaxConcurrency bounds the function's live VMs (0 or absent: no
	// limit of its own).
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// KeepAliveS: seconds its VMs are kept idle after a cold invocation (0
	// or absent: the daemon's default; -1: never).
	KeepAliveS int `json:"keep_alive_s,omitempty"`
	// VMMPool: VMMs started ahead of restores per snapshot and strategy
	// (0 or absent: the daemon's default; -1: none); VMMPoolTTLS: seconds
	// one waits unused (0 or absent: the daemon's default).
	VMMPool     int `json:"vmm_pool,omitempty"`
	VMMPoolTTLS int `json:"vmm_pool_ttl_s,omitempty"`
	// Env is the function's environment; Secrets its secret references
	// (environment variable name -> secret name), each secret set first.
	Env     map[string]string `json:"env,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// Strategy is how its cold starts restore: "auto" or a strategy
	// (absent: the daemon's default); Refresh whether its working sets
	// are recorded again when they drift: "prepare", "traffic" or "off"
	// (absent: the daemon's default).
	Strategy string `json:"strategy,omitempty"`
	Refresh  string `json:"refresh,omitempty"`
}

// InvokeRequest is the body of the invoke operations.
type InvokeRequest struct {
	Event     json.RawMessage `json:"event,omitempty"` // absent: handle() gets None
	TimeoutMS int64           `json:"timeout_ms,omitempty"`
	Strategy  string          `json:"strategy,omitempty"` // cold invocations only
	// Variant is a variant of the strategy (faasnap: concurrent,
	// no-loadingset, no-hostrec, no-freed, no-merge); cold invocations only.
	Variant  string `json:"variant,omitempty"`
	Snapshot string `json:"snapshot,omitempty"` // POST /v1/functions/{name}/invoke only
	// EvictCache evicts the snapshot's files from the page cache before a
	// cold invocation (honest cold measurements).
	EvictCache bool `json:"evict_cache,omitempty"`
	// Strict refuses a fallback: a cold invocation whose strategy cannot
	// restore the snapshot (artifacts missing or unusable, not in the
	// memory store) fails with 409 instead of running as vanilla.
	Strict bool `json:"strict,omitempty"`
	// Logs asks for what the invocation wrote in the answer (logs); the
	// history keeps it either way.
	Logs bool `json:"logs,omitempty"`
}

// PrepareRequest is the body of POST /v1/functions/{name}/prepare.
type PrepareRequest struct {
	RecordEvent json.RawMessage `json:"record_event,omitempty"` // the record input (absent: handle() gets None)
	GroupSize   int             `json:"group_size,omitempty"`   // FaaSnap working-set group, pages (default 1024)
	MergeGap    int             `json:"merge_gap,omitempty"`    // FaaSnap merge threshold, pages (default 32)
	TimeoutMS   int64           `json:"timeout_ms,omitempty"`   // per record invocation
	// FaaSnapVariants also builds FaaSnap's technique-off artifacts
	// (no-hostrec, no-freed, no-merge) for the ablation.
	FaaSnapVariants bool `json:"faasnap_variants,omitempty"`
}

// CreateVMRequest boots a function's VM, or restores one from a snapshot.
type CreateVMRequest struct {
	Function string `json:"function,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	Strategy string `json:"strategy,omitempty"`
}

// CreateSnapshotRequest snapshots a booted VM.
type CreateSnapshotRequest struct {
	VM string `json:"vm"`
}

// Limits are the daemon's defaults and bounds in force, as its settings
// and host made them (GET /v1/info). Durations are in milliseconds (_ms)
// or seconds (_s); a 0 where a bound can be off means no bound.
type Limits struct {
	// InvokeTimeoutMS is an invocation's timeout when the request names
	// none (thawd --invoke-timeout); MaxInvokeTimeoutMS the most a request
	// may name (timeout_ms).
	InvokeTimeoutMS    int64 `json:"invoke_timeout_ms"`
	MaxInvokeTimeoutMS int64 `json:"max_invoke_timeout_ms"`
	// BootTimeoutMS is how long a guest may take to boot or resume
	// (thawd --boot-timeout).
	BootTimeoutMS int64 `json:"boot_timeout_ms"`
	// MaxEventBytes bounds an invocation's event; MaxResultBytes a
	// handler's result as JSON text; MaxStoredResultBytes what the
	// history keeps of a result (thawd --max-stored-result); MaxCodeBytes
	// a function's uploaded code.
	MaxEventBytes        int64 `json:"max_event_bytes"`
	MaxResultBytes       int64 `json:"max_result_bytes"`
	MaxStoredResultBytes int64 `json:"max_stored_result_bytes"`
	MaxCodeBytes         int64 `json:"max_code_bytes"`
	// DefaultMemoryMiB and DefaultVCPUs are a function's VM when it names
	// none (thawd --memory, --vcpus).
	DefaultMemoryMiB int `json:"default_memory_mib"`
	DefaultVCPUs     int `json:"default_vcpus"`
	// MaxVMs, VMMemoryBudgetMiB and VMMemoryOverheadMiB bound the live
	// VMs (thawd --max-vms, --vm-memory-budget, --vm-memory-overhead: the
	// computed values when not set).
	MaxVMs              int `json:"max_vms"`
	VMMemoryBudgetMiB   int `json:"vm_memory_budget_mib"`
	VMMemoryOverheadMiB int `json:"vm_memory_overhead_mib"`
	// AdmissionQueue is how many VM starts may wait for room,
	// AdmissionTimeoutMS how long one waits before 429.
	AdmissionQueue     int   `json:"admission_queue"`
	AdmissionTimeoutMS int64 `json:"admission_timeout_ms"`
	// KeepAliveS is how long a VM is kept idle after a cold invocation (0:
	// not kept), KeepAliveMaxIdle how many per function,
	// KeepAliveMinAvailableMiB the host memory below which idle VMs are
	// stopped (0: never).
	KeepAliveS               float64 `json:"keep_alive_s"`
	KeepAliveMaxIdle         int     `json:"keep_alive_max_idle"`
	KeepAliveMinAvailableMiB int     `json:"keep_alive_min_available_mib"`
	// VMMPool is how many VMMs start ahead per snapshot and strategy (0:
	// no VMM pool), VMMPoolTTLS how long one waits, VMMPoolMemoryMiB the
	// memory they may hold together.
	VMMPool          int     `json:"vmm_pool"`
	VMMPoolTTLS      float64 `json:"vmm_pool_ttl_s"`
	VMMPoolMemoryMiB int     `json:"vmm_pool_memory_mib"`
	// HistoryMax and HistoryMaxAgeS bound the invocation history (0: no
	// bound of that kind).
	HistoryMax     int     `json:"history_max"`
	HistoryMaxAgeS float64 `json:"history_max_age_s"`
	// VersionKeep is how many of a function's newest versions keep their
	// snapshots; SnapshotKeep how many of its newest snapshots garbage
	// collection keeps (0: snapshots are deleted only when asked).
	VersionKeep  int `json:"version_keep"`
	SnapshotKeep int `json:"snapshot_keep"`
	// ConsoleLogBytes is how much of a guest's console its console.log
	// keeps.
	ConsoleLogBytes int64 `json:"console_log_bytes"`
	// MaxLogBytes is how much of an invocation's output its logs keep
	// (thawd --max-logs); HistoryMaxLogBytes how much the history keeps
	// of all invocations' logs, the oldest dropped first (thawd
	// --history-max-log-bytes; 0: no bound).
	MaxLogBytes        int64 `json:"max_log_bytes"`
	HistoryMaxLogBytes int64 `json:"history_max_log_bytes"`
}
