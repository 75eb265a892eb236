// Package versions is the pure part of function versions and aliases: what
// a reference to a function names (NAME, NAME:3, NAME:ALIAS), how an alias
// splits traffic between versions by weight, where a rollback goes, and
// which versions keep their snapshots. It holds no state and does no I/O;
// the daemon keeps versions and aliases in its catalog.
package versions

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Live is the alias every deploy moves to its new version (unless told
// not to), and the one an unqualified invocation follows.
const Live = "live"

// MaxRoutes is how many versions one alias may split traffic between.
const MaxRoutes = 2

// MaxWeight is the sum of an alias's weights when it names them all; a
// route without a weight takes what the others leave.
const MaxWeight = 100

// ErrInvalid is a malformed reference, alias or routing.
var ErrInvalid = errors.New("invalid")

var aliasRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Ref is what an invocation or a command names: a function, and at most
// one of a version number and an alias.
type Ref struct {
	Function string
	Version  int    // 0: none named
	Alias    string // "": none named
}

// String is the reference as users write it.
func (r Ref) String() string {
	switch {
	case r.Version > 0:
		return r.Function + ":" + strconv.Itoa(r.Version)
	case r.Alias != "":
		return r.Function + ":" + r.Alias
	}
	return r.Function
}

// Qualified says whether the reference names a version or an alias.
func (r Ref) Qualified() bool { return r.Version > 0 || r.Alias != "" }

// ParseRef reads NAME, NAME:VERSION or NAME:ALIAS. The function name is
// not checked here (the daemon has its own rule for names).
func ParseRef(s string) (Ref, error) {
	name, qual, ok := strings.Cut(s, ":")
	if name == "" {
		return Ref{}, fmt.Errorf("%w: %q names no function", ErrInvalid, s)
	}
	if !ok {
		return Ref{Function: name}, nil
	}
	if qual == "" {
		return Ref{}, fmt.Errorf("%w: %q: nothing after ':' (want NAME:VERSION or NAME:ALIAS)", ErrInvalid, s)
	}
	if qual[0] >= '0' && qual[0] <= '9' {
		n, err := ParseVersion(qual)
		if err != nil {
			return Ref{}, err
		}
		return Ref{Function: name, Version: n}, nil
	}
	if err := CheckAlias(qual); err != nil {
		return Ref{}, err
	}
	return Ref{Function: name, Alias: qual}, nil
}

// ParseVersion reads a version number (1, 2, ...).
func ParseVersion(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%w: version %q: want a number from 1", ErrInvalid, s)
	}
	return n, nil
}

// CheckAlias checks an alias name: like a function name, and not a number.
func CheckAlias(name string) error {
	if !aliasRE.MatchString(name) {
		return fmt.Errorf("%w: alias %q: use 1-63 lowercase letters, digits and '-', starting with a letter", ErrInvalid, name)
	}
	return nil
}

// Route sends Weight percent of an alias's traffic to Version.
type Route struct {
	Version int `json:"version"`
	Weight  int `json:"weight"`
}

// Routing is an alias's split: one version at 100, or two whose weights
// add up to 100.
type Routing []Route

// Versions lists the versions routed to, in order.
func (r Routing) Versions() []int {
	out := make([]int, len(r))
	for i, x := range r {
		out[i] = x.Version
	}
	return out
}

// String is the routing as `thaw alias set` takes it: 3=90 4=10.
func (r Routing) String() string {
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = fmt.Sprintf("%d=%d", x.Version, x.Weight)
	}
	return strings.Join(parts, " ")
}

// ParseRouting reads VERSION[=WEIGHT] words. A single version without a
// weight takes all traffic; of two, one may leave its weight out and
// takes what the other leaves.
func ParseRouting(words []string) (Routing, error) {
	if len(words) == 0 || len(words) > MaxRoutes {
		return nil, fmt.Errorf("%w: an alias routes to 1 or %d versions, got %d", ErrInvalid, MaxRoutes, len(words))
	}
	var r Routing
	missing := -1
	for i, w := range words {
		v, ws, hasWeight := strings.Cut(w, "=")
		n, err := ParseVersion(v)
		if err != nil {
			return nil, err
		}
		weight := 0
		if hasWeight {
			if weight, err = strconv.Atoi(ws); err != nil {
				return nil, fmt.Errorf("%w: weight %q of version %d: want 0-%d", ErrInvalid, ws, n, MaxWeight)
			}
		} else if missing >= 0 {
			return nil, fmt.Errorf("%w: only one version may leave its weight out", ErrInvalid)
		} else {
			missing = i
		}
		r = append(r, Route{Version: n, Weight: weight})
	}
	if missing >= 0 {
		sum := 0
		for _, x := range r {
			sum += x.Weight
		}
		r[missing].Weight = MaxWeight - sum
	}
	return r, r.Check()
}

// Check validates a routing: 1 or 2 distinct versions, weights 0-100
// adding up to 100.
func (r Routing) Check() error {
	if len(r) == 0 || len(r) > MaxRoutes {
		return fmt.Errorf("%w: an alias routes to 1 or %d versions, got %d", ErrInvalid, MaxRoutes, len(r))
	}
	sum := 0
	for i, x := range r {
		if x.Version < 1 {
			return fmt.Errorf("%w: version %d: want a number from 1", ErrInvalid, x.Version)
		}
		if x.Weight < 0 || x.Weight > MaxWeight {
			return fmt.Errorf("%w: weight %d of version %d: want 0-%d", ErrInvalid, x.Weight, x.Version, MaxWeight)
		}
		for _, y := range r[:i] {
			if y.Version == x.Version {
				return fmt.Errorf("%w: version %d is named twice", ErrInvalid, x.Version)
			}
		}
		sum += x.Weight
	}
	if sum != MaxWeight {
		return fmt.Errorf("%w: weights add up to %d, want %d", ErrInvalid, sum, MaxWeight)
	}
	return nil
}

// Pick chooses the version for one request. u is uniform in [0, 1)
// (the caller's random source, so tests can drive it).
func (r Routing) Pick(u float64) int {
	x := u * MaxWeight
	acc := 0.0
	for _, route := range r {
		acc += float64(route.Weight)
		if x < acc {
			return route.Version
		}
	}
	// u rounding up to 1: the last route with any weight.
	for i := len(r) - 1; i >= 0; i-- {
		if r[i].Weight > 0 {
			return r[i].Version
		}
	}
	return r[0].Version
}

// Primary is the version with the most traffic (the first of equals).
func (r Routing) Primary() int {
	best := r[0]
	for _, x := range r[1:] {
		if x.Weight > best.Weight {
			best = x
		}
	}
	return best.Version
}

// RollbackTarget says where `thaw rollback` moves an alias that routes
// to current (its primary version), given the alias's previous primary
// versions, newest last, and the versions that still have a snapshot: the
// newest previous one other than current that is ready, else the newest
// ready version below current.
func RollbackTarget(current int, history []int, ready []int) (int, error) {
	isReady := map[int]bool{}
	for _, v := range ready {
		isReady[v] = true
	}
	for i := len(history) - 1; i >= 0; i-- {
		if v := history[i]; v != current && isReady[v] {
			return v, nil
		}
	}
	best := 0
	for _, v := range ready {
		if v < current && v > best {
			best = v
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("%w: no version before %d has a snapshot to roll back to", ErrInvalid, current)
	}
	return best, nil
}

// Retained picks the versions whose snapshots are kept: the newest keep
// versions and every version an alias routes to. all is every version
// number; the rest may be collected.
func Retained(all []int, keep int, aliased []int) (kept, collect []int) {
	sorted := append([]int(nil), all...)
	sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
	pinned := map[int]bool{}
	for _, v := range aliased {
		pinned[v] = true
	}
	for i, v := range sorted {
		if i < keep || pinned[v] {
			kept = append(kept, v)
		} else {
			collect = append(collect, v)
		}
	}
	sort.Ints(kept)
	sort.Ints(collect)
	return kept, collect
}
