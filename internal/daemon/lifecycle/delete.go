package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
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

// DeleteFunction deletes a function that nothing uses (DeleteFunctionWith
// without cascade).
func (m *Manager) DeleteFunction(ctx context.Context, name string) error {
	_, err := m.DeleteFunctionWith(ctx, name, false)
	return err
}

// DeleteFunctionWith deletes a function, with cascade everything of it
// first, and says what went.
func (m *Manager) DeleteFunctionWith(ctx context.Context, name string, cascade bool) (*wire.FunctionDeletion, error) {
	t0 := time.Now()
	if _, err := m.d.GetFunction(ctx, name); err != nil {
		return nil, err
	}
	end, err := m.BeginDelete(name)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx = context.WithoutCancel(ctx) // half a delete helps nobody: it ends even if its caller went away
	out := &wire.FunctionDeletion{Function: name, VMs: []wire.DeletedVM{}, Snapshots: []wire.DeletedSnapshot{},
		Versions: []int{}, Aliases: []string{}}
	if !cascade {
		if err := m.inUse(ctx, name); err != nil {
			return nil, err
		}
	} else {
		gate, err := m.stopVMs(ctx, name, out)
		if err != nil {
			return nil, err
		}
		defer gate.Unlock()
		if err := m.deleteSnapshots(ctx, name, out); err != nil {
			return nil, err
		}
	}
	if err := m.drop(ctx, name, out); err != nil {
		return nil, err
	}
	out.MS = ms(time.Since(t0))
	m.log.Info("function deleted", "function", name, "cascade", cascade, "vms", len(out.VMs), "snapshots", len(out.Snapshots),
		"versions", len(out.Versions), "aliases", len(out.Aliases), "ms", out.MS)
	return out, nil
}

// inUse is nil if nothing uses the function, else a conflict that lists
// every VM, snapshot and version that does.
func (m *Manager) inUse(ctx context.Context, name string) error {
	var uses []string
	vms, err := m.liveUses(ctx, name)
	if err != nil {
		return err
	}
	if len(vms) > 0 {
		uses = append(uses, counted(len(vms), "VM", "VMs")+" ("+listSome(vms)+")")
	}
	snaps, err := m.d.Catalog.ListSnapshots(ctx, name)
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
	vs, err := m.versionUses(ctx, name)
	if err != nil {
		return err
	}
	if vs != "" {
		uses = append(uses, vs)
	}
	if len(uses) == 0 {
		return nil
	}
	return fmt.Errorf("%w: function %q is in use: %s; delete it with --cascade (thaw function delete %s --cascade; the API's ?cascade=true) to remove them all with it",
		errdefs.ErrConflict, name, strings.Join(uses, ", "), name)
}

// liveUses are the function's live VMs, each with what it is doing.
func (m *Manager) liveUses(ctx context.Context, name string) ([]string, error) {
	vms, err := m.functionVMs(ctx, name)
	if err != nil {
		return nil, err
	}
	idle := m.d.Kept(name)
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
		case m.d.Running(v.ID) != "":
			what = v.ID + " running an invocation"
		}
		live = append(live, what)
	}
	return live, nil
}

// versionUses says which versions and how many aliases the function has
// ("" if none).
func (m *Manager) versionUses(ctx context.Context, name string) (string, error) {
	vs, err := m.d.Catalog.ListVersions(ctx, name)
	if err != nil || len(vs) == 0 {
		return "", err
	}
	var ns []string
	for _, v := range vs {
		ns = append(ns, strconv.Itoa(v.Number))
	}
	aliases, err := m.d.Catalog.ListAliases(ctx, name)
	if err != nil {
		return "", err
	}
	what := counted(len(vs), "version", "versions") + " (" + listSome(ns) + ")"
	if len(aliases) > 0 {
		what += " and " + counted(len(aliases), "alias", "aliases")
	}
	return what, nil
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
func (m *Manager) functionVMs(ctx context.Context, name string) ([]*catalog.VM, error) {
	vms, err := m.d.Catalog.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(vms, func(v *catalog.VM) bool { return v.Function != name }), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
