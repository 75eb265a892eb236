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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/minioserver"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/internal/thawcache"
)

// Version is the MinIO module version the tests run.
const Version = minioserver.Version

// Server is one running MinIO.
type Server struct {
	Config   registry.Config
	certsDir string // with TLS: public.crt, private.key
	dataDir  string
	bin      string
	proc     *minioserver.Process
	mu       sync.Mutex
	logPath  string
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
	p := thawcache.Path("minio", Version, "minio")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no MinIO at %s and THAW_MINIO is not set: registry tests need a real MinIO (scripts/install-deps.sh builds it; make test makes it mandatory)", p)
	}
	return p
}

// Start runs a MinIO with a new bucket and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartTLS is Start serving HTTPS with a certificate for 127.0.0.1 signed
// by nobody: Config.CAFile is that certificate.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, withTLS bool) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), dataDir: t.TempDir()}
	if withTLS {
		s.certsDir = t.TempDir()
		if err := selfSigned(s.certsDir); err != nil {
			t.Fatal(err)
		}
		s.Config.Secure, s.Config.CAFile = true, filepath.Join(s.certsDir, "public.crt")
	}
	key := make([]byte, 12)
	_, _ = rand.Read(key)
	s.Config.Bucket, s.Config.Region = "thaw-test", "us-east-1"
	s.Config.AccessKey, s.Config.SecretKey = "thaw"+hex.EncodeToString(key[:4]), hex.EncodeToString(key)
	s.logPath = filepath.Join(t.TempDir(), "minio.log")
	s.Config.Endpoint = tcptest.FreeAddr(t)
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	st, err := registry.Open(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	// MinIO can answer its readiness probe a moment before its object
	// layer takes requests ("Server not initialized yet"): retry that.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := st.EnsureBucket(context.Background())
		if err == nil {
			break
		}
		if !errors.Is(err, registry.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("create bucket: %v", err)
		}
	}
	return s
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := minioserver.Start(context.Background(), minioserver.Spec{Bin: s.bin, DataDir: s.dataDir, Addr: s.Config.Endpoint,
		AccessKey: s.Config.AccessKey, SecretKey: s.Config.SecretKey, CertsDir: s.certsDir, LogPath: s.logPath})
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// Stop stops the server (its data stays until the test ends).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.Stop(10 * time.Second)
		s.proc = nil
	}
}

// Restart starts a stopped server again on the same address and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir as
// MinIO wants them (public.crt, private.key).
func selfSigned(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "thaw-test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "public.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "private.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
}
