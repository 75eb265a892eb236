package daemon

import (
	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/wire"
)

// Info describes the daemon.
func (s *Service) Info() Info {
	strategies := make([]string, len(s.strategies))
	described := make([]wire.StrategyDescription, len(s.strategies))
	for i, st := range s.strategies {
		strategies[i], described[i] = string(st.Kind), st.Describe()
	}
	i := Info{Version: buildinfo.Version, APIVersion: APIVersion, Accel: s.accel, Image: guestImage(s.image),
		VMM:     wire.VMMInfo{Name: s.cfg.VMM.Name(), Version: s.vmmVersion, Machine: s.cfg.VMM.MachineABI()},
		DataDir: s.cfg.DataDir, Strategies: strategies, StrategyDetails: described, HugePageHint: s.cfg.HugePageHint, TSCKHz: s.tscKHz}
	i.Registry = s.reg.RegistryInfo()
	i.RegistryKey = s.reg.KeyInfo()
	i.Limits = s.limits()
	return i
}
