package versions

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ref
		err  bool
	}{
		{in: "hello", want: Ref{Function: "hello"}},
		{in: "hello:3", want: Ref{Function: "hello", Version: 3}},
		{in: "hello:live", want: Ref{Function: "hello", Alias: "live"}},
		{in: "hello:canary-2", want: Ref{Function: "hello", Alias: "canary-2"}},
		{in: "hello:", err: true},
		{in: ":3", err: true},
		{in: "", err: true},
		{in: "hello:0", err: true},
		{in: "hello:03", err: true},
		{in: "hello:-1", err: true},
		{in: "hello:3a", err: true},
		{in: "hello:Live", err: true},
		{in: "hello:a:b", err: true},
		{in: "hello:99999999999999999999", err: true},
	} {
		got, err := ParseRef(tc.in)
		if tc.err {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseRef(%q) = %+v, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("Ref %+v prints %q, want %q", got, got.String(), tc.in)
		}
	}
}

func TestParseRouting(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want Routing
		err  bool
	}{
		{in: []string{"3"}, want: Routing{{3, 100}}},
		{in: []string{"3=100"}, want: Routing{{3, 100}}},
		{in: []string{"3=90", "4=10"}, want: Routing{{3, 90}, {4, 10}}},
		{in: []string{"3", "4=10"}, want: Routing{{3, 90}, {4, 10}}},
		{in: []string{"3=25", "4"}, want: Routing{{3, 25}, {4, 75}}},
		{in: []string{"3=0", "4=100"}, want: Routing{{3, 0}, {4, 100}}},
		{in: nil, err: true},
		{in: []string{"3", "4"}, err: true},               // two without weights
		{in: []string{"3=50", "4=40"}, err: true},         // not 100
		{in: []string{"3=50", "3=50"}, err: true},         // twice
		{in: []string{"3=90", "4=10", "5=0"}, err: true},  // three
		{in: []string{"3=101"}, err: true},                // over
		{in: []string{"3=-1", "4=101"}, err: true},        // negative
		{in: []string{"x=50", "4=50"}, err: true},         // not a version
		{in: []string{"3=half", "4"}, err: true},          // not a weight
		{in: []string{"0"}, err: true},                    // no version 0
		{in: []string{"3=60", "4=60"}, err: true},         // over 100 together
		{in: []string{"3=90", "4=10", "4=10"}, err: true}, // three
	} {
		got, err := ParseRouting(tc.in)
		if tc.err {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseRouting(%q) = %v, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseRouting(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestPickEdges(t *testing.T) {
	r := Routing{{3, 90}, {4, 10}}
	for _, tc := range []struct {
		u    float64
		want int
	}{{0, 3}, {0.8999, 3}, {0.9, 4}, {0.99999, 4}, {1, 4}} {
		if got := r.Pick(tc.u); got != tc.want {
			t.Errorf("Pick(%v) = %d, want %d", tc.u, got, tc.want)
		}
	}
	if got := (Routing{{3, 100}, {4, 0}}).Pick(0.99999); got != 3 {
		t.Errorf("a version at weight 0 got a request (%d)", got)
	}
	if got := (Routing{{3, 0}, {4, 100}}).Pick(0); got != 4 {
		t.Errorf("a version at weight 0 got a request (%d)", got)
	}
}

// The split is what the weights say: for each routing, n draws from a
// seeded generator put each version's count within 4.5 standard
// deviations of its binomial expectation, and a chi-square test over both
// does not reject the weights at p = 0.001.
func TestPickSplitsByWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	for _, r := range []Routing{{{3, 90}, {4, 10}}, {{1, 50}, {2, 50}}, {{7, 1}, {8, 99}}, {{5, 100}}} {
		counts := map[int]int{}
		for range n {
			counts[r.Pick(rng.Float64())]++
		}
		chi2 := 0.0
		for _, route := range r {
			p := float64(route.Weight) / MaxWeight
			want := p * n
			sd := math.Sqrt(n * p * (1 - p))
			got := float64(counts[route.Version])
			if math.Abs(got-want) > 4.5*sd+1e-9 {
				t.Errorf("%v: version %d got %d of %d, want %.0f ± %.0f", r, route.Version, counts[route.Version], n, want, 4.5*sd)
			}
			if want > 0 {
				chi2 += (got - want) * (got - want) / want
			}
		}
		// One degree of freedom for two routes: the 0.999 quantile is 10.83.
		if len(r) == 2 && chi2 > 10.83 {
			t.Errorf("%v: chi-square %.2f over 10.83 (p < 0.001): counts %v", r, chi2, counts)
		}
		t.Logf("%v: %v of %d (chi-square %.2f)", r, counts, n, chi2)
	}
}

func TestRollbackTarget(t *testing.T) {
	for _, tc := range []struct {
		current int
		history []int
		ready   []int
		want    int
		err     bool
	}{
		{current: 3, history: []int{1, 2}, ready: []int{1, 2, 3}, want: 2},
		{current: 3, history: []int{1, 3, 2, 3}, ready: []int{1, 2, 3}, want: 2}, // the newest other
		{current: 3, history: []int{1, 2}, ready: []int{1, 3}, want: 1},          // 2 was collected
		{current: 3, history: nil, ready: []int{1, 2, 3}, want: 2},               // no history: the one below
		{current: 2, history: []int{5}, ready: []int{1, 2, 5}, want: 5},          // history wins over order
		{current: 1, history: nil, ready: []int{1}, err: true},
		{current: 1, history: []int{1}, ready: []int{1, 2}, err: true}, // nothing below, no other in history
	} {
		got, err := RollbackTarget(tc.current, tc.history, tc.ready)
		if tc.err {
			if err == nil {
				t.Errorf("RollbackTarget(%d, %v, %v) = %d, want an error", tc.current, tc.history, tc.ready, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("RollbackTarget(%d, %v, %v) = %d, %v; want %d", tc.current, tc.history, tc.ready, got, err, tc.want)
		}
	}
}

func TestRetained(t *testing.T) {
	kept, collect := Retained([]int{1, 2, 3, 4, 5, 6, 7}, 5, []int{1})
	if !reflect.DeepEqual(kept, []int{1, 3, 4, 5, 6, 7}) || !reflect.DeepEqual(collect, []int{2}) {
		t.Errorf("kept %v collect %v", kept, collect)
	}
	kept, collect = Retained([]int{2, 1}, 5, nil)
	if !reflect.DeepEqual(kept, []int{1, 2}) || collect != nil {
		t.Errorf("kept %v collect %v", kept, collect)
	}
	kept, collect = Retained([]int{1, 2, 3}, 1, []int{2, 2})
	if !reflect.DeepEqual(kept, []int{2, 3}) || !reflect.DeepEqual(collect, []int{1}) {
		t.Errorf("kept %v collect %v", kept, collect)
	}
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"hello", "hello:3", "hello:live", ":", "a:b:c", "x:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		if r.Version > 0 && r.Alias != "" {
			t.Fatalf("%q: both a version and an alias", s)
		}
		back, err := ParseRef(r.String())
		if err != nil || back != r {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, r, r.String(), back, err)
		}
	})
}
