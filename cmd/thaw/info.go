package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) newInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info",
		Short: "Show the daemon's version, accelerator, QEMU, guest image and strategies",
		Long: `Show what the daemon runs on: its version, the accelerator it uses (KVM
or TCG) and why, the QEMU version, the guest image (hash and kernel), its
data directory, the restore strategies it offers, its snapshot registry
(endpoint, bucket, chunk cache and the keys whose records it imports; never
credentials) and its registry signing key: the line other nodes add to their
thawd --registry-trusted-keys to import what this node pushes.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := a.c.Info(a.ctx)
			if err != nil {
				return err
			}
			return a.printObject(info, "", "", func(w io.Writer) {
				row(w, "Daemon:", fmt.Sprintf("thawd %s at %s", orDash(info.Version), a.url))
				if info.Node != "" {
					row(w, "Node:", info.Node)
				}
				accel := orDash(info.Accel.Accel)
				if info.Accel.Source != "" {
					accel += " (" + info.Accel.Source + ")"
				}
				row(w, "Accelerator:", accel)
				if info.Accel.Detail != "" {
					row(w, "", info.Accel.Detail)
				}
				row(w, "QEMU:", orDash(info.QEMUVersion))
				row(w, "Image:", orDash(info.Image.Dir))
				row(w, "  hash:", orDash(info.Image.Hash))
				row(w, "  kernel:", orDash(info.Image.KernelVersion))
				if info.Image.Cmdline != "" {
					row(w, "  cmdline:", info.Image.Cmdline)
				}
				if info.Image.BuiltAt != "" {
					row(w, "  built:", info.Image.BuiltAt)
				}
				row(w, "Data dir:", orDash(info.DataDir))
				row(w, "Strategies:", orDash(strings.Join(info.Strategies, ", ")))
				if info.TSCKHz > 0 {
					row(w, "Guest TSC:", fmt.Sprintf("%.3f MHz, the host's, given to every boot", float64(info.TSCKHz)/1000))
				} else {
					row(w, "Guest TSC:", "not measured: guests calibrate their own")
				}
				if r := info.Registry; r != nil {
					scheme := "http"
					if r.Secure {
						scheme = "https"
					}
					row(w, "Registry:", fmt.Sprintf("%s://%s/%s, %s chunks", scheme, r.Endpoint, r.Bucket, fmtBytes(r.ChunkSize)))
					budget := "unbounded"
					if r.CacheBudgetBytes > 0 {
						budget = fmtBytes(r.CacheBudgetBytes)
					}
					row(w, "  cache:", fmt.Sprintf("%s of %s in %s", fmtBytes(r.CacheUsedBytes), budget, r.CacheDir))
					row(w, "  push on prepare:", fmt.Sprint(r.PushOnPrepare))
					row(w, "  import:", fmt.Sprint(r.Import))
					row(w, "  trusted keys:", orDash(strings.Join(r.TrustedKeys, ", ")))
				}
				if k := info.RegistryKey; k != nil {
					row(w, "Signing key:", k.ID)
					row(w, "", k.PublicKey)
				}
			})
		},
	}
}
