// Package fnconfig is a function's configuration: its environment (plain
// variables, part of its snapshots: the guest agent sets them at boot,
// before the handler is imported) and its secret references (environment
// variables whose values come from the secret store, set only in VMs
// restored from a snapshot, never at boot). It validates both, writes the
// environment onto the function's code disk and folds it into the
// function's digest.
package fnconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/thaw-dev/thaw/internal/secrets"
)

// Bounds.
const (
	MaxEnv        = 128      // variables
	MaxEnvValue   = 32 << 10 // bytes of one value
	MaxEnvTotal   = 64 << 10 // bytes of every name and value together
	MaxSecretRefs = 64
	maxEnvName    = 128
)

// ReservedPrefix starts the names the guest keeps for itself.
const ReservedPrefix = "THAW_"

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName checks an environment variable's name.
func ValidEnvName(name string) error {
	switch {
	case len(name) > maxEnvName || !envNameRE.MatchString(name):
		return fmt.Errorf("environment variable name %.140q: use 1-%d letters, digits and '_', not starting with a digit", name, maxEnvName)
	case strings.HasPrefix(strings.ToUpper(name), ReservedPrefix):
		return fmt.Errorf("environment variable %s: names starting with %s are reserved", name, ReservedPrefix)
	}
	return nil
}

// Check validates a function's environment and secret references (env
// name -> secret name) and reports every problem at once. It does not
// look the secrets up.
func Check(env, refs map[string]string) error {
	var errs []error
	if len(env) > MaxEnv {
		errs = append(errs, fmt.Errorf("%d environment variables: at most %d", len(env), MaxEnv))
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		total += len(k) + len(v)
		if err := ValidEnvName(k); err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case len(v) > MaxEnvValue:
			errs = append(errs, fmt.Errorf("environment variable %s: value of %d bytes, at most %d", k, len(v), MaxEnvValue))
		case !utf8.ValidString(v):
			errs = append(errs, fmt.Errorf("environment variable %s: value is not UTF-8", k))
		case strings.IndexByte(v, 0) >= 0:
			errs = append(errs, fmt.Errorf("environment variable %s: value holds a NUL byte", k))
		}
	}
	if total > MaxEnvTotal {
		errs = append(errs, fmt.Errorf("environment of %d bytes: at most %d", total, MaxEnvTotal))
	}
	if len(refs) > MaxSecretRefs {
		errs = append(errs, fmt.Errorf("%d secret references: at most %d", len(refs), MaxSecretRefs))
	}
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if err := ValidEnvName(k); err != nil {
			errs = append(errs, fmt.Errorf("secret reference: %w", err))
			continue
		}
		if _, dup := env[k]; dup {
			errs = append(errs, fmt.Errorf("%s is both an environment variable and a secret reference", k))
		}
		if err := secrets.ValidName(refs[k]); err != nil {
			errs = append(errs, fmt.Errorf("secret reference %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// AssignmentError is an item of a NAME=VALUE list that Assignments
// refuses.
type AssignmentError struct {
	Item  string // the item; with Twice, the name
	Twice bool   // the name is given twice; else the item is not NAME=VALUE
}

func (e *AssignmentError) Error() string {
	if e.Twice {
		return e.Item + " is given twice"
	}
	return fmt.Sprintf("%q: want NAME=VALUE", e.Item)
}

// Assignments parses NAME=VALUE items (a function's environment, or its
// secret references ENV=SECRET) into a map, nil for none. An item without
// '=' or with an empty name, or a name given twice, is an
// *AssignmentError.
func Assignments(items []string) (map[string]string, error) {
	if len(items) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(items))
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, &AssignmentError{Item: it}
		}
		if _, dup := out[k]; dup {
			return nil, &AssignmentError{Item: k, Twice: true}
		}
		out[k] = v
	}
	return out, nil
}

// SecretNames are the distinct secrets refs names, sorted.
func SecretNames(refs map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range refs {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Uses says whether refs name the secret.
func Uses(refs map[string]string, secret string) bool {
	for _, n := range refs {
		if n == secret {
			return true
		}
	}
	return false
}

// Digest is a function's digest: its code tree's digest alone when the
// environment is empty (so functions without one keep the digest they
// always had), else SHA-256 over it and every variable, sorted. Snapshots
// record it, so a snapshot is never restored with an environment other
// than the one its memory was booted with.
func Digest(code string, env map[string]string) string {
	if len(env) == 0 {
		return code
	}
	h := sha256.New()
	fmt.Fprintf(h, "thaw function v1\x00code\x00%s\x00", code)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(h, "env\x00%s\x00%d\x00%s\x00", k, len(env[k]), env[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// On the code disk, beside the function's directory (whose name is a
// function name, so never this one): the guest agent reads it at boot.
const (
	DiskDir  = ".thaw"
	DiskFile = "config.json"
	// FormatVersion is the version of DiskFile's document.
	FormatVersion = 1
)

// diskConfig is DiskFile's document.
type diskConfig struct {
	Version int               `json:"version"`
	Env     map[string]string `json:"env"`
}

// WriteDisk writes the environment into root, the tree the code disk is
// built from (root/<function>/ holds the code). Nothing is written for an
// empty environment.
func WriteDisk(root string, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	b, err := json.Marshal(diskConfig{Version: FormatVersion, Env: env})
	if err != nil {
		return err
	}
	dir := filepath.Join(root, DiskDir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("function config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, DiskFile), b, 0o444); err != nil {
		return fmt.Errorf("function config: %w", err)
	}
	return nil
}
