package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/bench/benchtest"
	"github.com/thaw-dev/thaw/internal/bench/remotedisk"
)

// testdata/fio-randread-4k-qd1.json is a real report of fio 3.33 on the
// emulated remote volume.
func TestParseFioReadsARealReport(t *testing.T) {
	b, err := os.ReadFile("testdata/fio-randread-4k-qd1.json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseFio(b)
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 0.01 }
	if r.Name != "1-randread-4k-qd1" || r.RW != "randread" || r.BlockSize != "4k" || r.IODepth != 1 ||
		!near(r.IOPS, 1282.07) || !near(r.LatMeanUS, 768.24) || !near(r.LatP99US, 3489.79) || !near(r.MBps, 5.25) {
		t.Fatalf("parsed %+v", r)
	}
}

func TestParseFioRefusesWhatIsNotOneReadingJob(t *testing.T) {
	for name, in := range map[string]string{
		"not json":  "fio: file not found",
		"no job":    `{"jobs": []}`,
		"two jobs":  `{"jobs": [{"jobname": "a"}, {"jobname": "b"}]}`,
		"no reads":  `{"jobs": [{"jobname": "w", "read": {"total_ios": 0}}]}`,
		"bad depth": `{"jobs": [{"jobname": "r", "job options": {"iodepth": "deep"}, "read": {"total_ios": 5}}]}`,
	} {
		if _, err := ParseFio([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLoadStorage(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadStorage(dir); err == nil {
		t.Fatal("a directory without storage.json accepted")
	}
	cfg := remotedisk.Config{Latency: 500 * time.Microsecond, IOPS: 16000, BandwidthMBps: 1000}
	b, _ := json.Marshal(Storage{Kind: StorageRemote, Emulation: RemoteEmulation, Remote: &cfg})
	if err := os.WriteFile(filepath.Join(dir, "storage.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	report, err := os.ReadFile("testdata/fio-randread-4k-qd1.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fio-1.json"), report, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := LoadStorage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != StorageRemote || *st.Remote != cfg || len(st.Fio) != 1 {
		t.Fatalf("loaded %+v", st)
	}
	text := st.Text() + " " + st.FioText()
	benchtest.WantAll(t, "text", text, "remote", "500µs", "16000 IOPS", "1000 MB/s", "randread 4k QD1 1282 IOPS", "768 µs")
	// A damaged report fails the load and names the file.
	if err := os.WriteFile(filepath.Join(dir, "fio-2.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadStorage(dir); err == nil || !strings.Contains(err.Error(), "fio-2.json") {
		t.Fatalf("damaged report: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "storage.json"), []byte(`{"remote": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadStorage(dir); err == nil {
		t.Fatal("storage.json without a kind accepted")
	}
}
