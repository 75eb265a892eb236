package restore

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/thaw-dev/thaw/wire"
)

// How a strategy describes itself (Strategy's Artifacts, StatsPart and
// BuildPart): the daemon, the API and the CLI loop over these instead of
// naming a strategy.

// Artifact is one file of a strategy's artifact directory.
type Artifact = wire.StrategyArtifact

// Measure describes one field of a strategy's stats or build.
type Measure = wire.Measure

// ErrInvalidStrategy: a strategy that cannot be registered.
var ErrInvalidStrategy = errors.New("invalid restore strategy")

var (
	mu sync.RWMutex
	// registered are the strategies added by Register after the built-in
	// ones (registry).
	registered []Strategy
)

// Register adds a strategy after the built-in ones. The production
// strategies are listed in registry (strategy.go); Register is for
// strategies linked into tests and must run before a daemon starts (it
// takes its strategies once).
func Register(st Strategy) error {
	if err := st.check(); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, o := range all() {
		if o.Kind == st.Kind {
			return fmt.Errorf("%w: %q is registered already", ErrInvalidStrategy, st.Kind)
		}
	}
	registered = append(registered, st)
	return nil
}

// all is every strategy, in registry order; the caller holds mu.
func all() []Strategy { return append(append([]Strategy(nil), registry...), registered...) }

// check says whether st can be registered.
func (st Strategy) check() error {
	switch {
	case st.Kind == "" || strings.ContainsAny(string(st.Kind), " /\\.:"):
		return fmt.Errorf("%w: kind %q", ErrInvalidStrategy, st.Kind)
	case st.Begin == nil:
		return fmt.Errorf("%w: %s has no Begin", ErrInvalidStrategy, st.Kind)
	case st.Warm || st.RemoteDefault:
		return fmt.Errorf("%w: %s: one built-in strategy takes the warm snapshot and one is the remote default", ErrInvalidStrategy, st.Kind)
	}
	for _, p := range []any{st.StatsPart, st.BuildPart} {
		if p != nil && reflect.TypeOf(p).Kind() != reflect.Struct {
			return fmt.Errorf("%w: %s: a part is a struct, not %T", ErrInvalidStrategy, st.Kind, p)
		}
	}
	return nil
}

// Describe is the strategy as the API shows it (GET /v1/info).
func (st Strategy) Describe() wire.StrategyDescription {
	return wire.StrategyDescription{Kind: string(st.Kind), Lazy: st.Lazy, Auto: st.Auto, Records: st.Record != nil, UsesStore: st.UsesStore,
		Artifacts: append([]Artifact{}, st.Artifacts...), Stats: measures(st.StatsPart), Prepared: measures(st.BuildPart)}
}

// measures describes the fields of part, a strategy's stats or build type:
// each exported field's JSON name, and its unit and desc tags.
func measures(part any) []Measure {
	out := []Measure{}
	if part == nil {
		return out
	}
	t := reflect.TypeOf(part)
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		out = append(out, Measure{Name: name, Unit: f.Tag.Get("unit"), Description: f.Tag.Get("desc")})
	}
	return out
}

// withPart is st with part, a strategy's own stats, as its part.
func withPart(st Stats, k Kind, part any) Stats {
	st.Kind = string(k)
	if b, err := json.Marshal(part); err == nil && string(b) != "{}" {
		st.Part = b
	}
	return st
}

// ArtifactPath is the path of strategy k's artifact file name relative to
// a snapshot's directory (as a lazy pull's remote manifest names it).
func ArtifactPath(k Kind, name string) string { return "strategies/" + string(k) + "/" + name }

// RemoteArtifacts are the artifact files of every strategy that a lazy
// pull leaves in the registry, as snapshot-relative paths, and which of
// them each kind's import on invoke streams at once.
func RemoteArtifacts() (files []string, streamed map[Kind][]string) {
	streamed = map[Kind][]string{}
	for _, st := range Strategies() {
		for _, a := range st.Artifacts {
			if !a.Remote {
				continue
			}
			p := ArtifactPath(st.Kind, a.Name)
			files = append(files, p)
			if a.Streamed {
				streamed[st.Kind] = append(streamed[st.Kind], p)
			}
		}
	}
	return files, streamed
}

// RemoteDefault is the strategy of a cold start that names none when the
// snapshot's memory is in the registry.
func RemoteDefault() Kind {
	for _, st := range Strategies() {
		if st.RemoteDefault {
			return st.Kind
		}
	}
	return Vanilla
}

// LazyKinds are the strategies that restore a snapshot whose memory is in
// the registry.
func LazyKinds() []Kind {
	var out []Kind
	for _, st := range Strategies() {
		if st.Lazy {
			out = append(out, st.Kind)
		}
	}
	return out
}

// JoinKinds writes ks as a list for messages: "a, b or c".
func JoinKinds(ks []Kind) string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = string(k)
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
