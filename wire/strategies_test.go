package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A restore's stats carry the part of the strategy that ran under its kind,
// and read back the same.
func TestStrategyStatsKeyedByKind(t *testing.T) {
	st := StrategyStats{Kind: "reap", Fallback: "", LayoutEntries: 3, Part: json.RawMessage(`{"prefetch_pages":7}`)}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"kind":"reap","layout_entries":3,"reap":{"prefetch_pages":7}}` {
		t.Fatalf("encoded %s", b)
	}
	var back StrategyStats
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, st) {
		t.Fatalf("decoded %+v %v, want %+v", back, err, st)
	}
	var v struct {
		PrefetchPages int `json:"prefetch_pages"`
	}
	if !back.PartAs("reap", &v) || v.PrefetchPages != 7 || back.PartAs("faasnap", &v) {
		t.Fatalf("PartAs: %+v", v)
	}
	if b, err := json.Marshal(StrategyStats{}); err != nil || string(b) != `{}` {
		t.Fatalf("empty stats %s %v", b, err)
	}
	if _, err := json.Marshal(StrategyStats{Part: json.RawMessage(`{"x":1}`)}); err == nil {
		t.Fatal("a part without a kind encoded")
	}
}

// A prepare result stored before results were keyed by kind reads as a
// keyed one.
func TestPrepareResultReadsUnkeyed(t *testing.T) {
	old := `{"function":"hello","clean_snapshot":null,"warm_snapshot":null,
	  "faasnap":{"scans":9},"reap":{"faulted_pages":3},"snapbpf_unavailable":"no tracefs",
	  "timing":{"boot_ms":1,"faasnap_record_ms":20,"faasnap_build_ms":2,"reap_record_ms":9,"total_ms":40}}`
	var r PrepareResult
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	fs, rp, sb := r.Prepared["faasnap"], r.Prepared["reap"], r.Prepared["snapbpf"]
	if len(r.Prepared) != 3 || fs == nil || string(fs.Build) != `{"scans":9}` || fs.RecordMS != 20 || fs.BuildMS != 2 ||
		rp == nil || rp.RecordMS != 9 || string(rp.Build) != `{"faulted_pages":3}` || sb == nil || sb.Unavailable != "no tracefs" {
		t.Fatalf("read %+v", r.Prepared)
	}
	if r.Timing.BootMS != 1 || r.Timing.TotalMS != 40 {
		t.Fatalf("timing %+v", r.Timing)
	}
	var keyed PrepareResult
	if err := json.Unmarshal([]byte(`{"function":"f","prepared":{"reap":{"record_ms":1,"build_ms":2}}}`), &keyed); err != nil ||
		len(keyed.Prepared) != 1 || keyed.Prepared["reap"].BuildMS != 2 {
		t.Fatalf("keyed %+v %v", keyed, err)
	}
}
