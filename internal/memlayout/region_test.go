package memlayout

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestPagesOf(t *testing.T) {
	for _, tc := range []struct {
		size int64
		want uint64
	}{{-1, 0}, {0, 0}, {1, 1}, {4095, 1}, {4096, 1}, {4097, 2}, {512 << 20, 131072}} {
		if got := PagesOf(tc.size); got != tc.want {
			t.Errorf("PagesOf(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in, out []PageRun
	}{
		{"empty", nil, []PageRun{}},
		{"drops empty", []PageRun{{5, 0}, {1, 2}}, []PageRun{{1, 2}}},
		{"sorts", []PageRun{{10, 1}, {1, 2}}, []PageRun{{1, 2}, {10, 1}}},
		{"merges adjacent", []PageRun{{1, 2}, {3, 4}}, []PageRun{{1, 6}}},
		{"merges overlapping", []PageRun{{1, 5}, {3, 1}, {4, 10}}, []PageRun{{1, 13}}},
		{"keeps gap of one", []PageRun{{1, 2}, {4, 1}}, []PageRun{{1, 2}, {4, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]PageRun(nil), tc.in...)
			if got := Normalize(in); !reflect.DeepEqual(got, tc.out) {
				t.Errorf("Normalize(%v) = %v, want %v", tc.in, got, tc.out)
			}
			if !reflect.DeepEqual(in, tc.in) {
				t.Errorf("input modified: %v", in)
			}
		})
	}
}

func TestRunsExpand(t *testing.T) {
	for _, tc := range []struct {
		pages []uint64
		runs  []PageRun
	}{
		{nil, nil},
		{[]uint64{0}, []PageRun{{0, 1}}},
		{[]uint64{5, 6, 7, 2, 3, 9}, []PageRun{{5, 3}, {2, 2}, {9, 1}}},
		{[]uint64{3, 2, 1}, []PageRun{{3, 1}, {2, 1}, {1, 1}}},
		{[]uint64{1, 2, 2, 3}, []PageRun{{1, 2}, {2, 2}}},
		{[]uint64{^uint64(0), 0}, []PageRun{{^uint64(0), 1}, {0, 1}}},
	} {
		got := Runs(tc.pages)
		if !reflect.DeepEqual(got, tc.runs) {
			t.Errorf("Runs(%v) = %v, want %v", tc.pages, got, tc.runs)
		}
		back := Expand(got)
		if len(tc.pages) == 0 && len(back) == 0 {
			continue
		}
		if !reflect.DeepEqual(back, tc.pages) {
			t.Errorf("Expand(Runs(%v)) = %v", tc.pages, back)
		}
	}
}

func TestRegionJSON(t *testing.T) {
	b, err := json.Marshal([]PageRun{{1, 2}, {18446744073709551615, 0}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "[[1,2],[18446744073709551615,0]]" {
		t.Fatalf("got %s", b)
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"[1,2]", true}, {" [ 1 , 2 ] ", true},
		{"[1]", false}, {"[1,2,3]", false}, {"[]", false}, {"null", false},
		{"[-1,2]", false}, {"[1.5,2]", false}, {`["1",2]`, false}, {`{"start":1}`, false},
		{"[18446744073709551616,1]", false},
	} {
		var r PageRun
		err := json.Unmarshal([]byte(tc.in), &r)
		if (err == nil) != tc.ok {
			t.Errorf("Unmarshal(%s) error %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestFindRegion(t *testing.T) {
	rs := []PageRun{{2, 3}, {10, 1}, {20, 5}}
	for p, want := range map[uint64]int{0: -1, 2: 0, 4: 0, 5: -1, 10: 1, 11: -1, 24: 2, 25: -1, 1000: -1} {
		if got := FindRegion(rs, p); got != want {
			t.Errorf("FindRegion(%d) = %d, want %d", p, got, want)
		}
	}
}
