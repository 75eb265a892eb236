package api

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

// The peer-credentials test re-runs this test binary as another user; in
// that mode it only connects to the socket and reports what it got.
const peerHelperEnv = "THAW_API_TEST_PEER_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(peerHelperEnv); sock != "" {
		os.Exit(peerHelper(sock))
	}
	os.Exit(m.Run())
}

// peerHelper sends GET /v1/info over the socket, with a made-up Host and
// no token, and prints the status and body. Exit 3: could not connect.
func peerHelper(sock string) int {
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Printf("dial: %v\n", err)
		if errors.Is(err, syscall.EACCES) {
			return 3
		}
		return 1
	}
	defer c.Close()
	fmt.Fprint(c, "GET /v1/info HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		fmt.Printf("read: %v\n", err)
		return 1
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s", resp.StatusCode, b)
	return 0
}

// openDir is a temporary directory everyone may traverse (0755), as the
// socket's parent must be for other users to connect.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "thaw-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func needRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to %s", why)
	}
}

const nobody = 65534 // nobody:nogroup

// serveUnix serves a stubbed handler on a socket in dir, group gid.
func serveUnix(t *testing.T, path string, gid int) *recorder {
	t.Helper()
	ln, err := ListenUnix(path, gid)
	if err != nil {
		t.Fatal(err)
	}
	h, rec := recordingHandler(Options{Token: testToken})
	srv := &http.Server{Handler: h, ConnContext: h.ConnContext}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return rec
}

// runAs runs the test binary's peer helper as uid:gid (no supplementary
// groups) against sock.
func runAs(t *testing.T, bin, sock string, uid, gid uint32) (*exec.Cmd, string, error) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{peerHelperEnv + "=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.Output()
	return cmd, string(out), err
}

// TestUnixSocketPeerCredentials connects as uid 65534 from another process
// and checks the route saw that uid, gid and pid (from SO_PEERCRED, not
// from anything the client sent), without a token and whatever its Host;
// and that a user outside the socket's group cannot connect at all.
func TestUnixSocketPeerCredentials(t *testing.T) {
	needRoot(t, "start processes as uid 65534")
	dir := openDir(t)
	sock := filepath.Join(dir, "thawd.sock")
	rec := serveUnix(t, sock, nobody)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "api.test") // the build cache is not readable by uid 65534
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}

	cmd, out, err := runAs(t, bin, sock, nobody, nobody)
	if err != nil {
		t.Fatalf("helper as %d:%d: %v: %s", nobody, nobody, err, out)
	}
	status, body, _ := strings.Cut(out, " ")
	if status != "200" {
		t.Fatalf("helper got %s", out)
	}
	var seen daemon.Caller
	if err := json.Unmarshal([]byte(body), &seen); err != nil {
		t.Fatalf("helper's answer %q: %v", body, err)
	}
	want := daemon.Caller{Unix: true, UID: nobody, GID: nobody, PID: int32(cmd.Process.Pid)}
	if seen != want {
		t.Errorf("route saw caller %+v, want %+v", seen, want)
	}
	if calls := rec.reached(); len(calls) != 1 || calls[0].caller != want {
		t.Errorf("recorded %+v", calls)
	}

	// Same user, but not in the socket's group: the kernel refuses.
	_, out, err = runAs(t, bin, sock, nobody, nobody-1)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("outsider: want permission denied (exit 3), got %v: %s", err, out)
	}
	if len(rec.reached()) != 1 {
		t.Errorf("an outsider's request reached a route")
	}
}

// TestUnixSocketModeIgnoresUmask: 0660 and the given group under a
// permissive and a strict umask; the parent is created 0755.
func TestUnixSocketModeIgnoresUmask(t *testing.T) {
	needRoot(t, "give the socket group 65534")
	for _, mask := range []int{0o000, 0o077} {
		dir := openDir(t)
		path := filepath.Join(dir, "run", "thawd.sock") // parent missing: created
		old := syscall.Umask(mask)
		ln, err := ListenUnix(path, nobody)
		syscall.Umask(old)
		if err != nil {
			t.Fatalf("umask %03o: %v", mask, err)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 || st.Gid != nobody {
			t.Errorf("umask %03o: socket %v group %d, want socket 0660 group %d", mask, fi.Mode(), st.Gid, nobody)
		}
		if pi, _ := os.Stat(filepath.Dir(path)); pi.Mode().Perm() != 0o755 {
			t.Errorf("umask %03o: created parent has mode %v, want 0755", mask, pi.Mode())
		}
		if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
			t.Errorf("umask %03o: the bind directory was left behind: %v", mask, ents)
		}
		if got := ln.Addr().String(); got != path {
			t.Errorf("Addr %q, want %q", got, path)
		}
		ln.Close()
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left after Close: %v", err)
		}
	}
}

func TestUnixSocketRefusesUnsafePaths(t *testing.T) {
	needRoot(t, "chown directories to another user")
	mk := func(mode os.FileMode, uid int) string {
		d := filepath.Join(openDir(t), "d")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, 0); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		name, dir, contains string
	}{
		{"group-writable parent", mk(0o775, 0), "writable by group or others"},
		{"world-writable sticky parent", mk(0o1777, 0), "writable by group or others"},
		{"parent owned by another user", mk(0o755, nobody), "owned by uid 65534"},
	} {
		if ln, err := ListenUnix(filepath.Join(c.dir, "thawd.sock"), 0); err == nil || !strings.Contains(err.Error(), c.contains) {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("%s: err %v, want %q", c.name, err, c.contains)
		}
	}

	dir := openDir(t)
	file, link, sub := filepath.Join(dir, "file"), filepath.Join(dir, "link"), filepath.Join(dir, "sub")
	os.WriteFile(file, []byte("keep me"), 0o644)
	os.Symlink(file, link)
	os.Mkdir(sub, 0o755)
	for _, p := range []string{file, link, sub} {
		if ln, err := ListenUnix(p, 0); err == nil || !strings.Contains(err.Error(), "in the way") {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("%s: err %v, want refused as in the way", p, err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Error("the file in the way was changed")
	}

	checkLiveAndStaleSockets(t, dir)
}

// checkLiveAndStaleSockets checks, in dir, that a live socket belongs to
// another daemon, a stale one is replaced, and closing a listener whose
// path another daemon took leaves that socket.
func checkLiveAndStaleSockets(t *testing.T, dir string) {
	t.Helper()
	live := filepath.Join(dir, "live.sock")
	other, err := ListenUnix(live, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := ListenUnix(live, 0); err == nil || !strings.Contains(err.Error(), "another daemon") {
		if ln != nil {
			ln.Close()
		}
		t.Errorf("live socket: %v", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close()
	ln, err := ListenUnix(stale, 0)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln.Close()

	// Closing a listener whose path another daemon took leaves that socket.
	if err := os.Rename(live, filepath.Join(dir, "moved.sock")); err != nil {
		t.Fatal(err)
	}
	newer, err := ListenUnix(live, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	other.Close()
	if _, err := os.Lstat(live); err != nil {
		t.Errorf("closing the old listener removed the newer daemon's socket: %v", err)
	}
}

func TestParseAddr(t *testing.T) {
	for _, c := range []struct {
		in, network, addr string
		loopback          bool
	}{
		{"/run/thaw/thawd.sock", "unix", "/run/thaw/thawd.sock", false},
		{"unix:/tmp/x/../t.sock", "unix", "/tmp/t.sock", false},
		{"127.0.0.1:7380", "tcp", "127.0.0.1:7380", true},
		{"localhost:0", "tcp", "localhost:0", true},
		{"[::1]:7380", "tcp", "[::1]:7380", true},
		{"0.0.0.0:7380", "tcp", "0.0.0.0:7380", false},
		{":7380", "tcp", ":7380", false},
		{"thaw.example:443", "tcp", "thaw.example:443", false},
	} {
		a, err := ParseAddr(c.in)
		if err != nil || a.Network != c.network || a.Address != c.addr || (a.Network == "tcp" && a.Loopback() != c.loopback) {
			t.Errorf("ParseAddr(%q) = %+v loopback %v, %v", c.in, a, a.Loopback(), err)
		}
	}
	for _, bad := range []string{"unix:relative.sock", "7380", "localhost", "host:port", "127.0.0.1:99999"} {
		if a, err := ParseAddr(bad); err == nil {
			t.Errorf("ParseAddr(%q) = %+v, want an error", bad, a)
		}
	}
}

// testCA writes a CA and a server certificate for 127.0.0.1 and localhost
// it signed; it returns the CA's PEM file and the server's cert and key.
func testCA(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "thaw test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "thawd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", leafDER), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// TestTLSWithClient serves the handler over TLS with a certificate from a
// private CA: the client trusts it through THAW_CACERT and sends the token
// from THAW_TOKEN; without the CA the handshake fails, without the token
// the answer is 401.
func TestTLSWithClient(t *testing.T) {
	caFile, certFile, keyFile := testCA(t)
	cfg, err := LoadTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTLS(certFile, caFile); err == nil {
		t.Error("LoadTLS accepted a certificate as its own key")
	}
	ln := tcptest.Listen(t)
	h, rec := recordingHandler(Options{Token: testToken})
	srv := &http.Server{Handler: h, ConnContext: h.ConnContext}
	go srv.Serve(tls.NewListener(ln, cfg))
	defer srv.Close()
	url := "https://" + ln.Addr().String()
	ctx := context.Background()

	t.Setenv("THAW_CACERT", caFile)
	t.Setenv("THAW_TOKEN", testToken)
	c, err := client.NewFromEnv(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenAPI(ctx); err != nil {
		t.Fatalf("over TLS with THAW_CACERT and THAW_TOKEN: %v", err)
	}
	if calls := rec.reached(); len(calls) != 1 || calls[0].caller.Unix {
		t.Errorf("reached %+v", calls)
	}

	t.Setenv("THAW_TOKEN", "")
	t.Setenv("THAW_TOKEN_FILE", filepath.Join(t.TempDir(), "none"))
	if _, err := client.NewFromEnv(url); err == nil {
		t.Error("a missing THAW_TOKEN_FILE was ignored")
	}
	t.Setenv("THAW_TOKEN_FILE", "")
	noToken, err := client.NewFromEnv(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noToken.OpenAPI(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("without a token: %v, want ErrUnauthorized", err)
	}

	t.Setenv("THAW_CACERT", "")
	t.Setenv("THAW_TOKEN", testToken)
	untrusting, err := client.NewFromEnv(url)
	if err != nil {
		t.Fatal(err)
	}
	var uae x509.UnknownAuthorityError
	if _, err := untrusting.OpenAPI(ctx); !errors.Is(err, client.ErrUnreachable) || !errors.As(err, &uae) {
		t.Errorf("without the CA: %v, want an unknown-authority failure", err)
	}
	t.Setenv("THAW_CACERT", keyFile)
	if _, err := client.NewFromEnv(url); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("THAW_CACERT without a certificate: %v", err)
	}
	if n := len(rec.reached()); n != 1 {
		t.Errorf("%d requests reached routes, want 1", n)
	}
}
