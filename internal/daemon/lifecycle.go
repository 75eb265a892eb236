package daemon

import (
	"context"
	"sync"

	"github.com/thaw-dev/thaw/internal/daemon/lifecycle"
	"github.com/thaw-dev/thaw/wire"
)

// Deleting functions and the claims on their names are the component in
// package daemon/lifecycle; this file wires it to the rest of the daemon
// and keeps its part of the Service's API.

// FunctionDeletion is what deleting a function removed.
type FunctionDeletion = wire.FunctionDeletion

// newLifecycle makes the lifecycle component (in open).
func (s *Service) newLifecycle() *lifecycle.Manager {
	return lifecycle.New(lifecycle.Config{BootTimeout: s.cfg.BootTimeout}, lifecycle.Deps{
		Catalog: s.db, Log: s.log, GetFunction: s.GetFunction,
		Live: func(name string) []lifecycle.LiveVM {
			var out []lifecycle.LiveVM
			for _, lv := range s.liveOf(name) {
				v := lifecycle.LiveVM{ID: lv.ID, RunDir: lv.RunDir}
				if r := lv.Running.Load(); r != nil {
					v.Invocation = r.ID
				}
				out = append(out, v)
			}
			return out
		},
		IsLive: func(id string) bool { _, ok := s.vms.Live(id); return ok },
		Running: func(id string) string {
			if r := s.RunningInvocation(id); r != nil {
				return r.ID
			}
			return ""
		},
		Kept: s.keptOf,
		DropPooled: func(name string) {
			s.vmmPool.DropWhere(func(sb *standby) bool { return sb.VM.Fn.Name == name }, whyStandbyGone)
			s.ready.DropWhere(func(rc *readyClone) bool { return rc.VM.Fn.Name == name }, whyReadyGone)
			s.pool.EvictWhere(func(k *kept) bool { return k.Fn.Name == name }, "function deleted")
		},
		EndVM: func(ctx context.Context, id, runDir string) error { return s.vms.End(ctx, id, runDir, whyCascade) },
		Gate:  func(name string) *sync.RWMutex { return s.fnGate(name) },
		Stored: func(id string) bool {
			st := s.snaps.Store()
			if st == nil {
				return false
			}
			_, err := st.Get(id)
			return err == nil
		},
		DeleteSnapshot: s.DeleteSnapshot,
		KickDepsGC:     func() { s.functions.KickDepsGC() },
		ClearStale:     func(name string, version int) { s.versions.ClearStale(name, version) },
	})
}

// DeleteFunction deletes a function that nothing uses (lifecycle.Manager).
func (s *Service) DeleteFunction(ctx context.Context, name string) error {
	return s.lifecycle.DeleteFunction(ctx, name)
}

// DeleteFunctionWith deletes a function, with cascade everything of it
// first, and says what went (lifecycle.Manager).
func (s *Service) DeleteFunctionWith(ctx context.Context, name string, cascade bool) (*FunctionDeletion, error) {
	return s.lifecycle.DeleteFunctionWith(ctx, name, cascade)
}

// keptOf are the ids of function's VMs idle in the keep-alive pool.
func (s *Service) keptOf(name string) map[string]bool {
	ids := map[string]bool{}
	s.pool.EachWhere(func(k *kept) bool { return k.Fn.Name == name }, func(k *kept) { ids[k.Rec.ID] = true })
	return ids
}

// liveOf are function's VMs with a VMM.
func (s *Service) liveOf(name string) []*liveVM { return s.vms.Of(name) }
