package functions

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/fnconfig"
	"github.com/thaw-dev/thaw/internal/secrets"
)

// Secrets (package secrets) in the service: the store in the data
// directory, the API's operations on it, what a restore delivers to the
// guest, and the scan that keeps every secret value out of the snapshots
// this daemon publishes. A booted VM never gets a secret, so a snapshot
// holds none; a restored VM gets its function's secrets with the restore
// request, read from the store at that moment, so a changed secret takes
// effect at the next cold start without a new snapshot.

// SecretInfo is what the API shows of a secret: never its value.
type SecretInfo = secrets.Info

// secretErr maps the store's errors to the service's.
func secretErr(err error) error {
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		return fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	case errors.Is(err, secrets.ErrNotFound):
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	return err
}

// SetSecret stores a secret's value (a new secret, or its next version).
// Idle VMs of the functions that use it are stopped, so that no
// invocation after this one sees the old value; running ones are not
// kept idle afterwards (SecretsStale).
func (m *Manager) SetSecret(ctx context.Context, name string, value []byte) (info SecretInfo, created bool, err error) {
	info, created, err = m.secrets.Set(name, value, time.Now().UTC())
	if err != nil {
		return SecretInfo{}, false, secretErr(err)
	}
	m.d.SecretChanged(name)
	m.log.Info("secret set", "secret", name, "version", info.Version)
	return info, created, nil
}

// GetSecret returns what may be shown of a secret.
func (m *Manager) GetSecret(_ context.Context, name string) (SecretInfo, error) {
	info, err := m.secrets.Get(name)
	return info, secretErr(err)
}

// ListSecrets returns what may be shown of every secret, by name.
func (m *Manager) ListSecrets(context.Context) ([]SecretInfo, error) { return m.secrets.List(), nil }

// DeleteSecret removes a secret no function references.
func (m *Manager) DeleteSecret(ctx context.Context, name string) error {
	if err := secrets.ValidName(name); err != nil {
		return secretErr(err)
	}
	m.secretRefs.Lock() // no function comes to reference it meanwhile
	defer m.secretRefs.Unlock()
	users, err := m.secretUsers(ctx, name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: secret %q is used by function(s) %s; delete them first", errdefs.ErrConflict, name, strings.Join(users, ", "))
	}
	if err := m.secrets.Delete(name); err != nil {
		return secretErr(err)
	}
	m.log.Info("secret deleted", "secret", name)
	return nil
}

// MissingSecrets says which secrets refs name that the store lacks.
func (m *Manager) MissingSecrets(refs map[string]string) error {
	if len(refs) == 0 {
		return nil
	}
	if missing := m.secrets.Missing(fnconfig.SecretNames(refs)); len(missing) > 0 {
		return fmt.Errorf("no secret %s on this node; set it first (thaw secret set NAME)", strings.Join(missing, ", "))
	}
	return nil
}

// PutFunction records a new function, its secret references checked
// again under the lock DeleteSecret holds, so no secret goes while a
// function comes to reference it.
func (m *Manager) PutFunction(ctx context.Context, f *catalog.Function) error {
	m.secretRefs.Lock()
	defer m.secretRefs.Unlock()
	if err := m.MissingSecrets(f.Secrets); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	return m.d.Catalog.PutFunction(ctx, f)
}

// PublishVersion publishes a deploy's version, its secret references
// checked again under the lock DeleteSecret holds (as PutFunction does).
func (m *Manager) PublishVersion(ctx context.Context, p catalog.Publish) (*catalog.Version, error) {
	m.secretRefs.Lock()
	defer m.secretRefs.Unlock()
	if err := m.MissingSecrets(p.Function.Secrets); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	return m.d.Catalog.PublishVersion(ctx, p)
}

// SecretEnv is what a restored VM of fn gets: each referenced secret's
// current value under its environment name (sorted by name), and the
// digests delivered, by secret.
func (m *Manager) SecretEnv(fn *catalog.Function) ([]agent.EnvVar, map[string]string, error) {
	if len(fn.Secrets) == 0 {
		return nil, nil, nil
	}
	envNames := make([]string, 0, len(fn.Secrets))
	for k := range fn.Secrets {
		envNames = append(envNames, k)
	}
	sort.Strings(envNames)
	names := make([]string, len(envNames))
	for i, k := range envNames {
		names[i] = fn.Secrets[k]
	}
	vals, err := m.secrets.Values(names)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: function %s: %v; set it on this node", errdefs.ErrConflict, fn.Name, err)
	}
	env := make([]agent.EnvVar, len(vals))
	digests := make(map[string]string, len(vals))
	for i, v := range vals {
		env[i] = agent.EnvVar{Name: envNames[i], Value: v.Value}
		digests[v.Name] = v.Digest
	}
	return env, digests, nil
}

// SecretsStale says whether a VM that was delivered secrets with these
// digests (SecretEnv) holds a value that has changed since (such a VM is
// not kept idle).
func (m *Manager) SecretsStale(delivered map[string]string) bool {
	for name, digest := range delivered {
		if m.secrets.Digest(name) != digest {
			return true
		}
	}
	return false
}

// ScanForSecrets searches every file under dir for every secret value the
// store holds (scan.go in package secrets) before what is published; a
// find is ErrConflict naming the secret and the file, never the value.
func (m *Manager) ScanForSecrets(ctx context.Context, dir, what string) error {
	sc := m.secrets.Scanner()
	if sc.Empty() {
		return nil
	}
	t := time.Now()
	err := sc.Dir(ctx, dir)
	m.log.Info("secret scan", "what", what, "secrets", m.secrets.Len(), "scan_ms", ms(time.Since(t)), "found", errors.Is(err, secrets.ErrFound))
	if errors.Is(err, secrets.ErrFound) {
		return fmt.Errorf("%w: %s: %w; a snapshot must not hold a secret, so nothing was published", errdefs.ErrConflict, what, err)
	}
	if err != nil {
		return fmt.Errorf("%s: secret scan: %w", what, err)
	}
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Pinger asks a guest's agent how it is (*agent.Conn).
type Pinger interface {
	Ping(ctx context.Context) (*agent.Reply, error)
}

// CheckBootEnv checks that a booted guest's agent set fn's environment
// before it imported the handler (an agent before protocol 3 sets none).
func (m *Manager) CheckBootEnv(ctx context.Context, fn *catalog.Function, guest Pinger) error {
	if len(fn.Env) == 0 {
		return nil
	}
	r, err := guest.Ping(ctx)
	if err != nil {
		return err
	}
	if r.Env == nil || *r.Env != len(fn.Env) {
		got := "none"
		if r.Env != nil {
			got = fmt.Sprint(*r.Env)
		}
		return fmt.Errorf("the guest agent set %s of the function's %d environment variables: the guest image's agent predates them; rebuild the image", got, len(fn.Env))
	}
	return nil
}

// secretUsers names the functions, and the versions of them that can
// still be invoked, that reference secret.
func (m *Manager) secretUsers(ctx context.Context, secret string) ([]string, error) {
	fns, err := m.d.Catalog.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, f := range fns {
		if fnconfig.Uses(f.Secrets, secret) {
			users = append(users, f.Name)
		}
		vs, err := m.d.Catalog.ListVersions(ctx, f.Name)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			if !v.Collected && fnconfig.Uses(v.Config.Secrets, secret) && !fnconfig.Uses(f.Secrets, secret) {
				users = append(users, fmt.Sprintf("%s (version %d)", f.Name, v.Number))
			}
		}
	}
	return users, nil
}
