package info

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newInfoCmd() *cobra.Command {
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
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := a.C.Info(a.Ctx)
			if err != nil {
				return err
			}
			return a.PrintObject(info, "", "", func(w io.Writer) {
				output.Row(w, "Daemon:", fmt.Sprintf("thawd %s at %s", output.OrDash(info.Version), a.URL))
				if info.Node != "" {
					output.Row(w, "Node:", info.Node)
				}
				output.Row(w, "Accelerator:", accelSummary(info.Accel))
				output.Row(w, "VMM:", vmmSummary(info.VMM))
				output.Row(w, "Image:", output.OrDash(info.Image.Dir))
				output.Row(w, "  hash:", output.OrDash(info.Image.Hash))
				output.Row(w, "  kernel:", output.OrDash(info.Image.KernelVersion))
				if info.Image.Cmdline != "" {
					output.Row(w, "  cmdline:", info.Image.Cmdline)
				}
				if info.Image.BuiltAt != "" {
					output.Row(w, "  built:", info.Image.BuiltAt)
				}
				output.Row(w, "Data dir:", output.OrDash(info.DataDir))
				output.Row(w, "Strategies:", output.OrDash(strings.Join(info.Strategies, ", ")))
				if info.TSCKHz > 0 {
					output.Row(w, "Guest TSC:", fmt.Sprintf("%.3f MHz, the host's, given to every boot", float64(info.TSCKHz)/1000))
				} else {
					output.Row(w, "Guest TSC:", "not measured: guests calibrate their own")
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
	s := output.OrDash(ai.Accel)
	why := strings.TrimSpace(ai.Source)
	if d := strings.TrimSpace(ai.Detail); d != "" {
		first, _, more := strings.Cut(d, "\n")
		first = output.Truncate(first, 100)
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
	output.Row(w, "Limits:")
	output.Row(w, "  invoke timeout:", fmt.Sprintf("%s (thaw invoke --timeout-ms, up to %s; default thawd --invoke-timeout)",
		fmtDuration(l.InvokeTimeoutMS), fmtDuration(l.MaxInvokeTimeoutMS)))
	output.Row(w, "  boot timeout:", fmtDuration(l.BootTimeoutMS)+" (thawd --boot-timeout)")
	output.Row(w, "  event:", output.FmtBytes(l.MaxEventBytes)+" at most")
	output.Row(w, "  result:", fmt.Sprintf("%s at most; the history keeps %s of it (thawd --max-stored-result)",
		output.FmtBytes(l.MaxResultBytes), output.FmtBytes(l.MaxStoredResultBytes)))
	output.Row(w, "  code:", output.FmtBytes(l.MaxCodeBytes)+" at most, uploaded")
	output.Row(w, "  default VM:", fmt.Sprintf("%s, %d vCPU (thawd --memory, --vcpus)", output.FmtMiB(l.DefaultMemoryMiB), l.DefaultVCPUs))
	output.Row(w, "  live VMs:", fmt.Sprintf("%d at most, %s together, %s overhead each (thawd --max-vms, --vm-memory-budget, --vm-memory-overhead)",
		l.MaxVMs, output.FmtMiB(l.VMMemoryBudgetMiB), output.FmtMiB(l.VMMemoryOverheadMiB)))
	output.Row(w, "  admission:", fmt.Sprintf("%d starts wait up to %s for room, then 429 (thawd --admission-queue, --admission-timeout)",
		l.AdmissionQueue, fmtDuration(l.AdmissionTimeoutMS)))
	keep := "off"
	if l.KeepAliveS > 0 {
		keep = fmt.Sprintf("%s, %d idle VMs per function, stopped below %s available", fmtDuration(int64(l.KeepAliveS*1000)), l.KeepAliveMaxIdle,
			output.FmtMiB(l.KeepAliveMinAvailableMiB))
	}
	output.Row(w, "  keep-alive:", keep+" (thawd --keep-alive; thaw function create --keep-alive)")
	pool := "off"
	if l.VMMPool > 0 {
		pool = fmt.Sprintf("%d per snapshot and strategy, waiting %s, %s together", l.VMMPool, fmtDuration(int64(l.VMMPoolTTLS*1000)),
			output.FmtMiB(l.VMMPoolMemoryMiB))
	}
	output.Row(w, "  VMM pool:", pool+" (thawd --vmm-pool, --vmm-pool-ttl, --vmm-pool-memory)")
	history := "unbounded"
	switch {
	case l.HistoryMax > 0 && l.HistoryMaxAgeS > 0:
		history = fmt.Sprintf("newest %d invocations, none older than %s", l.HistoryMax, fmtDuration(int64(l.HistoryMaxAgeS*1000)))
	case l.HistoryMax > 0:
		history = fmt.Sprintf("newest %d invocations", l.HistoryMax)
	case l.HistoryMaxAgeS > 0:
		history = "none older than " + fmtDuration(int64(l.HistoryMaxAgeS*1000))
	}
	output.Row(w, "  history:", history+" (thawd --history-max, --history-max-age)")
	logs := "unbounded"
	if l.HistoryMaxLogBytes > 0 {
		logs = output.FmtBytes(l.HistoryMaxLogBytes)
	}
	output.Row(w, "  logs:", fmt.Sprintf("%s of output per invocation, %s in all, kept with the history (thawd --max-logs, --history-max-log-bytes)",
		output.FmtBytes(l.MaxLogBytes), logs))
	snaps := "deleted only when asked"
	if l.SnapshotKeep > 0 {
		snaps = fmt.Sprintf("newest %d per function", l.SnapshotKeep)
	}
	output.Row(w, "  versions:", fmt.Sprintf("newest %d keep their snapshots, and every alias's (thawd --version-keep)", l.VersionKeep))
	output.Row(w, "  snapshots:", snaps+" (thawd --snapshot-keep)")
	output.Row(w, "  console log:", output.FmtBytes(l.ConsoleLogBytes)+" per VM (thawd --console-log-limit)")
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
		output.Row(w, "Registry:", fmt.Sprintf("%s, %s chunks", where, output.FmtBytes(r.ChunkSize)))
		budget := "unbounded"
		if r.CacheBudgetBytes > 0 {
			budget = output.FmtBytes(r.CacheBudgetBytes)
		}
		output.Row(w, "  cache:", fmt.Sprintf("%s of %s in %s", output.FmtBytes(r.CacheUsedBytes), budget, r.CacheDir))
		output.Row(w, "  push on prepare:", fmt.Sprint(r.PushOnPrepare))
		output.Row(w, "  import:", fmt.Sprint(r.Import))
		output.Row(w, "  trusted keys:", output.OrDash(strings.Join(r.TrustedKeys, ", ")))
	}
	if k := info.RegistryKey; k != nil {
		output.Row(w, "Signing key:", k.ID)
		output.Row(w, "", k.PublicKey)
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
