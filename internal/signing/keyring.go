package signing

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
)

// Keyring is the set of public keys whose signatures a node accepts.
// Safe for concurrent reads once built.
type Keyring struct {
	keys map[string]PublicKey // by ID
}

// NewKeyring holds keys (a key given twice is held once).
func NewKeyring(keys ...PublicKey) *Keyring {
	r := &Keyring{keys: map[string]PublicKey{}}
	for _, k := range keys {
		if _, ok := r.keys[k.ID()]; !ok {
			r.keys[k.ID()] = k
		}
	}
	return r
}

// Lookup returns the key with id.
func (r *Keyring) Lookup(id string) (PublicKey, bool) {
	if r == nil {
		return PublicKey{}, false
	}
	k, ok := r.keys[id]
	return k, ok
}

// IDs lists the keys' ids, sorted.
func (r *Keyring) IDs() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.keys))
	for id := range r.keys {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Len is how many keys the ring holds.
func (r *Keyring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.keys)
}

// IsInline says whether a trusted-keys value is a key line rather than
// the path of a file of them.
func IsInline(value string) bool { return strings.HasPrefix(strings.TrimSpace(value), KeyType+" ") }

// LoadTrusted reads the trusted keys a node is configured with: each
// value is a key line (IsInline) or the path of a file of key lines
// (ReadKeysFile). Every problem is reported at once.
func LoadTrusted(values []string) ([]PublicKey, error) {
	var out []PublicKey
	var errs []error
	for _, v := range values {
		if IsInline(v) {
			k, err := ParsePublicKey(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("trusted key %q: %w", v, err))
				continue
			}
			out = append(out, k)
			continue
		}
		keys, err := ReadKeysFile(v)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, keys...)
	}
	return out, errors.Join(errs...)
}

// ReadKeysFile reads a file of trusted keys: one key line a line, blank
// lines and lines starting with # ignored. Anyone who can change the file
// chooses what the node runs, so a file (or a link to one) that group or
// others may write is refused. Every bad line is reported.
func ReadKeysFile(path string) ([]PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trusted keys: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("trusted keys: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("trusted keys %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("trusted keys %s: group or others may write it (mode %04o), and so choose the code this node runs: chmod go-w it", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("trusted keys %s: owned by uid %d, neither root nor the daemon's user", path, st.Uid)
	}
	var out []PublicKey
	var errs []error
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParsePublicKey(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("trusted keys %s:%d: %w", path, n, err))
			continue
		}
		out = append(out, k)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("trusted keys %s: %w", path, err))
	}
	return out, errors.Join(errs...)
}
