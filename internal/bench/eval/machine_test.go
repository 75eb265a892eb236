package eval

import (
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/remotedisk"
)

// The machine line names the storage a run measured on: the disk, or the
// emulated remote volume with its fio reading.
func TestMachineLineNamesTheStorage(t *testing.T) {
	cfg := remotedisk.Config{Latency: 500 * time.Microsecond, IOPS: 16000, BandwidthMBps: 1000}
	r := &EvalResult{Machine: bench.Machine{Disk: "vda (rotational)"}, ReadaheadKB: 128}
	if !strings.Contains(r.MachineLine(), "vda (rotational)") {
		t.Fatal(r.MachineLine())
	}
	r.Storage = &bench.Storage{Kind: bench.StorageRemote, Remote: &cfg, Fio: []bench.FioResult{{RW: "randread", BlockSize: "4k", IODepth: 1, IOPS: 1500}}}
	if l := r.MachineLine(); strings.Contains(l, "vda") || !strings.Contains(l, "**remote** block storage") || !strings.Contains(l, "randread 4k QD1 1500 IOPS") {
		t.Fatal(l)
	}
}
