package secrets

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func setT(t *testing.T, s *Store, name, value string) Info {
	t.Helper()
	info, _, err := s.Set(name, []byte(value), now)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestStoreRoundTripsAndVersions(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if _, err := os.Stat(filepath.Join(dir, KeyFileName)); !os.IsNotExist(err) {
		t.Fatalf("key file exists before the first secret: %v", err)
	}
	info, created, err := s.Set("db-password", []byte("correct horse battery"), now)
	if err != nil || !created || info.Version != 1 || info.Name != "db-password" {
		t.Fatalf("first set: %+v created=%v err=%v", info, created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file after the first set: %v %v", fi, err)
	}
	info2, created, err := s.Set("db-password", []byte("staple battery horse"), now.Add(time.Hour))
	if err != nil || created || info2.Version != 2 || !info2.CreatedAt.Equal(now) || !info2.UpdatedAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("second set: %+v created=%v err=%v", info2, created, err)
	}
	if info2.Digest == info.Digest {
		t.Error("a new value kept its digest")
	}
	setT(t, s, "api_token", "tok-0123456789")

	// A second store over the same files sees the same secrets.
	r := openT(t, dir)
	got := r.List()
	if len(got) != 2 || got[0].Name != "api_token" || got[1] != info2 {
		t.Fatalf("reopened: %+v, want api_token and %+v", got, info2)
	}
	vals, err := r.Values([]string{"db-password", "api_token"})
	if err != nil || string(vals[0].Value) != "staple battery horse" || string(vals[1].Value) != "tok-0123456789" {
		t.Fatalf("values %+v %v", vals, err)
	}
	if err := r.Delete("api_token"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("api_token"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if err := r.Delete("api_token"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if got := openT(t, dir).List(); len(got) != 1 {
		t.Errorf("after delete the store holds %+v", got)
	}
	if m := r.Missing([]string{"db-password", "zz", "api_token"}); strings.Join(m, ",") != "api_token,zz" {
		t.Errorf("missing %v", m)
	}
}

func TestDigestIsKeyed(t *testing.T) {
	value := "same value in two stores"
	a, b := openT(t, t.TempDir()), openT(t, t.TempDir())
	da, db := setT(t, a, "x1234567", value).Digest, setT(t, b, "x1234567", value).Digest
	plain := sha256.Sum256([]byte(value))
	if da == db || da == hex.EncodeToString(plain[:]) || len(da) != 64 {
		t.Errorf("digests %s and %s of one value in two stores (plain SHA-256 %x): want keyed, different", da, db, plain)
	}
	if again := setT(t, a, "other-name", value).Digest; again != da {
		t.Errorf("one value, one store, two digests: %s %s", da, again)
	}
}

func TestStoreFileHoldsNoPlaintext(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	value := "plaintext-that-must-not-appear-9f8e7d"
	setT(t, s, "db", value)
	setT(t, s, "db", value+"-v2")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if bytes.Contains(b, []byte("plaintext-that-must")) {
			t.Errorf("%s holds the plaintext", e.Name())
		}
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left", e.Name())
		}
	}
}

func TestKeyFileIsRefusedWhenUnsafe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"group readable", func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, KeyFileName), 0o640) }, "mode 0640"},
		{"world readable", func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, KeyFileName), 0o604) }, "mode 0604"},
		{"symbolic link", func(t *testing.T, dir string) {
			key := filepath.Join(dir, KeyFileName)
			if err := os.Rename(key, key+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(key+".real", key); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"not hex", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, KeyFileName), []byte("zz\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "64 hex digits"},
		{"missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, KeyFileName)); err != nil {
				t.Fatal(err)
			}
		}, "restore the key file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			setT(t, openT(t, dir), "db", "a value of some length")
			tc.setup(t, dir)
			_, err := Open(dir)
			if !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: %v, want ErrKeyFile mentioning %q", err, tc.want)
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestDamagedOrForeignStoreIsRefused(t *testing.T) {
	dir := t.TempDir()
	setT(t, openT(t, dir), "db", "a value of some length")
	path := filepath.Join(dir, StoreFileName)
	good, _ := os.ReadFile(path)

	flipped := bytes.Clone(good)
	flipped[len(flipped)-5] ^= 1
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"flipped byte":   {flipped, ErrCorrupt},
		"truncated":      {good[:headerLen+3], ErrCorrupt},
		"not a store":    {[]byte("hello, world, this is not it at all....................."), ErrCorrupt},
		"future version": {append(append([]byte(magic), 0, 9), good[len(magic)+2:]...), ErrCorrupt},
	} {
		t.Run(name, func(t *testing.T) {
			openRefused(t, dir, path, tc.b, tc.want)
		})
	}
	// Another data directory's store under this key.
	other := t.TempDir()
	setT(t, openT(t, other), "db", "a value of some length")
	b, _ := os.ReadFile(filepath.Join(other, StoreFileName))
	openRefused(t, dir, path, b, ErrKeyFile)
}

func TestBadNamesAndValuesAreRefusedAndChangeNothing(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	setT(t, s, "kept", "the value that stays")
	before, _ := os.ReadFile(filepath.Join(dir, StoreFileName))
	for _, tc := range []struct{ name, value, want string }{
		{"", "long enough value", "secret name"},
		{"9starts-with-digit", "long enough value", "secret name"},
		{"has space", "long enough value", "secret name"},
		{strings.Repeat("a", 64), "long enough value", "secret name"},
		{"short", "1234567", "at least 8"},
		{"nul", "abc\x00defghij", "NUL byte at offset 3"},
		{"binary", "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8", "not UTF-8"},
		{"huge", strings.Repeat("x", MaxValueBytes+1), "at most"},
	} {
		_, _, err := s.Set(tc.name, []byte(tc.value), now)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("set %q: %v, want ErrInvalid mentioning %q", tc.name, err, tc.want)
		}
		if err != nil && len(tc.value) >= 8 && strings.Contains(err.Error(), tc.value) {
			t.Errorf("the error quotes the value: %v", err)
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, StoreFileName))
	if !bytes.Equal(before, after) {
		t.Error("refused sets rewrote the store")
	}
	if got := s.List(); len(got) != 1 || got[0].Version != 1 {
		t.Errorf("store after refused sets: %+v", got)
	}
}

func TestStoreIsBounded(t *testing.T) {
	s := openT(t, t.TempDir())
	for i := range MaxSecrets {
		if _, _, err := s.Set("s"+strings.Repeat("x", i%5)+hex.EncodeToString([]byte{byte(i)}), []byte("value of the secret"), now); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Set("one-more", []byte("value of the secret"), now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("set beyond the bound: %v", err)
	}
	// An existing one may still change.
	if _, _, err := s.Set("sx01", []byte("a new value here"), now); err != nil {
		t.Fatal(err)
	}
}

func TestScannerFollowsTheStore(t *testing.T) {
	s := openT(t, t.TempDir())
	if !s.Scanner().Empty() {
		t.Fatal("empty store, scanner not empty")
	}
	setT(t, s, "db", "first value 123")
	data := []byte("....first value 123....")
	if f := s.Scanner().Bytes(data); f == nil || f.Secret != "db" {
		t.Fatalf("found %+v", f)
	}
	setT(t, s, "db", "second value 456")
	if f := s.Scanner().Bytes(data); f != nil {
		t.Fatalf("an old value is still searched for: %+v", f)
	}
}

// FuzzOpenStore feeds arbitrary store files to the decoder: it refuses
// them with ErrCorrupt or ErrKeyFile, never anything else, and what it
// accepts passes the checks Set makes.
func FuzzOpenStore(f *testing.F) {
	k := deriveKeys(bytes.Repeat([]byte{7}, 32))
	good, err := seal(k, map[string]*entry{"db": newEntry(k, "db", []byte("a value of length"), 3, now, now)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:headerLen])
	f.Add([]byte(magic + "\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := open(k, b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrKeyFile) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		for name, e := range got {
			if ValidName(name) != nil || ValidValue(e.value) != nil || e.version < 1 {
				t.Fatalf("accepted a bad secret %q", name)
			}
		}
	})
}

// openRefused writes b to path, after which Open(dir) must fail with want.
func openRefused(t *testing.T, dir, path string, b []byte, want error) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, want) {
		t.Fatalf("open after writing %s: %v, want %v", filepath.Base(path), err, want)
	}
}

func TestRotateKey(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if err := s.RotateKey(); !errors.Is(err, ErrKeyFile) {
		t.Fatalf("rotate without a key: %v", err)
	}
	before := setT(t, s, "db", "the value that stays")
	oldKey, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
	if err := s.RotateKey(); err != nil {
		t.Fatal(err)
	}
	newKey, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
	after, _ := s.Get("db")
	if bytes.Equal(oldKey, newKey) || after.Digest == before.Digest || after.Version != before.Version {
		t.Fatalf("rotation: key changed %v, digest %s -> %s, version %d -> %d", !bytes.Equal(oldKey, newKey), before.Digest, after.Digest, before.Version, after.Version)
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("new key file %v %v", fi, err)
	}
	r := openT(t, dir)
	if v, err := r.Values([]string{"db"}); err != nil || string(v[0].Value) != "the value that stays" {
		t.Fatalf("after rotation: %v %v", v, err)
	}
	// The old key no longer opens it.
	openRefused(t, dir, filepath.Join(dir, KeyFileName), oldKey, ErrKeyFile)
}

// A rotation that stopped after the store was sealed under the new key,
// before the key was renamed, is finished by the next Open.
func TestInterruptedRotationIsFinished(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	setT(t, s, "db", "the value that stays")
	keyPath := filepath.Join(dir, KeyFileName)
	oldKey, _ := os.ReadFile(keyPath)
	if err := s.RotateKey(); err != nil {
		t.Fatal(err)
	}
	// Put the state back to "store sealed under the new key, new key not yet renamed".
	if err := os.Rename(keyPath, keyPath+newKeySuffix); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, oldKey, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatalf("open after an interrupted rotation: %v", err)
	}
	if v, err := r.Values([]string{"db"}); err != nil || string(v[0].Value) != "the value that stays" {
		t.Fatalf("values %v %v", v, err)
	}
	if _, err := os.Stat(keyPath + newKeySuffix); !os.IsNotExist(err) {
		t.Errorf("the new key was not renamed into place: %v", err)
	}
	openT(t, dir)
}

// What a crash leaves (a half-written store, a rotation's unused key) is
// removed at the next open, and the store is as it was.
func TestCrashLeftoversAreRemoved(t *testing.T) {
	dir := t.TempDir()
	setT(t, openT(t, dir), "db", "the value that stays")
	tmp := filepath.Join(dir, "."+StoreFileName+".tmp-123")
	newKey := filepath.Join(dir, KeyFileName+newKeySuffix)
	for _, p := range []string{tmp, newKey} {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := openT(t, dir)
	if v, err := s.Values([]string{"db"}); err != nil || string(v[0].Value) != "the value that stays" {
		t.Fatalf("values %v %v", v, err)
	}
	for _, p := range []string{tmp, newKey} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", filepath.Base(p), err)
		}
	}
}
