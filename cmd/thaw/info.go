package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

func (a *App) newInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the daemon's version, accelerator, VMM, guest image, strategies and limits",
		Long: `Show what the daemon runs on: its version, the accelerator it uses (KVM
or TCG) and why in one line (-o json has the probe's whole account), the
virtual machine monitor (its name, version and machine), the guest image (hash and kernel), its data directory, the
restore strategies it offers, its defaults and limits in force (invocation
and boot timeouts, event and result sizes, live VMs and memory budgets,
the admission queue, keep-alive, the VMM pool, history and version
retention), its snapshot registry (endpoint, bucket, chunk cache and the
keys whose records it imports; never credentials) and its registry
signing key: the line other nodes add to their thawd
--registry-trusted-keys to import what this node pushes.`,
		Args: ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := a.C.Info(a.Ctx)
			if err != nil {
				return err
			}
			return a.PrintObject(info, "", "", func(w io.Writer) {
				Row(w, "Daemon:", fmt.Sprintf("thawd %s at %s", OrDash(info.Version), a.URL))
				if info.Node != "" {
					Row(w, "Node:", info.Node)
				}
				Row(w, "Accelerator:", accelSummary(info.Accel))
				Row(w, "VMM:", vmmSummary(info.VMM))
				Row(w, "Image:", OrDash(info.Image.Dir))
				Row(w, "  hash:", OrDash(info.Image.Hash))
				Row(w, "  kernel:", OrDash(info.Image.KernelVersion))
				if info.Image.Cmdline != "" {
					Row(w, "  cmdline:", info.Image.Cmdline)
				}
				if info.Image.BuiltAt != "" {
					Row(w, "  built:", info.Image.BuiltAt)
				}
				Row(w, "Data dir:", OrDash(info.DataDir))
				Row(w, "Strategies:", OrDash(strings.Join(info.Strategies, ", ")))
				if info.TSCKHz > 0 {
					Row(w, "Guest TSC:", fmt.Sprintf("%.3f MHz, the host's, given to every boot", float64(info.TSCKHz)/1000))
				} else {
					Row(w, "Guest TSC:", "not measured: guests calibrate their own")
				}
				writeLimits(w, info.Limits)
				writeRegistry(w, info)
			})
		},
	}
}

// accelSummary is the accelerator and why, on one line: the probe's
// account cut to its first line (QEMU's own messages can run to many).
func accelSummary(ai client.AccelInfo) string {
	s := OrDash(ai.Accel)
	why := strings.TrimSpace(ai.Source)
	if d := strings.TrimSpace(ai.Detail); d != "" {
		first, _, more := strings.Cut(d, "\n")
		first = Truncate(first, 100)
		if more || strings.HasSuffix(first, "…") {
			first += " (thaw -o json info shows all)"
		}
		if why != "" {
			why += ": "
		}
		why += first
	}
	if why != "" {
		s += " (" + why + ")"
	}
	return s
}

// writeLimits writes the daemon's defaults and limits, each with the
// setting that changes it.
func writeLimits(w io.Writer, l client.Limits) {
	Row(w, "Limits:")
	Row(w, "  invoke timeout:", fmt.Sprintf("%s (thaw invoke --timeout-ms, up to %s; default thawd --invoke-timeout)",
		fmtDuration(l.InvokeTimeoutMS), fmtDuration(l.MaxInvokeTimeoutMS)))
	Row(w, "  boot timeout:", fmtDuration(l.BootTimeoutMS)+" (thawd --boot-timeout)")
	Row(w, "  event:", FmtBytes(l.MaxEventBytes)+" at most")
	Row(w, "  result:", fmt.Sprintf("%s at most; the history keeps %s of it (thawd --max-stored-result)",
		FmtBytes(l.MaxResultBytes), FmtBytes(l.MaxStoredResultBytes)))
	Row(w, "  code:", FmtBytes(l.MaxCodeBytes)+" at most, uploaded")
	Row(w, "  default VM:", fmt.Sprintf("%s, %d vCPU (thawd --memory, --vcpus)", FmtMiB(l.DefaultMemoryMiB), l.DefaultVCPUs))
	Row(w, "  live VMs:", fmt.Sprintf("%d at most, %s together, %s overhead each (thawd --max-vms, --vm-memory-budget, --vm-memory-overhead)",
		l.MaxVMs, FmtMiB(l.VMMemoryBudgetMiB), FmtMiB(l.VMMemoryOverheadMiB)))
	Row(w, "  admission:", fmt.Sprintf("%d starts wait up to %s for room, then 429 (thawd --admission-queue, --admission-timeout)",
		l.AdmissionQueue, fmtDuration(l.AdmissionTimeoutMS)))
	keep := "off"
	if l.KeepAliveS > 0 {
		keep = fmt.Sprintf("%s, %d idle VMs per function, stopped below %s available", fmtDuration(int64(l.KeepAliveS*1000)), l.KeepAliveMaxIdle,
			FmtMiB(l.KeepAliveMinAvailableMiB))
	}
	Row(w, "  keep-alive:", keep+" (thawd --keep-alive; thaw function create --keep-alive)")
	pool := "off"
	if l.VMMPool > 0 {
		pool = fmt.Sprintf("%d per snapshot and strategy, waiting %s, %s together", l.VMMPool, fmtDuration(int64(l.VMMPoolTTLS*1000)),
			FmtMiB(l.VMMPoolMemoryMiB))
	}
	Row(w, "  VMM pool:", pool+" (thawd --vmm-pool, --vmm-pool-ttl, --vmm-pool-memory)")
	history := "unbounded"
	switch {
	case l.HistoryMax > 0 && l.HistoryMaxAgeS > 0:
		history = fmt.Sprintf("newest %d invocations, none older than %s", l.HistoryMax, fmtDuration(int64(l.HistoryMaxAgeS*1000)))
	case l.HistoryMax > 0:
		history = fmt.Sprintf("newest %d invocations", l.HistoryMax)
	case l.HistoryMaxAgeS > 0:
		history = "none older than " + fmtDuration(int64(l.HistoryMaxAgeS*1000))
	}
	Row(w, "  history:", history+" (thawd --history-max, --history-max-age)")
	logs := "unbounded"
	if l.HistoryMaxLogBytes > 0 {
		logs = FmtBytes(l.HistoryMaxLogBytes)
	}
	Row(w, "  logs:", fmt.Sprintf("%s of output per invocation, %s in all, kept with the history (thawd --max-logs, --history-max-log-bytes)",
		FmtBytes(l.MaxLogBytes), logs))
	snaps := "deleted only when asked"
	if l.SnapshotKeep > 0 {
		snaps = fmt.Sprintf("newest %d per function", l.SnapshotKeep)
	}
	Row(w, "  versions:", fmt.Sprintf("newest %d keep their snapshots, and every alias's (thawd --version-keep)", l.VersionKeep))
	Row(w, "  snapshots:", snaps+" (thawd --snapshot-keep)")
	Row(w, "  console log:", FmtBytes(l.ConsoleLogBytes)+" per VM (thawd --console-log-limit)")
}

// writeRegistry writes the registry and the signing key, if any.
func writeRegistry(w io.Writer, info *client.Info) {
	if r := info.Registry; r != nil {
		scheme := "http"
		if r.Secure {
			scheme = "https"
		}
		where := fmt.Sprintf("%s://%s/%s", scheme, r.Endpoint, r.Bucket)
		if r.Path != "" {
			where = "directory " + r.Path
		}
		Row(w, "Registry:", fmt.Sprintf("%s, %s chunks", where, FmtBytes(r.ChunkSize)))
		budget := "unbounded"
		if r.CacheBudgetBytes > 0 {
			budget = FmtBytes(r.CacheBudgetBytes)
		}
		Row(w, "  cache:", fmt.Sprintf("%s of %s in %s", FmtBytes(r.CacheUsedBytes), budget, r.CacheDir))
		Row(w, "  push on prepare:", fmt.Sprint(r.PushOnPrepare))
		Row(w, "  import:", fmt.Sprint(r.Import))
		Row(w, "  trusted keys:", OrDash(strings.Join(r.TrustedKeys, ", ")))
	}
	if k := info.RegistryKey; k != nil {
		Row(w, "Signing key:", k.ID)
		Row(w, "", k.PublicKey)
	}
}

// fmtDuration formats milliseconds as a short duration: "1m0s", "500ms",
// "30 days".
func fmtDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	const day = 24 * time.Hour
	switch {
	case d == day:
		return "1 day"
	case d > day && d%day == 0:
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}

// vmmSummary is the monitor in one line: "qemu 7.2.22 (pc-q35-7.2)".
func vmmSummary(v client.VMMInfo) string {
	if v.Name == "" {
		return "-"
	}
	s := strings.TrimSpace(v.Name + " " + v.Version)
	if v.Machine != "" {
		s += " (" + v.Machine + ")"
	}
	return s
}
