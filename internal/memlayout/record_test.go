package memlayout

import (
	"reflect"
	"testing"
)

// bitmap builds a mincore vector of n pages with the given pages resident.
func bitmap(n int, resident ...int) []byte {
	v := make([]byte, n)
	for _, p := range resident {
		v[p] = 1
	}
	return v
}

func TestRecorder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scans [][]byte
		want  []uint64
		news  []int
	}{
		{"nothing", [][]byte{bitmap(8)}, nil, []int{0}},
		{"one scan in address order", [][]byte{bitmap(8, 6, 1, 3)}, []uint64{1, 3, 6}, []int{3}},
		{"scans in first-appearance order", [][]byte{bitmap(8, 5), bitmap(8, 5, 2, 7), bitmap(8, 2, 0)},
			[]uint64{5, 2, 7, 0}, []int{1, 2, 1}},
		{"evicted and back counts once", [][]byte{bitmap(8, 4), bitmap(8), bitmap(8, 4, 3)}, []uint64{4, 3}, []int{1, 0, 1}},
		{"only bit 0 counts", [][]byte{{0, 2, 0xfe, 3, 0x81, 0}}, []uint64{3, 4}, []int{2}},
		{"bitmap grows", [][]byte{bitmap(3, 2), bitmap(200, 2, 150, 64, 63), bitmap(1, 0)},
			[]uint64{2, 63, 64, 150, 0}, []int{1, 3, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Recorder
			for i, s := range tc.scans {
				if n := r.Observe(s); n != tc.news[i] {
					t.Errorf("scan %d: %d new pages, want %d", i, n, tc.news[i])
				}
			}
			got := r.Pages()
			if len(got) != 0 || len(tc.want) != 0 {
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("Pages() = %v, want %v", got, tc.want)
				}
			}
			if r.Len() != len(tc.want) || r.Scans() != len(tc.scans) {
				t.Errorf("Len %d Scans %d", r.Len(), r.Scans())
			}
			if len(got) > 0 {
				got[0] = 999 // Pages returns a copy
				if r.Pages()[0] == 999 {
					t.Error("Pages() aliases the recorder")
				}
			}
		})
	}
}

func TestGroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []uint64
		size  int
		want  []PageGroup
	}{
		{"empty", nil, 2, []PageGroup{}},
		{"group size 2", []uint64{9, 3, 7, 1, 5}, 2,
			[]PageGroup{{1, 1}, {3, 0}, {5, 2}, {7, 1}, {9, 0}}},
		{"group size 1", []uint64{2, 0, 1}, 1, []PageGroup{{0, 1}, {1, 2}, {2, 0}}},
		{"duplicates keep first and do not shift indexes", []uint64{4, 4, 2, 4, 6}, 2,
			[]PageGroup{{2, 0}, {4, 0}, {6, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Groups(tc.order, tc.size); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Groups(%v, %d) = %v, want %v", tc.order, tc.size, got, tc.want)
			}
		})
	}
	// Default group size 1024: pages 0..2999 in reverse access order.
	order := make([]uint64, 3000)
	for i := range order {
		order[i] = uint64(2999 - i)
	}
	for _, size := range []int{0, -5, DefaultGroupSize} {
		g := Groups(order, size)
		if len(g) != 3000 || g[2999].Group != 0 || g[2999-1023].Group != 0 || g[2999-1024].Group != 1 || g[0].Group != 2 {
			t.Errorf("size %d: groups %v %v %v", size, g[2999], g[2999-1024], g[0])
		}
	}
}

func TestDedup(t *testing.T) {
	in := []uint64{3, 1, 3, 2, 1, 5}
	if got := dedup(in); !reflect.DeepEqual(got, []uint64{3, 1, 2, 5}) {
		t.Errorf("dedup = %v", got)
	}
	if !reflect.DeepEqual(in, []uint64{3, 1, 3, 2, 1, 5}) {
		t.Errorf("input modified")
	}
}
