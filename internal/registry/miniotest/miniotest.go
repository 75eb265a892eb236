// Package miniotest runs a real MinIO server for tests: the binary built
// from github.com/minio/minio at the pinned Version, on 127.0.0.1 at a
// free port, with its data in a temporary directory and a fresh bucket.
//
// The binary is $THAW_MINIO, else $THAW_CACHE/minio/<Version>/minio (what
// scripts/install-deps.sh builds). With THAW_MINIO set (make test sets it)
// a missing binary fails the test; without it the test is skipped and says
// how to get one.
package miniotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/registry"
)

// Version is the MinIO module version the tests run.
const Version = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Server is one running MinIO.
type Server struct {
	Config  registry.Config
	dataDir string
	bin     string
	cmd     *exec.Cmd
	exited  chan struct{}
	mu      sync.Mutex
	logPath string
}

// Binary finds the MinIO binary, failing or skipping t as the package doc
// says.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("THAW_MINIO"); p != "" {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			t.Fatalf("THAW_MINIO=%s is not an executable MinIO (run scripts/install-deps.sh, or: GOBIN=%s go install github.com/minio/minio@%s)",
				p, filepath.Dir(p), Version)
		}
		return p
	}
	cache := os.Getenv("THAW_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "thaw")
	}
	p := filepath.Join(cache, "minio", Version, "minio")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no MinIO at %s and THAW_MINIO is not set: registry tests need a real MinIO (scripts/install-deps.sh builds it; make test makes it mandatory)", p)
	}
	return p
}

// Start runs a MinIO with a new bucket and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), dataDir: t.TempDir()}
	key := make([]byte, 12)
	_, _ = rand.Read(key)
	s.Config = registry.Config{Bucket: "thaw-test", Region: "us-east-1",
		AccessKey: "thaw" + hex.EncodeToString(key[:4]), SecretKey: hex.EncodeToString(key)}
	s.logPath = filepath.Join(t.TempDir(), "minio.log")
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	st, err := registry.Open(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(context.Background()); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return s
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Config.Endpoint == "" {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.Config.Endpoint = "127.0.0.1:" + strconv.Itoa(port)
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "server", "--quiet", "--address", s.Config.Endpoint, s.dataDir)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.Config.AccessKey, "MINIO_ROOT_PASSWORD="+s.Config.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start minio: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(cmd, s.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + s.Config.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("minio exited at start: %s", b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("minio did not become ready on %s in 60s", s.Config.Endpoint)
}

// Stop stops the server (its data stays until the test ends).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Restart starts a stopped server again on the same address and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
