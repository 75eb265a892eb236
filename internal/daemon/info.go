package daemon

import (
	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/internal/guestimage"
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

// guestImage is the guest image as the API answers it.
func guestImage(im *guestimage.Image) wire.GuestImage {
	out := wire.GuestImage{Dir: im.Dir, Format: im.Format, Hash: im.Hash, KernelVersion: im.KernelVersion,
		Cmdline: im.Cmdline, BuiltAt: im.BuiltAt, Files: map[string]wire.GuestImageFile{}}
	for name, f := range im.Files {
		out.Files[name] = wire.GuestImageFile{Size: f.Size, SHA256: f.SHA256}
	}
	return out
}
