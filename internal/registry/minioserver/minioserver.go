// Package minioserver runs one MinIO server process and waits until it is
// ready: the tests' server (internal/registry/miniotest) and the cluster's
// object store (internal/cluster) both start MinIO through it.
package minioserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Version is the MinIO module version thaw runs (github.com/minio/minio,
// built by scripts/install-deps.sh into $THAW_CACHE/minio/<Version>/).
const Version = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Spec is what to run.
type Spec struct {
	Bin       string // the minio binary
	DataDir   string
	Addr      string // host:port MinIO listens on
	AccessKey string // MINIO_ROOT_USER
	SecretKey string // MINIO_ROOT_PASSWORD
	CertsDir  string // public.crt and private.key: serve HTTPS; "" plain HTTP
	LogPath   string // MinIO's output, appended
	// Wrap runs MinIO under another command (e.g. nsenter into a network
	// namespace); nil runs it directly.
	Wrap []string
	// ReadyAddr is where readiness is asked (another path to the server,
	// e.g. through a delay line); "" is Addr.
	ReadyAddr string
}

// readyTimeout bounds the wait for MinIO's readiness endpoint.
const readyTimeout = 60 * time.Second

// Process is a running MinIO.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start runs MinIO and returns once /minio/health/ready answers 200. The
// process is killed if the caller's process dies. On failure nothing is
// left running and the error carries MinIO's log.
func Start(ctx context.Context, sp Spec) (*Process, error) {
	if sp.Bin == "" || sp.DataDir == "" || sp.Addr == "" || sp.LogPath == "" {
		return nil, errors.New("minio: binary, data directory, address and log path are required")
	}
	logf, err := os.OpenFile(sp.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := append(append([]string{}, sp.Wrap...), sp.Bin, "server", "--quiet", "--address", sp.Addr)
	if sp.CertsDir != "" {
		args = append(args, "--certs-dir", sp.CertsDir)
	}
	cmd := exec.Command(args[0], append(args[1:], sp.DataDir)...)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+sp.AccessKey, "MINIO_ROOT_PASSWORD="+sp.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start minio: %w", err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(ctx, sp); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	return p, nil
}

func (p *Process) waitReady(ctx context.Context, sp Spec) error {
	addr, scheme := sp.ReadyAddr, "http://"
	if addr == "" {
		addr = sp.Addr
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	if sp.CertsDir != "" {
		// Readiness only: the registry client verifies the certificate.
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		scheme = "https://"
	}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get(scheme + addr + "/minio/health/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			b, _ := os.ReadFile(sp.LogPath)
			return fmt.Errorf("minio exited at start: %s", bytes.TrimSpace(b))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("minio did not become ready on %s in %s (log: %s)", addr, readyTimeout, sp.LogPath)
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop sends SIGTERM, and SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}
