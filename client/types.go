package client

import (
	"encoding/json"
	"time"
)

// The API's documents. They mirror the daemon's JSON (openapi.json) and
// are declared here so users of the client need nothing from thaw's
// internal packages.

// Function is a deployable function.
type Function struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	CodeDir   string    `json:"code_dir"`
	Disk      string    `json:"disk"`
	MemoryMiB int       `json:"memory_mib"`
	VCPUs     int       `json:"vcpus"`
	Network   Network   `json:"network"`
	CreatedAt time.Time `json:"created_at"`
}

// Network is what a function's guests may reach: egress "none" (the
// default), "services" (the host:port Services, each proxied by the
// daemon; a loopback service is at 10.0.2.2:port for the guest) or "full"
// (beyond the host, if the daemon allows it).
type Network struct {
	Egress   string   `json:"egress"`
	Services []string `json:"services,omitempty"`
}

// VM is a virtual machine.
type VM struct {
	ID        string         `json:"id"`
	Function  string         `json:"function"`
	State     string         `json:"state"`
	Reason    string         `json:"reason,omitempty"`
	PID       int            `json:"pid,omitempty"`
	RunDir    string         `json:"run_dir"`
	Snapshot  string         `json:"snapshot,omitempty"`
	Strategy  string         `json:"strategy,omitempty"`
	Accel     string         `json:"accel"`
	MemoryMiB int            `json:"memory_mib"`
	BootMS    float64        `json:"boot_ms,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	Restore   *RestoreTiming `json:"restore,omitempty"`
}

// Snapshot is a published snapshot.
type Snapshot struct {
	ID        string          `json:"id"`
	Function  string          `json:"function"`
	SourceVM  string          `json:"source_vm"`
	Dir       string          `json:"dir"`
	MemoryMiB int             `json:"memory_mib"`
	SizeBytes int64           `json:"size_bytes"`
	DiskBytes int64           `json:"disk_bytes"`
	CreateMS  float64         `json:"create_ms"`
	PauseMS   float64         `json:"pause_ms"`
	CreatedAt time.Time       `json:"created_at"`
	Parent    string          `json:"parent,omitempty"`
	Prepared  json.RawMessage `json:"prepared,omitempty"`
}

// RestoreTiming breaks a restore down, in milliseconds.
type RestoreTiming struct {
	VerifyMS    float64 `json:"verify_ms"`
	VMMStartMS  float64 `json:"vmm_start_ms"`
	LoadStateMS float64 `json:"load_state_ms"`
	SetupMS     float64 `json:"setup_ms"`
	ResumeMS    float64 `json:"resume_ms"`
	// AgentRestoreMS is the part of ResumeMS the guest spent becoming a clone
	// of its own (clock, RNG reseeds, on_restore).
	AgentRestoreMS float64 `json:"agent_restore_ms"`
}

// Timing breaks an invocation down, in milliseconds.
type Timing struct {
	Restore    *RestoreTiming `json:"restore,omitempty"`
	InvokeMS   float64        `json:"invoke_ms"`
	GuestMS    float64        `json:"guest_ms"`
	TotalMS    float64        `json:"total_ms"`
	TeardownMS float64        `json:"teardown_ms,omitempty"`
}

// FunctionError is an exception raised by a handler in the guest.
type FunctionError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// Invocation is one invocation's outcome.
type Invocation struct {
	ID       string          `json:"id"`
	Function string          `json:"function"`
	VM       string          `json:"vm"`
	Mode     string          `json:"mode"`
	Snapshot string          `json:"snapshot,omitempty"`
	Strategy string          `json:"strategy,omitempty"`
	OK       bool            `json:"ok"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    *FunctionError  `json:"error,omitempty"`
	Timing   Timing          `json:"timing"`
	// Invocation history only: a result over the daemon's stored limit is
	// kept as its first bytes (the caller got all of it).
	ResultTruncated bool   `json:"result_truncated,omitempty"`
	ResultBytes     int    `json:"result_bytes,omitempty"`
	ResultPrefix    string `json:"result_prefix,omitempty"`
	ErrorTruncated  bool   `json:"error_truncated,omitempty"`

	EvictedCache  bool           `json:"evicted_cache,omitempty"`
	StrategyStats *StrategyStats `json:"strategy_stats,omitempty"`
	Process       *Process       `json:"process,omitempty"`
}

// StrategyStats is what the restore strategy did (cold invocations).
type StrategyStats struct {
	Fallback           string  `json:"fallback,omitempty"`
	CacheFillMS        float64 `json:"cache_fill_ms,omitempty"`
	PrefetchPages      uint64  `json:"prefetch_pages,omitempty"`
	PrefetchBytes      uint64  `json:"prefetch_bytes,omitempty"`
	PrefetchMS         float64 `json:"prefetch_ms,omitempty"`
	FaultsServed       uint64  `json:"faults_served,omitempty"`
	FaultBytesRead     uint64  `json:"fault_bytes_read,omitempty"`
	PrefetchDirectIO   bool    `json:"prefetch_direct_io,omitempty"`
	RecordedPageCount  uint64  `json:"recorded_pages,omitempty"`
	LayoutEntries      int     `json:"layout_entries,omitempty"`
	LoaderBytes        uint64  `json:"loader_bytes,omitempty"`
	LoaderMS           float64 `json:"loader_ms,omitempty"`
	LoaderShared       bool    `json:"loader_shared,omitempty"`
	LoaderBeforeInvoke *bool   `json:"loader_finished_first,omitempty"`
	StoreBytes         uint64  `json:"store_bytes,omitempty"`
	PopulatedBytes     uint64  `json:"populated_bytes,omitempty"`
	PopulateMS         float64 `json:"populate_ms,omitempty"`
	DeviceBytes        uint64  `json:"device_bytes,omitempty"`  // premap on device-DAX: the VM's range
	CloneCopyMS        float64 `json:"clone_copy_ms,omitempty"` // filling it from the stored copy

	SnapBPFRanges         int     `json:"snapbpf_ranges,omitempty"`
	SnapBPFPages          uint64  `json:"snapbpf_pages,omitempty"`
	SnapBPFReadaheadCalls int     `json:"snapbpf_readahead_calls,omitempty"`
	SnapBPFIssueMS        float64 `json:"snapbpf_issue_ms,omitempty"`
	SnapBPFResidentPages  uint64  `json:"snapbpf_resident_pages,omitempty"`
	SnapBPFResidentMS     float64 `json:"snapbpf_resident_ms,omitempty"`
	SnapBPFFinishedFirst  *bool   `json:"snapbpf_finished_first,omitempty"`
	SnapBPFError          string  `json:"snapbpf_error,omitempty"`
}

// Process is the VMM process's counters during an invocation.
type Process struct {
	MinorFaults uint64 `json:"minor_faults"`
	MajorFaults uint64 `json:"major_faults"`
	ReadBytes   uint64 `json:"read_bytes"`
	RssAnonKiB  uint64 `json:"rss_anon_kib"`
	RssFileKiB  uint64 `json:"rss_file_kib"`
	RssShmemKiB uint64 `json:"rss_shmem_kib"`
	HugetlbKiB  uint64 `json:"hugetlb_kib,omitempty"`
}

// PrepareResult describes what Prepare built.
type PrepareResult struct {
	Function string          `json:"function"`
	Clean    *Snapshot       `json:"clean_snapshot"`
	Warm     *Snapshot       `json:"warm_snapshot"`
	FaaSnap  json.RawMessage `json:"faasnap"`
	REAP     json.RawMessage `json:"reap"`
	SnapBPF  json.RawMessage `json:"snapbpf,omitempty"`
	// SnapBPFUnavailable: why the host could not capture for snapbpf.
	SnapBPFUnavailable string          `json:"snapbpf_unavailable,omitempty"`
	Timing             json.RawMessage `json:"timing"`
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

// AccelInfo says which accelerator the daemon uses and why.
type AccelInfo struct {
	Accel  string `json:"accel"`
	Source string `json:"source"`
	Detail string `json:"detail"`
}

// ImageInfo describes the guest image.
type ImageInfo struct {
	Dir           string `json:"dir"`
	Hash          string `json:"hash"`
	KernelVersion string `json:"kernel_version"`
	Cmdline       string `json:"cmdline"`
	BuiltAt       string `json:"built_at"`
}

// Info describes the daemon.
type Info struct {
	Version     string    `json:"version"`
	Accel       AccelInfo `json:"accel"`
	QEMUVersion string    `json:"qemu_version"`
	Image       ImageInfo `json:"image"`
	DataDir     string    `json:"data_dir"`
	Strategies  []string  `json:"strategies"`
}

// StoreEntry is a snapshot's copy in the memory store (premap).
type StoreEntry struct {
	Snapshot string `json:"snapshot"`
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	Bytes    int64  `json:"bytes"`
	Regions  int    `json:"regions"`
	PageSize int64  `json:"page_size,omitempty"`
	// DeviceOffset (devdax): where the copy starts on the device.
	DeviceOffset int64     `json:"device_offset,omitempty"`
	StoredMS     float64   `json:"stored_ms"`
	StoredAt     time.Time `json:"stored_at"`
}

// StoreInfo is the snapshot memory store.
type StoreInfo struct {
	Available     bool         `json:"available"`
	Error         string       `json:"error,omitempty"`
	Dir           string       `json:"dir,omitempty"`
	Kind          string       `json:"kind,omitempty"`
	PageSize      int64        `json:"page_size,omitempty"`
	CapacityBytes int64        `json:"capacity_bytes"`
	FreeBytes     int64        `json:"free_bytes"`
	UsedBytes     int64        `json:"used_bytes"`
	ReservedBytes int64        `json:"reserved_bytes,omitempty"` // held for live clones (hugetlbfs reservations, devdax ranges)
	Clones        int          `json:"clones,omitempty"`         // devdax: live clone ranges
	Entries       []StoreEntry `json:"entries"`
}

// SnapshotMemory is the host memory a snapshot's files hold (shared by
// every VM restored from it).
type SnapshotMemory struct {
	Snapshot       string           `json:"snapshot"`
	PageCacheBytes int64            `json:"page_cache_bytes"`
	Files          map[string]int64 `json:"files"`
	StoreBytes     int64            `json:"store_bytes"`
}

// VMMemory is a running VM's process memory.
type VMMemory struct {
	VM                string `json:"vm"`
	RSSBytes          uint64 `json:"rss_bytes"`
	PSSBytes          uint64 `json:"pss_bytes"`
	AnonBytes         uint64 `json:"anon_bytes"`
	FileBytes         uint64 `json:"file_bytes"`
	ShmemBytes        uint64 `json:"shmem_bytes"`
	SwapBytes         uint64 `json:"swap_bytes"`
	PrivateDirtyBytes uint64 `json:"private_dirty_bytes"`
	// Huge pages (premap from a hugetlbfs memory store): all it maps, and
	// those it copied on write (private to it).
	HugetlbBytes     uint64 `json:"hugetlb_bytes"`
	HugetlbAnonBytes uint64 `json:"hugetlb_anon_bytes"`
}
