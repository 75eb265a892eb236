package functions

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/dirtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/secrets"
)

func setSecret(t *testing.T, m *Manager, name, value string) SecretInfo {
	t.Helper()
	info, _, err := m.SetSecret(context.Background(), name, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A function references only secrets the node has, and a secret goes
// only when no function and no live version references it.
func TestSecretReferencesAreChecked(t *testing.T) {
	m, _ := newManager(t, nil)
	ctx := context.Background()
	_, err := m.CreateFunction(ctx, Spec{Name: "app", Archive: archive(t), Secrets: map[string]string{"DB_PASSWORD": "db", "API": "api-key"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no secret api-key, db on this node") {
		t.Fatalf("missing secrets: %v", err)
	}
	_, err = m.CreateFunction(ctx, Spec{Name: "app", Archive: archive(t), Env: map[string]string{"THAW_X": "1", "A": "1"},
		Secrets: map[string]string{"A": "db"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "reserved") || !strings.Contains(err.Error(), "A is both") {
		t.Fatalf("bad config: %v", err)
	}
	if ents := dirtest.Names(t, m.FunctionsDir()); len(ents) != 0 {
		t.Errorf("refused creates left %v", ents)
	}
	setSecret(t, m, "db", "first-value-0001")
	for _, name := range []string{"app", "app2"} {
		if _, err := m.CreateFunction(ctx, Spec{Name: name, Archive: archive(t), Secrets: map[string]string{"PW": "db"}}); err != nil {
			t.Fatal(err)
		}
	}
	err = m.DeleteSecret(ctx, "db")
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "function(s) app, app2") {
		t.Fatalf("delete a secret in use: %v", err)
	}
	for _, fn := range []string{"app", "app2"} {
		if err := m.d.Catalog.DeleteFunction(ctx, fn); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DeleteSecret(ctx, "db"); err != nil {
		t.Fatalf("delete an unused secret: %v", err)
	}
	if err := m.DeleteSecret(ctx, "db"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete it again: %v", err)
	}
	if _, err := m.GetSecret(ctx, "db"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get a deleted secret: %v", err)
	}
	if _, _, err := m.SetSecret(ctx, "db", []byte("short")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a short value: %v", err)
	}
	p := catalog.Publish{Function: &catalog.Function{Name: "app", Secrets: map[string]string{"PW": "db"}}, Version: &catalog.Version{}}
	if _, err := m.PublishVersion(ctx, p); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "no secret db") {
		t.Errorf("publish a version referencing a missing secret: %v", err)
	}
}

// A set secret stops its users' idle VMs; a restore gets each referenced
// secret's current value, and a VM holding an old one is stale.
func TestSecretDelivery(t *testing.T) {
	m, f := newManager(t, nil)
	setSecret(t, m, "db", "first-value-0001")
	setSecret(t, m, "api", "api-value-000001")
	if !slices.Equal(f.changed, []string{"db", "api"}) {
		t.Errorf("SecretChanged called with %v", f.changed)
	}
	fn := &catalog.Function{Name: "app", Secrets: map[string]string{"Z_PW": "db", "A_KEY": "api"}}
	env, digests, err := m.SecretEnv(fn)
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 2 || env[0].Name != "A_KEY" || string(env[0].Value) != "api-value-000001" ||
		env[1].Name != "Z_PW" || string(env[1].Value) != "first-value-0001" {
		t.Errorf("env %+v", env)
	}
	if len(digests) != 2 || digests["db"] == "" || digests["api"] == "" || m.SecretsStale(digests) {
		t.Fatalf("digests %v (stale %v)", digests, m.SecretsStale(digests))
	}
	setSecret(t, m, "db", "second-value-002")
	if !m.SecretsStale(digests) {
		t.Error("a VM holding db's old value is not stale")
	}
	if env, d, err := m.SecretEnv(&catalog.Function{Name: "plain"}); env != nil || d != nil || err != nil {
		t.Errorf("a function without secrets: %v %v %v", env, d, err)
	}
	fn.Secrets["GONE"] = "missing"
	if _, _, err := m.SecretEnv(fn); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a secret missing at restore: %v", err)
	}
}

// A scan finds a secret's value in a file and names the secret, never
// the value; without secrets, or without a find, it passes.
func TestScanForSecrets(t *testing.T) {
	m, _ := newManager(t, nil)
	ctx := context.Background()
	dir := t.TempDir()
	const value = "s3cret-value-0001"
	if err := os.WriteFile(filepath.Join(dir, "memory"), []byte("pages...."+value+"...pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.ScanForSecrets(ctx, dir, "snapshot x"); err != nil {
		t.Fatalf("scan without secrets: %v", err)
	}
	setSecret(t, m, "token", value)
	err := m.ScanForSecrets(ctx, dir, "snapshot x")
	if !errors.Is(err, errdefs.ErrConflict) || !errors.Is(err, secrets.ErrFound) || !strings.Contains(err.Error(), `"token"`) ||
		strings.Contains(err.Error(), value) {
		t.Fatalf("scan = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory"), []byte("nothing here"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.ScanForSecrets(ctx, dir, "snapshot x"); err != nil {
		t.Fatalf("clean scan: %v", err)
	}
}

type pinger struct {
	env   *int
	calls int
}

func (p *pinger) Ping(context.Context) (*agent.Reply, error) {
	p.calls++
	return &agent.Reply{Env: p.env}, nil
}

// A booted guest must have set every variable of the function's
// environment; a function without one asks nothing.
func TestCheckBootEnv(t *testing.T) {
	m, _ := newManager(t, nil)
	ctx := context.Background()
	two, one := 2, 1
	fn := &catalog.Function{Name: "app", Env: map[string]string{"A": "1", "B": "2"}}
	if err := m.CheckBootEnv(ctx, fn, &pinger{env: &two}); err != nil {
		t.Errorf("all set: %v", err)
	}
	for _, p := range []*pinger{{env: &one}, {}} {
		if err := m.CheckBootEnv(ctx, fn, p); err == nil || !strings.Contains(err.Error(), "rebuild the image") {
			t.Errorf("agent set %v: %v", p.env, err)
		}
	}
	p := &pinger{}
	if err := m.CheckBootEnv(ctx, &catalog.Function{Name: "plain"}, p); err != nil || p.calls != 0 {
		t.Errorf("no environment: %v after %d pings", err, p.calls)
	}
}
