package daemon

import (
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// markIdle sets IdleUntil on each of vms that the keep-alive pool keeps:
// when its keep-alive time runs out.
func (s *Service) markIdle(vms ...*catalog.VM) {
	until := map[string]time.Time{}
	s.pool.mu.Lock()
	for _, list := range s.pool.idle {
		for _, k := range list {
			until[k.lv.id] = k.since.Add(s.keepAlive(k.lv.fn))
		}
	}
	s.pool.mu.Unlock()
	for _, v := range vms {
		if t, ok := until[v.ID]; ok && v.State == catalog.StateRunning {
			v.IdleUntil = t
		}
	}
}
