package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/internal/triggers"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// TestRefusedAtStart: a command line that would serve insecurely, or that
// names a bad token file or TLS files, stops thawd before it opens the
// daemon (the data directory is never created).
func TestRefusedAtStart(t *testing.T) {
	_, cert, key := testCerts(t)
	loose := filepath.Join(t.TempDir(), "token")
	os.WriteFile(loose, []byte(strings.Repeat("a", 64)), 0o600)
	os.Chmod(loose, 0o644) // whatever the umask (an opened daemon sets 077)
	for _, c := range []struct {
		name     string
		cfg      serveConfig
		contains string
	}{
		{"every interface without TLS", serveConfig{Listen: []string{"0.0.0.0:7380"}}, "needs TLS"},
		{"empty host without TLS", serveConfig{Listen: []string{":7380"}}, "needs TLS"},
		{"LAN address without TLS", serveConfig{Listen: []string{"/run/x.sock", "10.1.2.3:7380"}}, "needs TLS"},
		{"hostname without TLS", serveConfig{Listen: []string{"thaw.example:7380"}}, "needs TLS"},
		{"certificate without key", serveConfig{Listen: []string{"0.0.0.0:7380"}, TLSCert: cert}, "go together"},
		{"key as certificate", serveConfig{Listen: []string{"127.0.0.1:0"}, TLSCert: key, TLSKey: key}, "TLS certificate"},
		{"readable token file", serveConfig{Listen: []string{"127.0.0.1:0"}, TokenFile: loose}, "accessible to group or others"},
		{"missing token file", serveConfig{Listen: []string{"127.0.0.1:0"}, TokenFile: loose + ".missing"}, "no such file"},
		{"bad address", serveConfig{Listen: []string{"7380"}}, "host:port"},
		{"unknown socket group", serveConfig{SocketGroup: "no-such-group-thaw"}, "no-such-group-thaw"},
		{"origin without scheme", serveConfig{AllowedOrigins: []string{"dash.example"}}, "scheme://host"},
		{"origin with a path", serveConfig{AllowedOrigins: []string{"https://dash.example/app"}}, "scheme://host"},
		{"host as a URL", serveConfig{AllowedHosts: []string{"https://thaw.example"}}, "host name"},
		{"metrics off loopback", serveConfig{MetricsListen: "0.0.0.0:9100"}, "loopback only"},
		{"metrics on a socket", serveConfig{MetricsListen: "/run/thaw/metrics.sock"}, "loopback only"},
		{"node name with a space", serveConfig{NodeName: "node 1"}, "--node-name"},
		{"node name with a newline", serveConfig{NodeName: "n\r\nX-Evil: 1"}, "--node-name"},
		{"negative drain delay", serveConfig{DrainDelay: -time.Second}, "--drain-delay"},
		{"functions listener off loopback without TLS", serveConfig{Triggers: triggerSettings{FunctionsListen: "0.0.0.0:8080"}}, "--functions-tls-cert"},
		{"functions listener on a socket", serveConfig{Triggers: triggerSettings{FunctionsListen: "/run/fn.sock"}}, "want host:port"},
		{"functions certificate without key", serveConfig{Triggers: triggerSettings{FunctionsTLSCert: cert}}, "go together"},
		{"replicas without a cluster", serveConfig{Triggers: triggerSettings{Triggers: triggers.Config{Replicas: 3}}}, "--nats-url"},
		{"bad destination", serveConfig{Triggers: triggerSettings{Triggers: triggers.Config{DestinationAllow: []string{"hooks.example"}}}}, "--destination-allow"},
		{"body limit too big", serveConfig{Triggers: triggerSettings{Triggers: triggers.Config{MaxBodyBytes: 1 << 30}}}, "--functions-max-body"},
	} {
		c.cfg.Daemon = daemon.Config{DataDir: filepath.Join(t.TempDir(), "data")}
		err := serve(context.Background(), c.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		if err == nil || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: %v, want an error mentioning %q", c.name, err, c.contains)
		}
		if _, serr := os.Stat(c.cfg.Daemon.DataDir); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: the data directory was created before the refusal", c.name)
		}
	}
	// Loopback needs no TLS; off loopback TLS is enough.
	for _, l := range [][]string{{"127.0.0.1:0"}, {"localhost:0", "[::1]:0"}} {
		if _, err := check(serveConfig{Listen: l}); err != nil {
			t.Errorf("%v: %v", l, err)
		}
	}
	if _, err := check(serveConfig{Listen: []string{"0.0.0.0:0"}, TLSCert: cert, TLSKey: key,
		AllowedHosts: []string{"thaw.example", "10.0.0.5:7443"}, AllowedOrigins: []string{"https://dash.example", "http://127.0.0.1:8080/"}}); err != nil {
		t.Errorf("every interface with TLS: %v", err)
	}
}

// testCerts writes a CA, and a certificate for 127.0.0.1 it signed, and its key.
func testCerts(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	// issue signs tmpl with parent's key (itself when parent is nil) and
	// writes the certificate as name.
	issue := func(name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key, writePEM(t, filepath.Join(dir, name), "CERTIFICATE", der)
	}
	ca, caKey, caFile := issue("ca.pem", &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "thaw test CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	_, key, certFile := issue("cert.pem", &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "thawd"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, certFile, writePEM(t, filepath.Join(dir, "key.pem"), "EC PRIVATE KEY", keyDER)
}

// writePEM writes der as one PEM block of type typ to path.
func writePEM(t *testing.T, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// imageDir is the built guest image daemon.Open loads (no VM is booted).
func imageDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("THAW_IMAGE")
	if dir == "" {
		dir = defaultImageDir()
	}
	if _, err := os.Stat(filepath.Join(dir, "image.json")); err != nil {
		t.Skipf("no guest image at %s (make image builds it): thawd's start-up opens it: %v", dir, err)
	}
	return dir
}

// socketDaemon is the configuration of a daemon on TCG over the built
// guest image (no VM is booted) and the Unix socket to serve it on: the
// socket in a fresh directory under the temporary one and the memory store
// in /dev/shm, both named from prefix and removed when the test ends.
func socketDaemon(t *testing.T, prefix string) (sock string, d daemon.Config) {
	t.Helper()
	img := imageDir(t)
	sockDir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	store := filepath.Join("/dev/shm", prefix+filepath.Base(sockDir))
	t.Cleanup(func() { os.RemoveAll(store) })
	return filepath.Join(sockDir, "thawd.sock"), daemon.Config{DataDir: t.TempDir(), ImageDir: img, Accel: "tcg",
		DefaultMemoryMiB: 256, DefaultVCPUs: 1, BootTimeout: time.Minute, InvokeTimeout: time.Minute, StoreDir: store,
		VMMSettings: qemu.Settings{Shim: filepath.Join("..", "..", "shim", "build", "libthaw_shim.so")}.Values()}
}

// unixHTTP is an HTTP client whose every request goes to the Unix socket
// sock, whatever its URL's host.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// envClient is client.NewFromEnv(url) with the environment variables kv
// (name, value, ...) set for the rest of the test.
func envClient(t *testing.T, url string, kv ...string) *client.Client {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
	c, err := client.NewFromEnv(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// running is one serve() in the background.
type running struct {
	addrs []net.Addr
	stop  context.CancelFunc
	done  chan error
}

func startServe(t *testing.T, cfg serveConfig) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: cancel, done: make(chan error, 1)}
	ready := make(chan []net.Addr, 1)
	go func() {
		r.done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a []net.Addr) { ready <- a })
	}()
	select {
	case r.addrs = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("serve did not start within 60 s")
	}
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

func (r *running) shutdown(t *testing.T) {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	if err := <-r.done; err != nil {
		t.Errorf("serve ended with %v", err)
	}
}

// TestServe runs thawd's start-up for real (daemon on TCG, no VM booted)
// on a Unix socket and a TLS TCP listener: the socket serves without a
// token, TCP needs the generated token and the CA, the cross-site attack
// creates nothing, stopping removes the socket, and a restart reuses the
// token.
func TestServe(t *testing.T) {
	sock, d := socketDaemon(t, "thawd-serve-")
	img, data := d.ImageDir, d.DataDir
	caFile, cert, key := testCerts(t)
	metricsAddr := tcptest.FreeAddr(t)
	cfg := serveConfig{Listen: []string{sock, "127.0.0.1:0"}, TLSCert: cert, TLSKey: key, MetricsListen: metricsAddr, Daemon: d,
		NodeName: "serve-node"}
	r := startServe(t, cfg)
	ctx := context.Background()
	if len(r.addrs) != 2 || r.addrs[0].String() != sock {
		t.Fatalf("listening on %v", r.addrs)
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %v: %v", fi.Mode(), err)
	}
	tokenPath := filepath.Join(data, api.TokenFileName)
	tfi, err := os.Lstat(tokenPath)
	if err != nil || tfi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %v: %v", tfi.Mode(), err)
	}
	token, err := api.ReadTokenFile(tokenPath)
	if err != nil {
		t.Fatal(err)
	}

	unixC := client.New("unix:" + sock)
	if _, err := unixC.Info(ctx); err != nil {
		t.Fatalf("over the socket: %v", err)
	}
	checkMetricsListener(t, metricsAddr)
	url := "https://" + r.addrs[1].String()
	tcpC := envClient(t, url, "THAW_CACERT", caFile, "THAW_TOKEN", "", "THAW_TOKEN_FILE", tokenPath)
	if _, err := tcpC.Info(ctx); err != nil {
		t.Fatalf("over TLS with the token: %v", err)
	}
	wrong := envClient(t, url, "THAW_TOKEN", "wrong")
	if _, err := wrong.Info(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("wrong token: %v", err)
	}
	// Health needs no token, and names the node.
	if h, err := envClient(t, url, "THAW_CACERT", caFile, "THAW_TOKEN", "wrong").Health(ctx); err != nil || h.Status != "ok" || h.Node != "serve-node" {
		t.Errorf("health: %+v %v", h, err)
	}

	checkCrossSiteRefused(t, sock, img, token)

	r.shutdown(t)
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after stopping: %v", err)
	}
	if _, err := unixC.Info(ctx); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("after stopping: %v", err)
	}

	r = startServe(t, cfg)
	again := envClient(t, "https://"+r.addrs[1].String(), "THAW_TOKEN", token)
	if _, err := again.Info(ctx); err != nil {
		t.Errorf("restart: the first start's token no longer works: %v", err)
	}
	if now, err := api.ReadTokenFile(tokenPath); err != nil || now != token {
		t.Errorf("restart changed the token file: %v", err)
	}
}

// checkMetricsListener checks that --metrics-listen serves /metrics alone,
// without the token.
func checkMetricsListener(t *testing.T, metricsAddr string) {
	t.Helper()
	for path, want := range map[string]int{"/metrics": 200, "/v1/info": 404} {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200 && !strings.Contains(string(body), "thaw_api_requests_total")) {
			t.Errorf("metrics listener %s: %d, want %d (%.200s)", path, resp.StatusCode, want, body)
		}
	}
}

// checkCrossSiteRefused sends the attack on the old code through the socket,
// a page's text/plain POST with an Origin, and checks it creates nothing.
func checkCrossSiteRefused(t *testing.T, sock, img, token string) {
	t.Helper()
	attack := func(c *http.Client, target string, origin bool) int {
		req, _ := http.NewRequest("POST", target, strings.NewReader(`{"name":"pwned","directory":"`+img+`"}`))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Authorization", "Bearer "+token)
		if origin {
			req.Header.Set("Origin", "http://evil.example")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	overSocket := unixHTTP(sock)
	if st := attack(overSocket, "http://thawd/v1/functions", true); st != 403 {
		t.Errorf("cross-site POST through the socket: %d, want 403", st)
	}
	if st := attack(overSocket, "http://thawd/v1/functions", false); st != 415 {
		t.Errorf("text/plain POST through the socket: %d, want 415", st)
	}
	fns, err := client.New("unix:" + sock).ListFunctions(context.Background())
	if err != nil || len(fns) != 0 {
		t.Errorf("functions after the refused attacks: %v %v", fns, err)
	}
}

func TestLogFormat(t *testing.T) {
	for _, f := range []string{"text", "json"} {
		if l, err := newLogger(f, slog.LevelInfo); err != nil || l == nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := newLogger("xml", slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "text or json") {
		t.Errorf("xml: %v", err)
	}
}
