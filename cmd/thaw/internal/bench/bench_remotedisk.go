package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/remotedisk"
)

func (a *app) newBenchRemoteDiskCmd() *cobra.Command {
	var (
		cfg      remotedisk.Config
		backing  string
		settings string
	)
	cmd := &cobra.Command{
		Use:   "remote-disk MOUNTPOINT",
		Short: "Serve a disk image as emulated remote block storage (FUSE, root)",
		Long: `Mounts a FUSE file system at MOUNTPOINT holding one file, disk.img, whose
contents are --backing (its size is the volume's). Every read and write of
disk.img passes an IOPS and a bandwidth token bucket and then waits --latency,
as a request to a network volume (EBS) does; the page cache is bypassed. Put a
loop device with direct I/O on disk.img and a file system on the loop device to
get a "remote" disk: scripts/remote-storage.sh does, for 'make bench
STORAGE=remote'. Runs until interrupted, then unmounts (the loop device must be
detached first) and prints the requests it served.`,
		Example: `  truncate -s 32G /var/tmp/vol && mkdir -p /mnt/vol
  thaw bench remote-disk /mnt/vol --backing /var/tmp/vol --latency 500us --iops 64000 --bandwidth-mbps 1000 &
  losetup --direct-io=on --find --show /mnt/vol/disk.img`,
		Args: cli.ExactArgs("MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if backing == "" {
				return cli.Usagef("--backing is required")
			}
			if err := cfg.Validate(); err != nil {
				return cli.Usagef("%v", err)
			}
			srv, err := remotedisk.Serve(args[0], backing, cfg)
			if err != nil {
				return err
			}
			if settings != "" {
				st := bench.Storage{Kind: bench.StorageRemote, Emulation: bench.RemoteEmulation, Remote: &cfg}
				b, _ := json.MarshalIndent(st, "", "  ")
				if err := os.WriteFile(settings, append(b, '\n'), 0o644); err != nil {
					srv.Close()
					return err
				}
			}
			fmt.Fprintf(a.Stderr, "[remote-disk] %s on %s: latency %s, %d IOPS, %d MB/s\n", srv.Image(), backing, cfg.Latency, cfg.IOPS, cfg.BandwidthMBps)
			// Serves until a signal: not bounded by --timeout, which would
			// pull the disk from under the file system mounted on it.
			<-cmd.Context().Done()
			// The loop device may still be detaching: retry for a while.
			for i := 0; ; i++ {
				if err = srv.Close(); err == nil || i == 300 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			s := srv.Stats()
			fmt.Fprintf(a.Stderr, "[remote-disk] served %d reads (%.1f MiB), %d writes (%.1f MiB)\n",
				s.Reads, float64(s.ReadBytes)/(1<<20), s.Writes, float64(s.WriteBytes)/(1<<20))
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&backing, "backing", "", "the volume's contents: an existing regular file")
	fl.DurationVar(&cfg.Latency, "latency", 500*time.Microsecond, "added to every request")
	fl.IntVar(&cfg.IOPS, "iops", 64000, "requests per second at most (0: no cap)")
	fl.IntVar(&cfg.BandwidthMBps, "bandwidth-mbps", 1000, "MB/s at most (0: no cap)")
	fl.StringVar(&settings, "settings", "", "write the settings as JSON here once mounted (the storage description 'thaw bench eval --storage' reads)")
	return cmd
}
