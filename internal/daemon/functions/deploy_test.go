package functions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/dirtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// claims is a fake of the daemon's name claims: it records which names a
// staged deploy holds.
type claims struct {
	held   map[string]int
	refuse error // what a claim returns instead, if set
}

func (c *claims) claim(name string) (func(), error) {
	if c.refuse != nil {
		return nil, c.refuse
	}
	c.held[name]++
	return func() { c.held[name]-- }, nil
}

// A deploy that leaves settings out takes them from the function's
// current configuration; what it sets wins. Its code is staged under the
// name's claim until it is built or discarded.
func TestStageDeployInheritsSettings(t *testing.T) {
	m, _ := newManager(t, nil)
	ctx := context.Background()
	setSecret(t, m, "tok", "s3cret-value")
	prev := &catalog.Function{Name: "app", MemoryMiB: 512, VCPUs: 2, MaxConcurrency: 3, KeepAliveS: -1, VMMPool: 2, VMMPoolTTLS: 30,
		Network: catalog.Network{Egress: string(vmnet.EgressFull)}, Env: map[string]string{"A": "1"}, Secrets: map[string]string{"TOKEN": "tok"}}
	c := &claims{held: map[string]int{}}
	st, err := m.StageDeploy(ctx, Spec{Name: "app", Archive: archive(t), VCPUs: 1, Env: map[string]string{"B": "2"}}, prev, c.claim)
	if err != nil {
		t.Fatal(err)
	}
	got := st.spec
	if got.MemoryMiB != 512 || got.VCPUs != 1 || got.MaxConcurrency != 3 || got.KeepAliveS != -1 || got.VMMPool != 2 || got.VMMPoolTTLS != 30 {
		t.Errorf("sizes: %+v", got)
	}
	if got.Network.Egress != vmnet.EgressFull || !maps.Equal(got.Env, map[string]string{"B": "2"}) || !maps.Equal(got.Secrets, prev.Secrets) {
		t.Errorf("network %+v, env %v, secrets %v", got.Network, got.Env, got.Secrets)
	}
	if c.held["app"] != 1 {
		t.Errorf("claims while staged: %v", c.held)
	}
	if _, err := os.Stat(filepath.Join(st.staging, "code", "app", "handler.py")); err != nil {
		t.Errorf("staged code: %v", err)
	}
	fn, done, err := st.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if fn.MemoryMiB != 512 || fn.KeepAliveS != -1 || fn.Network.Egress != string(vmnet.EgressFull) || fn.Env["B"] != "2" {
		t.Errorf("built %+v", fn)
	}
	if _, err := os.Stat(fn.Disk); err != nil {
		t.Errorf("code disk: %v", err)
	}
	st.Discard()
	if c.held["app"] != 0 {
		t.Errorf("claims after discard: %v", c.held)
	}
	// A new function (no current configuration) takes the defaults.
	st, err = m.StageDeploy(ctx, Spec{Name: "new", Archive: archive(t)}, nil, c.claim)
	if err != nil {
		t.Fatal(err)
	}
	if st.spec.MemoryMiB != 256 || st.spec.VCPUs != 1 || st.spec.Network.Egress != "" {
		t.Errorf("new function's settings: %+v", st.spec)
	}
	staging := st.staging
	st.Discard()
	if _, err := os.Stat(staging); !os.IsNotExist(err) || c.held["new"] != 0 {
		t.Errorf("discard left %s (%v), claims %v", staging, err, c.held)
	}
}

// A deploy whose name is claimed by a create, or whose settings or code
// are refused, stages nothing and holds no claim.
func TestStageDeployRefused(t *testing.T) {
	m, _ := newManager(t, nil)
	ctx := context.Background()
	c := &claims{held: map[string]int{}, refuse: fmt.Errorf("function %q is being created: %w", "app", errdefs.ErrExists)}
	if _, err := m.StageDeploy(ctx, Spec{Name: "app", Archive: archive(t)}, nil, c.claim); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a claimed name: %v", err)
	}
	c.refuse = nil
	if _, err := m.StageDeploy(ctx, Spec{Name: "app", Archive: archive(t), MemoryMiB: -5}, nil, c.claim); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("bad settings: %v", err)
	}
	noHandler := bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "main.py", Body: "x = 1\n"}))
	if _, err := m.StageDeploy(ctx, Spec{Name: "app", Archive: noHandler}, nil, c.claim); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("no handler.py: %v", err)
	}
	if c.held["app"] != 0 {
		t.Errorf("claims left: %v", c.held)
	}
	if left := dirtest.Names(t, m.FunctionsDir()); len(left) > 0 {
		t.Errorf("staging left: %v", left)
	}
}
