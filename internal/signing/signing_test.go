package signing

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func newKey(t testing.TB) *Key {
	t.Helper()
	k, err := GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func reason(err error) Reason {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// A sealed record opens to its exact bytes with its signer; every way of
// getting another record past Open is refused with its reason, and is
// ErrUntrusted.
func TestSealOpen(t *testing.T) {
	a, b, stranger := newKey(t), newKey(t), newKey(t)
	ring := NewKeyring(a.Public(), b.Public())
	payload := []byte(`{"magic":"thaw-function","name":"hello"}`)
	const kind, obj = "function", "functions/hello.json"
	env, err := Seal(a, kind, obj, payload)
	if err != nil {
		t.Fatal(err)
	}
	got, signer, err := Open(ring, kind, obj, env)
	if err != nil || !bytes.Equal(got, payload) || signer.ID() != a.Public().ID() {
		t.Fatalf("open: %q by %s, %v", got, signer.ID(), err)
	}

	edit := func(f func(*Envelope)) []byte {
		var e Envelope
		if err := json.Unmarshal(env, &e); err != nil {
			t.Fatal(err)
		}
		f(&e)
		out, _ := json.Marshal(e)
		return out
	}
	byStranger, _ := Seal(stranger, kind, obj, payload)
	otherObject, _ := Seal(a, kind, "functions/other.json", payload)
	otherKind, _ := Seal(a, "manifest", obj, payload)
	for _, c := range []struct {
		name string
		b    []byte
		want Reason
	}{
		{"bare record", payload, Unsigned},
		{"not JSON", []byte("\x00\x01garbage"), Malformed},
		{"unknown field", bytes.Replace(env, []byte(`"magic"`), []byte(`"extra":1,"magic"`), 1), Malformed},
		{"data after the envelope", append(append([]byte(nil), env...), '}'), Malformed},
		{"future version", edit(func(e *Envelope) { e.Version = 2 }), Malformed},
		{"key id not hex", edit(func(e *Envelope) { e.KeyID = "\x1b[2J" + e.KeyID[5:] }), Malformed},
		{"kind with controls", edit(func(e *Envelope) { e.Kind = "function\x1b" }), Malformed},
		{"unknown key", byStranger, UnknownKey},
		{"payload changed", edit(func(e *Envelope) { e.Payload = bytes.Replace(e.Payload, []byte("hello"), []byte("hellp"), 1) }), BadSignature},
		{"payload grown", edit(func(e *Envelope) { e.Payload = append(e.Payload, ' ') }), BadSignature},
		{"signature cut", edit(func(e *Envelope) { e.Signature = e.Signature[:10] }), BadSignature},
		{"key id of another trusted key", edit(func(e *Envelope) { e.KeyID = b.Public().ID() }), BadSignature},
		{"object name rewritten", edit(func(e *Envelope) { e.Object = "functions/hello.json"; e.Kind = kind }), ""},
		{"moved to another object", otherObject, WrongObject},
		{"another kind", otherKind, WrongObject},
		{"rewritten to claim this object", func() []byte {
			var e Envelope
			_ = json.Unmarshal(otherObject, &e)
			e.Object = obj
			out, _ := json.Marshal(e)
			return out
		}(), BadSignature},
	} {
		_, _, err := Open(ring, kind, obj, c.b)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrUntrusted) || reason(err) != c.want {
			t.Errorf("%s: %v (reason %q), want %s", c.name, err, reason(err), c.want)
		} else if !strings.Contains(err.Error(), obj) {
			t.Errorf("%s: %q does not name the object", c.name, err)
		}
	}
	if _, _, err := Open(nil, kind, obj, env); reason(err) != UnknownKey {
		t.Errorf("open with no keyring: %v", err)
	}
	if _, err := Seal(a, "Bad Kind", obj, payload); err == nil {
		t.Error("sealed with a bad kind")
	}
}

// Payload reads what a record says without trusting it: an envelope's
// payload, a bare record as it is; a damaged envelope is an error.
func TestPayload(t *testing.T) {
	k := newKey(t)
	env, _ := Seal(k, "manifest", "snapshots/snap-a/manifest.json", []byte(`{"id":"snap-a"}`))
	if p, err := Payload(env); err != nil || string(p) != `{"id":"snap-a"}` {
		t.Fatalf("payload of an envelope: %q %v", p, err)
	}
	if Signer(env) != k.Public().ID() || Signer([]byte(`{"id":1}`)) != "" {
		t.Fatal("signer")
	}
	if p, err := Payload([]byte(`{"magic":"thaw-function"}`)); err != nil || string(p) != `{"magic":"thaw-function"}` {
		t.Fatalf("payload of a bare record: %q %v", p, err)
	}
	if _, err := Payload([]byte(`{"magic":"thaw-signed","payload":"!!"}`)); reason(err) != Malformed {
		t.Fatalf("payload of a damaged envelope: %v", err)
	}
}

func TestPublicKeyLines(t *testing.T) {
	k := newKey(t).Public()
	k.Comment = "node-1 in rack 4"
	p, err := ParsePublicKey(k.String())
	if err != nil || p.ID() != k.ID() || p.Comment != k.Comment || len(k.ID()) != 16 {
		t.Fatalf("round trip of %q: %+v %v", k.String(), p, err)
	}
	for _, bad := range []string{"", "thaw-ed25519", "ssh-ed25519 AAAA", "thaw-ed25519 AAAA", "thaw-ed25519 " + strings.Repeat("A", 44) + "==="} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The key is created once, 0600, and read back the same; a key file
// others can read, a link, or anything but one ed25519 key is refused.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFileName)
	k, created, err := LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	again, created, err := LoadOrCreateKey(path)
	if err != nil || created || again.Public().ID() != k.Public().ID() {
		t.Fatalf("second start: %v %v", created, err)
	}
	// What a node signs, a node trusting its key verifies.
	env, _ := Seal(again, "manifest", "x", []byte("y"))
	if _, _, err := Open(NewKeyring(k.Public()), "manifest", "x", env); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []os.FileMode{0o640, 0o604} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateKey(path); !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %o: %v", mode, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // only root can give a file away
		if err := os.Chown(path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKeyFile(path); !errors.Is(err, ErrKeyFile) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("key of another user: %v", err)
		}
		if err := os.Chown(path, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKey(link); !errors.Is(err, ErrKeyFile) {
		t.Errorf("link: %v", err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	for name, content := range map[string]string{
		"empty":   "",
		"garbage": "not a key\n",
		"ecdsa":   string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKeyFile(p); !errors.Is(err, ErrKeyFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := LoadOrCreateKey(filepath.Join(dir, "absent", KeyFileName)); err == nil || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("key in a missing directory: %v", err)
	}
}

// Trusted keys come inline or from files with comments; bad lines are
// each reported with their line; a file others may write is refused.
func TestLoadTrusted(t *testing.T) {
	dir := t.TempDir()
	a, b, c := newKey(t).Public(), newKey(t).Public(), newKey(t).Public()
	a.Comment = "node-a"
	file := filepath.Join(dir, "trusted")
	body := "# the cluster's nodes\n\n" + a.String() + "\n  " + b.String() + "  \n"
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadTrusted([]string{file, c.String()})
	if err != nil || len(keys) != 3 {
		t.Fatalf("load: %d keys, %v", len(keys), err)
	}
	ring := NewKeyring(append(keys, a)...)
	if ring.Len() != 3 {
		t.Fatalf("ring of %d keys", ring.Len())
	}
	if k, ok := ring.Lookup(a.ID()); !ok || k.Comment != "node-a" {
		t.Fatalf("lookup: %+v %v", k, ok)
	}

	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte(a.String()+"\nssh-ed25519 AAAA me\nthaw-ed25519 short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadTrusted([]string{bad, "thaw-ed25519 nope", filepath.Join(dir, "absent")})
	for _, want := range []string{bad + ":2:", bad + ":3:", `trusted key "thaw-ed25519 nope"`, "absent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad trusted keys: %v lacks %q", err, want)
		}
	}
	if err := os.Chmod(file, 0o664); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTrusted([]string{file}); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("group-writable file: %v", err)
	}
}

// FuzzOpen: no input makes Open panic or accept bytes a trusted key did
// not sign for this object.
func FuzzOpen(f *testing.F) {
	k, _ := GenerateKey(bytes.NewReader(make([]byte, 64)))
	ring := NewKeyring(k.Public())
	good, _ := Seal(k, "manifest", "snapshots/snap-a/manifest.json", []byte(`{"id":"snap-a"}`))
	f.Add(good)
	f.Add([]byte(`{"magic":"thaw-signed","version":1}`))
	f.Add([]byte(`{"magic":"thaw-remote-snapshot"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, _, err := Open(ring, "manifest", "snapshots/snap-a/manifest.json", b)
		if err == nil && string(p) != `{"id":"snap-a"}` {
			t.Fatalf("accepted a payload nobody signed: %q", p)
		}
		_, _ = Payload(b)
	})
}

// BenchmarkSealOpen: what signing adds to a push and verifying to an
// import, for records of a few sizes (a remote manifest lists about 100
// bytes per chunk: 64 KiB is ~600 chunks, 300 MiB of non-zero data at
// 512 KiB chunks).
func BenchmarkSealOpen(b *testing.B) {
	k, _ := GenerateKey(nil)
	ring := NewKeyring(k.Public())
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		entry := []byte(`{"i":1,"sha256":"0123456789abcdef","stored":4096},`)
		payload := bytes.Repeat(entry, size/len(entry)+1)[:size]
		env, _ := Seal(k, "manifest", "snapshots/snap-a/manifest.json", payload)
		b.Run(fmt.Sprintf("seal/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := Seal(k, "manifest", "snapshots/snap-a/manifest.json", payload); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("open/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportMetric(float64(len(env))/float64(size), "stored/payload")
			for b.Loop() {
				if _, _, err := Open(ring, "manifest", "snapshots/snap-a/manifest.json", env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
