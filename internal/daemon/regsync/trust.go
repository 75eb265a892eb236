package regsync

import (
	"fmt"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/wire"
)

// The node's registry signing key and the keys whose records it accepts
// (docs/security.md, "The snapshot registry"): what it pushes is signed
// with its key; what it reads from the registry is used only when its
// own key or a key of Config.TrustedKeys signed it.

// openSigningKey loads the node's signing key from the data directory,
// creating it at first start.
func (s *Sync) openSigningKey() error {
	path := filepath.Join(s.cfg.DataDir, signing.KeyFileName)
	k, created, err := signing.LoadOrCreateKey(path)
	if err != nil {
		return fmt.Errorf("registry signing key: %w", err)
	}
	s.signKey = k
	if created {
		s.log.Info("registry signing key created", "key", k.Public().ID(), "path", path)
	}
	return nil
}

// registryTrust signs with the node's key and accepts it and the
// configured trusted keys.
func (s *Sync) registryTrust() (registry.Trust, error) {
	keys, err := signing.LoadTrusted(s.cfg.TrustedKeys)
	if err != nil {
		return registry.Trust{}, err
	}
	return registry.Trust{Signer: s.signKey, Keys: signing.NewKeyring(append(keys, s.signKey.Public())...),
		Refused: s.recordRefused}, nil
}

// recordRefused counts and logs a registry record refused for its
// signature.
func (s *Sync) recordRefused(kind, object string, r *signing.Refusal) {
	s.d.Metrics.RegistryRefused(kind, string(r.Reason))
	s.log.Warn("registry record refused: not signed by a trusted key for this object", "kind", kind, "object", object,
		"reason", string(r.Reason), "key", r.KeyID, "err", r.Detail)
}

// RegistryKey is the node's public signing key.
func (s *Sync) RegistryKey() signing.PublicKey { return s.signKey.Public() }

// KeyInfo is the node's key as GET /v1/info shows it.
func (s *Sync) KeyInfo() *wire.RegistryKey {
	k := s.RegistryKey()
	return &wire.RegistryKey{ID: k.ID(), PublicKey: k.String()}
}

// trustedKeyIDs are the ids of the keys whose records the node accepts.
func (s *Sync) trustedKeyIDs() []string {
	if s.registry == nil {
		return nil
	}
	return s.registry.Keys().IDs()
}

// CheckTrustedKeys is the daemon config's check of the trusted keys:
// they need a registry and must load.
func CheckTrustedKeys(reg *registry.Config, trusted []string) error {
	if len(trusted) == 0 {
		return nil
	}
	if reg == nil {
		return fmt.Errorf("registry trusted keys need a registry config")
	}
	_, err := signing.LoadTrusted(trusted)
	return err
}
