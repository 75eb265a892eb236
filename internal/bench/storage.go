package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/thaw-dev/thaw/internal/bench/remotedisk"
)

// StorageRemote is the kind of a run whose data directory is on emulated
// remote block storage.
const StorageRemote = "remote"

// RemoteEmulation says how thaw emulates remote block storage.
const RemoteEmulation = "ext4 on a loop device (direct I/O) over a FUSE disk image that delays every request by the latency after IOPS and bandwidth token buckets (thaw bench remote-disk)"

// Storage describes the storage under the daemon's data directory in a
// run that was not on the local disk, with what fio measured on it.
type Storage struct {
	Kind      string             `json:"kind"`
	Emulation string             `json:"emulation,omitempty"`
	Remote    *remotedisk.Config `json:"remote,omitempty"`
	Fio       []FioResult        `json:"fio,omitempty"`
}

// FioResult is one fio job's reads (O_DIRECT, so the device answers).
type FioResult struct {
	Name      string  `json:"name"`
	RW        string  `json:"rw"`
	BlockSize string  `json:"block_size"`
	IODepth   int     `json:"iodepth"`
	IOPS      float64 `json:"iops"`
	MBps      float64 `json:"mb_per_s"` // 10^6 bytes per second
	LatMeanUS float64 `json:"lat_mean_us"`
	LatP50US  float64 `json:"lat_p50_us"`
	LatP99US  float64 `json:"lat_p99_us"`
}

// fioOutput is the part of `fio --output-format=json` thaw reads.
type fioOutput struct {
	Jobs []struct {
		Name    string            `json:"jobname"`
		Options map[string]string `json:"job options"`
		Read    struct {
			IOPS    float64 `json:"iops"`
			BWBytes float64 `json:"bw_bytes"`
			IOs     int64   `json:"total_ios"`
			Lat     struct {
				Mean       float64            `json:"mean"`
				Percentile map[string]float64 `json:"percentile"`
			} `json:"clat_ns"`
		} `json:"read"`
	} `json:"jobs"`
	Global map[string]string `json:"global options"`
}

// ParseFio reads one fio JSON report (one reading job).
func ParseFio(b []byte) (FioResult, error) {
	// fio prints notes before the JSON on some errors.
	if i := strings.IndexByte(string(b), '{'); i > 0 {
		b = b[i:]
	}
	var out fioOutput
	if err := json.Unmarshal(b, &out); err != nil {
		return FioResult{}, fmt.Errorf("fio report: %w", err)
	}
	if len(out.Jobs) != 1 {
		return FioResult{}, fmt.Errorf("fio report: want one job, got %d", len(out.Jobs))
	}
	j := out.Jobs[0]
	if j.Read.IOs == 0 {
		return FioResult{}, fmt.Errorf("fio report: job %q did no reads", j.Name)
	}
	opt := func(k string) string {
		if v, ok := j.Options[k]; ok {
			return v
		}
		return out.Global[k]
	}
	r := FioResult{Name: j.Name, RW: opt("rw"), BlockSize: opt("bs"), IODepth: 1,
		IOPS: j.Read.IOPS, MBps: j.Read.BWBytes / 1e6, LatMeanUS: j.Read.Lat.Mean / 1e3,
		LatP50US: j.Read.Lat.Percentile["50.000000"] / 1e3, LatP99US: j.Read.Lat.Percentile["99.000000"] / 1e3}
	if d := opt("iodepth"); d != "" {
		if _, err := fmt.Sscanf(d, "%d", &r.IODepth); err != nil {
			return FioResult{}, fmt.Errorf("fio report: iodepth %q", d)
		}
	}
	return r, nil
}

// LoadStorage reads a storage description directory: storage.json (the
// settings, as `thaw bench remote-disk --settings` writes them) and every
// fio-*.json report beside it, in name order.
func LoadStorage(dir string) (*Storage, error) {
	b, err := os.ReadFile(filepath.Join(dir, "storage.json"))
	if err != nil {
		return nil, fmt.Errorf("storage description: %w", err)
	}
	var st Storage
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("storage description %s: %w", filepath.Join(dir, "storage.json"), err)
	}
	if st.Kind == "" {
		return nil, errors.New("storage description: no kind")
	}
	reports, err := filepath.Glob(filepath.Join(dir, "fio-*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(reports)
	for _, p := range reports {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r, err := ParseFio(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		st.Fio = append(st.Fio, r)
	}
	return &st, nil
}

// Text says what the storage was.
func (s *Storage) Text() string {
	t := "snapshots on **" + s.Kind + "** block storage"
	if c := s.Remote; c != nil {
		t += fmt.Sprintf(" (emulated: %s added per request, %d IOPS and %d MB/s caps)", c.Latency, c.IOPS, c.BandwidthMBps)
	}
	return t
}

// FioText says what fio measured on it, one clause per report.
func (s *Storage) FioText() string {
	var parts []string
	for _, f := range s.Fio {
		parts = append(parts, fmt.Sprintf("%s %s QD%d %.0f IOPS, %.0f MB/s, latency mean %.0f µs (p99 %.0f µs)",
			f.RW, f.BlockSize, f.IODepth, f.IOPS, f.MBps, f.LatMeanUS, f.LatP99US))
	}
	return strings.Join(parts, "; ")
}
