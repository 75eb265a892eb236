package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
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

// whySecretChanged stops idle VMs holding a secret's old value.
const whySecretChanged = "secret changed"

// secretErr maps the store's errors to the service's.
func secretErr(err error) error {
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	case errors.Is(err, secrets.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return err
}

// SetSecret stores a secret's value (a new secret, or its next version).
// Idle VMs of the functions that use it are stopped, so that no
// invocation after this one sees the old value; running ones are not
// kept idle afterwards (park).
func (s *Service) SetSecret(ctx context.Context, name string, value []byte) (info SecretInfo, created bool, err error) {
	info, created, err = s.secrets.Set(name, value, time.Now().UTC())
	if err != nil {
		return SecretInfo{}, false, secretErr(err)
	}
	s.pool.EvictWhere(func(k *kept) bool { return fnconfig.Uses(k.Fn.Secrets, name) }, whySecretChanged)
	s.log.Info("secret set", "secret", name, "version", info.Version)
	return info, created, nil
}

// GetSecret returns what may be shown of a secret.
func (s *Service) GetSecret(_ context.Context, name string) (SecretInfo, error) {
	info, err := s.secrets.Get(name)
	return info, secretErr(err)
}

// ListSecrets returns what may be shown of every secret, by name.
func (s *Service) ListSecrets(context.Context) ([]SecretInfo, error) { return s.secrets.List(), nil }

// DeleteSecret removes a secret no function references.
func (s *Service) DeleteSecret(ctx context.Context, name string) error {
	if err := secrets.ValidName(name); err != nil {
		return secretErr(err)
	}
	s.secretRefs.Lock() // no function comes to reference it meanwhile
	defer s.secretRefs.Unlock()
	users, err := s.secretUsers(ctx, name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: secret %q is used by function(s) %s; delete them first", ErrConflict, name, strings.Join(users, ", "))
	}
	if err := s.secrets.Delete(name); err != nil {
		return secretErr(err)
	}
	s.log.Info("secret deleted", "secret", name)
	return nil
}

// missingSecrets says which secrets refs name that the store lacks.
func (s *Service) missingSecrets(refs map[string]string) error {
	if len(refs) == 0 {
		return nil
	}
	if missing := s.secrets.Missing(fnconfig.SecretNames(refs)); len(missing) > 0 {
		return fmt.Errorf("no secret %s on this node; set it first (thaw secret set NAME)", strings.Join(missing, ", "))
	}
	return nil
}

// putFunction records a new function, its secret references checked
// again under the lock DeleteSecret holds, so no secret goes while a
// function comes to reference it.
func (s *Service) putFunction(ctx context.Context, f *catalog.Function) error {
	s.secretRefs.Lock()
	defer s.secretRefs.Unlock()
	if err := s.missingSecrets(f.Secrets); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.db.PutFunction(ctx, f)
}

// secretEnv is what a restored VM of fn gets: each referenced secret's
// current value under its environment name (sorted by name), and the
// digests delivered, by secret.
func (s *Service) secretEnv(fn *catalog.Function) ([]agent.EnvVar, map[string]string, error) {
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
	vals, err := s.secrets.Values(names)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: function %s: %v; set it on this node", ErrConflict, fn.Name, err)
	}
	env := make([]agent.EnvVar, len(vals))
	digests := make(map[string]string, len(vals))
	for i, v := range vals {
		env[i] = agent.EnvVar{Name: envNames[i], Value: v.Value}
		digests[v.Name] = v.Digest
	}
	return env, digests, nil
}

// secretsStale says whether a VM holds a secret value that has changed
// since it was delivered (such a VM is not kept idle).
func (s *Service) secretsStale(lv *liveVM) bool {
	for name, digest := range lv.secretDigests {
		if s.secrets.Digest(name) != digest {
			return true
		}
	}
	return false
}

// scanForSecrets searches every file under dir for every secret value the
// store holds (scan.go in package secrets) before what is published; a
// find is ErrConflict naming the secret and the file, never the value.
func (s *Service) scanForSecrets(ctx context.Context, dir, what string) error {
	sc := s.secrets.Scanner()
	if sc.Empty() {
		return nil
	}
	t := time.Now()
	err := sc.Dir(ctx, dir)
	s.log.Info("secret scan", "what", what, "secrets", s.secrets.Len(), "scan_ms", ms(time.Since(t)), "found", errors.Is(err, secrets.ErrFound))
	if errors.Is(err, secrets.ErrFound) {
		return fmt.Errorf("%w: %s: %w; a snapshot must not hold a secret, so nothing was published", ErrConflict, what, err)
	}
	if err != nil {
		return fmt.Errorf("%s: secret scan: %w", what, err)
	}
	return nil
}

// checkBootEnv checks that a booted guest's agent set fn's environment
// before it imported the handler (an agent before protocol 3 sets none).
func (s *Service) checkBootEnv(ctx context.Context, lv *liveVM) error {
	if len(lv.fn.Env) == 0 {
		return nil
	}
	r, err := lv.agent.Ping(ctx)
	if err != nil {
		return err
	}
	if r.Env == nil || *r.Env != len(lv.fn.Env) {
		got := "none"
		if r.Env != nil {
			got = fmt.Sprint(*r.Env)
		}
		return fmt.Errorf("the guest agent set %s of the function's %d environment variables: the guest image's agent predates them; rebuild the image", got, len(lv.fn.Env))
	}
	return nil
}

// publishVersion publishes a deploy's version, its secret references
// checked again under the lock DeleteSecret holds (as putFunction does).
func (s *Service) publishVersion(ctx context.Context, p catalog.Publish) (*catalog.Version, error) {
	s.secretRefs.Lock()
	defer s.secretRefs.Unlock()
	if err := s.missingSecrets(p.Function.Secrets); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.db.PublishVersion(ctx, p)
}

// secretUsers names the functions, and the versions of them that can
// still be invoked, that reference secret.
func (s *Service) secretUsers(ctx context.Context, secret string) ([]string, error) {
	fns, err := s.db.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, f := range fns {
		if fnconfig.Uses(f.Secrets, secret) {
			users = append(users, f.Name)
		}
		vs, err := s.db.ListVersions(ctx, f.Name)
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

// RotateSecretKey seals the secret store of dataDir under a new key
// (secrets.Store.RotateKey) while no daemon uses the directory: it takes
// the data directory's lock, so a running daemon makes it fail.
func RotateSecretKey(dataDir string) error {
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	st, err := secrets.Open(dataDir)
	if err != nil {
		return err
	}
	return st.RotateKey()
}
