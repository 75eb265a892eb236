package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// Deleting a function. Without cascade, a function that anything uses (a
// VM, kept idle or standby too, a snapshot, a version) stays, and the
// refusal lists everything that does at once. With cascade, everything
// goes in one step: its VMs are stopped (one serving an invocation is
// killed, and the invocation fails saying so), its snapshots deleted
// (pinned ones too: a pin guards against collection, not against an
// explicit delete), with their memory store copies, then its versions,
// aliases, code and the function. While a delete runs, no VM of the
// function starts. The registry keeps what was pushed to it; the
// invocation history keeps the function's records.

// FunctionDeletion is what deleting a function removed.
type FunctionDeletion = wire.FunctionDeletion

// DeleteFunction deletes a function that nothing uses (DeleteFunctionWith
// without cascade).
func (s *Service) DeleteFunction(ctx context.Context, name string) error {
	_, err := s.DeleteFunctionWith(ctx, name, false)
	return err
}

// DeleteFunctionWith deletes a function, with cascade everything of it
// first, and says what went.
func (s *Service) DeleteFunctionWith(ctx context.Context, name string, cascade bool) (*FunctionDeletion, error) {
	t0 := time.Now()
	if _, err := s.GetFunction(ctx, name); err != nil {
		return nil, err
	}
	end, err := s.beginFunctionDelete(name)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx = context.WithoutCancel(ctx) // half a delete helps nobody: it ends even if its caller went away
	out := &FunctionDeletion{Function: name, VMs: []wire.DeletedVM{}, Snapshots: []wire.DeletedSnapshot{},
		Versions: []int{}, Aliases: []string{}}
	if !cascade {
		if err := s.functionInUse(ctx, name); err != nil {
			return nil, err
		}
	} else {
		gate, err := s.stopFunctionVMs(ctx, name, out)
		if err != nil {
			return nil, err
		}
		defer gate.Unlock()
		if err := s.deleteFunctionSnapshots(ctx, name, out); err != nil {
			return nil, err
		}
	}
	if err := s.dropFunction(ctx, name, out); err != nil {
		return nil, err
	}
	out.MS = ms(time.Since(t0))
	s.log.Info("function deleted", "function", name, "cascade", cascade, "vms", len(out.VMs), "snapshots", len(out.Snapshots),
		"versions", len(out.Versions), "aliases", len(out.Aliases), "ms", out.MS)
	return out, nil
}

// beginFunctionDelete marks name as being deleted (startVM then refuses
// its VMs) until end; it refuses while the function is being created or
// deployed, or deleted already.
func (s *Service) beginFunctionDelete(name string) (end func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.creating[name] != 0:
		return nil, fmt.Errorf("%w: function %q is being created or deployed; delete it when that is done", ErrConflict, name)
	case s.deleting[name]:
		return nil, fmt.Errorf("%w: function %q is being deleted already", ErrConflict, name)
	}
	if s.deleting == nil {
		s.deleting = map[string]bool{}
	}
	s.deleting[name] = true
	return func() {
		s.mu.Lock()
		delete(s.deleting, name)
		s.mu.Unlock()
	}, nil
}

// functionInUse is nil if nothing uses the function, else a conflict that
// lists every VM, snapshot and version that does.
func (s *Service) functionInUse(ctx context.Context, name string) error {
	vms, err := s.functionVMs(ctx, name)
	if err != nil {
		return err
	}
	idle := s.keptOf(name)
	var uses []string
	var live []string
	for _, v := range vms {
		if !v.Live() {
			continue
		}
		what := v.ID + " " + v.State
		switch {
		case idle[v.ID]:
			what = v.ID + " kept idle"
		case v.State == catalog.StateStandby:
			what = v.ID + " standby in the VMM pool"
		case s.RunningInvocation(v.ID) != nil:
			what = v.ID + " running an invocation"
		}
		live = append(live, what)
	}
	if len(live) > 0 {
		uses = append(uses, counted(len(live), "VM", "VMs")+" ("+listSome(live)+")")
	}
	snaps, err := s.db.ListSnapshots(ctx, name)
	if err != nil {
		return err
	}
	var ids []string
	for _, sn := range snaps {
		id := sn.ID
		if sn.Pinned {
			id += " pinned"
		}
		ids = append(ids, id)
	}
	if len(ids) > 0 {
		uses = append(uses, counted(len(ids), "snapshot", "snapshots")+" ("+listSome(ids)+")")
	}
	vs, err := s.db.ListVersions(ctx, name)
	if err != nil {
		return err
	}
	if len(vs) > 0 {
		var ns []string
		for _, v := range vs {
			ns = append(ns, strconv.Itoa(v.Number))
		}
		aliases, err := s.db.ListAliases(ctx, name)
		if err != nil {
			return err
		}
		what := counted(len(vs), "version", "versions") + " (" + listSome(ns) + ")"
		if len(aliases) > 0 {
			what += " and " + counted(len(aliases), "alias", "aliases")
		}
		uses = append(uses, what)
	}
	if len(uses) == 0 {
		return nil
	}
	return fmt.Errorf("%w: function %q is in use: %s; delete it with --cascade (thaw function delete %s --cascade; the API's ?cascade=true) to remove them all with it",
		ErrConflict, name, strings.Join(uses, ", "), name)
}

// counted is "1 VM" or "3 VMs".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// listSome joins up to 5 items and says how many more there are.
func listSome(items []string) string {
	const most = 5
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:most], ", ") + fmt.Sprintf(" and %d more", len(items)-most)
}

// functionVMs are the catalog's VMs of function, in any state.
func (s *Service) functionVMs(ctx context.Context, name string) ([]*catalog.VM, error) {
	vms, err := s.db.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(vms, func(v *catalog.VM) bool { return v.Function != name }), nil
}

// keptOf are the ids of function's VMs idle in the keep-alive pool.
func (s *Service) keptOf(name string) map[string]bool {
	ids := map[string]bool{}
	s.pool.EachWhere(func(k *kept) bool { return k.Fn.Name == name }, func(k *kept) { ids[k.Rec.ID] = true })
	return ids
}

// liveOf are function's VMs with a VMM.
func (s *Service) liveOf(name string) []*liveVM { return s.vms.Of(name) }

// stopFunctionVMs stops and forgets every VM of function (standby and
// kept ones, and those still starting), killing what is in use, and
// returns the function's gate held: no cold start of it is under way.
// What went is added to out.
func (s *Service) stopFunctionVMs(ctx context.Context, name string, out *FunctionDeletion) (*sync.RWMutex, error) {
	vms, err := s.functionVMs(ctx, name)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	note := func(v wire.DeletedVM) {
		if !seen[v.ID] {
			seen[v.ID] = true
			out.VMs = append(out.VMs, v)
		}
	}
	idle := s.keptOf(name)
	for _, v := range vms {
		if v.Live() {
			d := wire.DeletedVM{ID: v.ID, State: v.State, Kept: idle[v.ID]}
			if r := s.RunningInvocation(v.ID); r != nil {
				d.Invocation = r.ID
			}
			note(d)
		}
	}
	s.vmmPool.DropWhere(func(sb *standby) bool { return sb.VM.Fn.Name == name }, whyStandbyGone)
	s.ready.DropWhere(func(rc *readyClone) bool { return rc.VM.Fn.Name == name }, whyReadyGone)
	s.pool.EvictWhere(func(k *kept) bool { return k.Fn.Name == name }, "function deleted")
	g := s.fnGate(name)
	for deadline := time.Now().Add(s.cfg.BootTimeout); ; time.Sleep(20 * time.Millisecond) {
		for _, lv := range s.liveOf(name) {
			d := wire.DeletedVM{ID: lv.ID, State: catalog.StateBooting}
			if r := lv.Running.Load(); r != nil {
				d.Invocation = r.ID
			}
			if v, err := s.db.GetVM(ctx, lv.ID); err == nil {
				d.State = v.State
			}
			note(d)
			if err := s.endVM(ctx, lv.ID, lv.RunDir, whyCascade); err != nil {
				return nil, err
			}
		}
		starting, err := s.startingVMs(ctx, name)
		if err != nil {
			return nil, err
		}
		if len(starting) == 0 && g.TryLock() {
			if len(s.liveOf(name)) == 0 {
				break
			}
			g.Unlock()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: function %q: VMs still starting after %s (%s); nothing else was deleted, try again",
				ErrConflict, name, s.cfg.BootTimeout, listSome(starting))
		}
	}
	// What is left are records of VMs that ended (failed, stopped).
	if vms, err = s.functionVMs(ctx, name); err != nil {
		g.Unlock()
		return nil, err
	}
	for _, v := range vms {
		note(wire.DeletedVM{ID: v.ID, State: v.State})
		_ = os.RemoveAll(v.RunDir)
		if err := s.db.DeleteVM(ctx, v.ID); err != nil && !errors.Is(err, ErrNotFound) {
			g.Unlock()
			return nil, err
		}
	}
	return g, nil
}

// startingVMs are function's VMs the catalog records live without a VMM
// here yet (a start between its record and its process).
func (s *Service) startingVMs(ctx context.Context, name string) ([]string, error) {
	vms, err := s.functionVMs(ctx, name)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range vms {
		if _, live := s.live(v.ID); v.Live() && !live {
			ids = append(ids, v.ID)
		}
	}
	return ids, nil
}

// deleteFunctionSnapshots deletes every snapshot of function, pinned ones
// too, with their memory store copies.
func (s *Service) deleteFunctionSnapshots(ctx context.Context, name string, out *FunctionDeletion) error {
	snaps, err := s.db.ListSnapshots(ctx, name)
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		d := wire.DeletedSnapshot{ID: sn.ID, Version: max(sn.Version, 0), Pinned: sn.Pinned}
		if s.store != nil {
			if _, err := s.store.Get(sn.ID); err == nil {
				d.Stored = true
			}
		}
		if err := s.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("function %q: snapshot %s: %w", name, sn.ID, err)
		}
		out.Snapshots = append(out.Snapshots, d)
	}
	return nil
}

// forgetFunction removes a function's record, versions, aliases and code
// whatever uses it (a pull undoing the function it created, a refresh
// replacing an outdated copy: they cleared the rest).
func (s *Service) forgetFunction(ctx context.Context, name string) error {
	return s.dropFunction(ctx, name, &FunctionDeletion{})
}

// dropFunction removes the function's versions and aliases, its record
// and its code (the function's and its versions' code directories).
func (s *Service) dropFunction(ctx context.Context, name string, out *FunctionDeletion) error {
	f, err := s.db.GetFunction(ctx, name)
	if err != nil {
		return err
	}
	vs, err := s.db.ListVersions(ctx, name)
	if err != nil {
		return err
	}
	aliases, err := s.db.ListAliases(ctx, name)
	if err != nil {
		return err
	}
	dirs := []string{filepath.Dir(f.CodeDir)}
	for _, v := range vs {
		out.Versions = append(out.Versions, v.Number)
		if d := filepath.Dir(v.Config.CodeDir); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, a := range aliases {
		out.Aliases = append(out.Aliases, a.Name)
	}
	if err := s.db.DeleteFunctionVersions(ctx, name); err != nil {
		return err
	}
	if err := s.db.DeleteFunction(ctx, name); err != nil {
		return err
	}
	s.functions.KickDepsGC() // its layers may be unused now
	for _, v := range vs {
		s.versions.ClearStale(name, v.Number)
	}
	var errs []error
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("function %q: remove its code: %w", name, err))
			continue
		}
		out.CodeDirs++
	}
	return errors.Join(errs...)
}
