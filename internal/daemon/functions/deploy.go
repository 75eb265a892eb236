package functions

import (
	"context"
	"os"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// A deploy's code, staged here before the versions component builds and
// publishes it: the settings the deploy left out come from the function's
// current configuration, the name is claimed against creates, and the
// code is unpacked while the deploy's request lasts.

// Staged is a deploy's function with its code staged (the versions
// component's Code).
type Staged struct {
	m       *Manager
	spec    Spec
	staging string // the staged code; removed when the deploy ends
	release func() // the name's claim
}

// StageDeploy fills the settings spec left out from prev, the function's
// current configuration (nil for a new function), checks them, claims the
// name (claim keeps creates of it out while the deploy runs) and stages
// the code (reading an upload while its request lasts).
func (m *Manager) StageDeploy(ctx context.Context, spec Spec, prev *catalog.Function, claim func(name string) (release func(), err error)) (*Staged, error) {
	inheritSettings(&spec, prev)
	if _, err := m.CheckSpec(&spec); err != nil {
		return nil, err
	}
	c := &Staged{m: m, spec: spec}
	var err error
	if c.release, err = claim(spec.Name); err != nil {
		return nil, err
	}
	if c.staging, err = m.StageCode(ctx, spec); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// Build checks the function's settings again and builds its code's disk
// and dependency layer, which stays until done.
func (c *Staged) Build(ctx context.Context) (*catalog.Function, func(), error) {
	m := c.m
	netw, err := m.CheckSpec(&c.spec)
	if err != nil {
		return nil, nil, err
	}
	endDeps := m.Deps().Begin()
	done := func() { endDeps(); m.KickDepsGC() }
	cfg, err := m.BuildFunction(ctx, c.spec, netw, c.staging)
	if err != nil {
		done()
		return nil, nil, err
	}
	return cfg, done, nil
}

// Discard removes the staged code and releases the name.
func (c *Staged) Discard() {
	os.RemoveAll(c.staging)
	c.release()
}

// inheritSettings fills the settings a deploy left out from the
// function's current configuration.
func inheritSettings(spec *Spec, prev *catalog.Function) {
	if prev == nil {
		return
	}
	for _, f := range []struct{ dst, src *int }{{&spec.MemoryMiB, &prev.MemoryMiB}, {&spec.VCPUs, &prev.VCPUs},
		{&spec.MaxConcurrency, &prev.MaxConcurrency}, {&spec.KeepAliveS, &prev.KeepAliveS},
		{&spec.VMMPool, &prev.VMMPool}, {&spec.VMMPoolTTLS, &prev.VMMPoolTTLS}} {
		if *f.dst == 0 {
			*f.dst = *f.src
		}
	}
	if spec.Network.Egress == "" && len(spec.Network.Services) == 0 {
		spec.Network.Egress = vmnet.Egress(prev.Network.Egress)
		spec.Network.Services = prev.Network.Services
	}
	if spec.Env == nil {
		spec.Env = prev.Env
	}
	if spec.Secrets == nil {
		spec.Secrets = prev.Secrets
	}
}
