package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.yaml.in/yaml/v4"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/minioserver"
	"github.com/thaw-dev/thaw/internal/thawcache"
)

// StorePort is the object store's S3 port, on its own address.
const StorePort = 9000

// Link is the emulated link between the nodes and the object store.
type Link struct {
	RTT      time.Duration // round trip the delay line adds (half each way); 0: none
	RateMbit int           // each direction, Mbit/s; 0: unlimited
}

// DefaultLink is a rack-local object store: 1 ms round trip, 1 Gbit/s.
var DefaultLink = Link{RTT: time.Millisecond, RateMbit: 1000}

// Validate refuses a link the cluster cannot emulate.
func (l Link) Validate() error {
	var errs []error
	if l.RTT < 0 || l.RTT > 10*time.Second {
		errs = append(errs, fmt.Errorf("link round trip %s: want 0 to 10s", l.RTT))
	}
	if l.RateMbit < 0 || l.RateMbit > 100_000 {
		errs = append(errs, fmt.Errorf("link rate %d Mbit/s: want 0 (unlimited) to 100000", l.RateMbit))
	}
	return errors.Join(errs...)
}

func (l Link) String() string {
	rate := "unlimited"
	if l.RateMbit > 0 {
		rate = strconv.Itoa(l.RateMbit) + " Mbit/s"
	}
	return fmt.Sprintf("%s round trip, %s", l.RTT, rate)
}

// qdiscArgs is the rate half of the link for one direction: a token
// bucket (tbf) with a burst of 4 ms at the rate (at least 128 KiB, more
// than one GSO packet) and up to 100 ms of queue, so bursts wait instead
// of being dropped. Unlimited: a plain FIFO.
func (l Link) qdiscArgs() []string {
	if l.RateMbit == 0 {
		return []string{"pfifo"}
	}
	burst := max(int64(l.RateMbit)*1e6/8*4/1000, 128<<10)
	return []string{"tbf", "rate", strconv.Itoa(l.RateMbit) + "mbit", "burst", strconv.FormatInt(burst, 10), "latency", "100ms"}
}

// StoreConfig puts an object store (MinIO) into the cluster: the nodes'
// snapshot registry.
type StoreConfig struct {
	MinIO string // the minio binary; "": DefaultMinIO()
	Link  Link
	// ChunkSize of pushed snapshots (0: the registry's default).
	ChunkSize int
	// PushOnPrepare starts nodes with --registry-push-on-prepare.
	PushOnPrepare bool
}

// DefaultMinIO is $THAW_MINIO, else the pinned build scripts/install-deps.sh
// makes under $THAW_CACHE (~/.cache/thaw).
func DefaultMinIO() string {
	if p := os.Getenv("THAW_MINIO"); p != "" {
		return p
	}
	return thawcache.Path("minio", minioserver.Version, "minio")
}

// ObjectStore is a MinIO in its own namespace on the cluster's bridge,
// behind the emulated link.
type ObjectStore struct {
	NS         string
	IP         netip.Addr
	Config     registry.Config // what every node's thawd reads
	ConfigFile string          // Config as a 0600 file (thawd --registry-config)
	Link       Link
	delay      *delayLine
	bin        string
	dataDir    string
	logPath    string
	mu         sync.Mutex
	proc       *minioserver.Process
}

// validate reports every problem of the config at once.
func (cfg *StoreConfig) validate() error {
	if cfg.MinIO == "" {
		cfg.MinIO = DefaultMinIO()
	}
	var errs []error
	if st, err := os.Stat(cfg.MinIO); err != nil || st.Mode()&0o111 == 0 || st.IsDir() {
		errs = append(errs, fmt.Errorf("object store: %s is not an executable MinIO (scripts/install-deps.sh builds it)", cfg.MinIO))
	}
	if err := cfg.Link.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := (registry.Config{Endpoint: "x:1", Bucket: "x", ChunkSize: cfg.ChunkSize}).Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startStore makes the store's namespace, shapes its link, starts MinIO,
// creates the bucket and writes the registry config file.
func (c *Cluster) startStore(ctx context.Context, cfg StoreConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	bin := cfg.MinIO
	ns, err := c.Net.AddStore()
	if err != nil {
		return err
	}
	if err := c.Net.ShapeStoreLink(cfg.Link); err != nil {
		return err
	}
	key := make([]byte, 20)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "store")
	s := &ObjectStore{NS: ns, IP: c.Net.StoreIP(), Link: cfg.Link, bin: bin,
		dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "minio.log"), ConfigFile: filepath.Join(c.Dir, "registry.yaml")}
	s.Config = registry.Config{Endpoint: netip.AddrPortFrom(s.IP, StorePort).String(), Bucket: "thaw", Region: "us-east-1",
		AccessKey: "thaw" + hex.EncodeToString(key[:4]), SecretKey: hex.EncodeToString(key[4:]), ChunkSize: cfg.ChunkSize}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return err
	}
	c.Store = s
	if s.delay, err = startDelayLine(ns, s.Config.Endpoint, s.minioAddr(), cfg.Link.RTT/2); err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	st, err := registry.Open(s.Config)
	if err != nil {
		return err
	}
	if err := st.EnsureBucket(ctx); err != nil {
		return fmt.Errorf("object store: create bucket: %w", err)
	}
	return s.writeConfig()
}

// writeConfig writes the registry config with its secrets, mode 0600.
func (s *ObjectStore) writeConfig() error {
	b, err := yaml.Marshal(map[string]any{"endpoint": s.Config.Endpoint, "bucket": s.Config.Bucket, "region": s.Config.Region,
		"access_key": s.Config.AccessKey, "secret_key": s.Config.SecretKey, "chunk_size": s.Config.ChunkSize})
	if err != nil {
		return err
	}
	tmp := s.ConfigFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.ConfigFile)
}

// Start runs MinIO in the store's namespace and waits until it answers
// through the link. MinIO dies with the process that runs the cluster.
func (s *ObjectStore) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	p, err := minioserver.Start(ctx, minioserver.Spec{Bin: s.bin, DataDir: s.dataDir, Addr: s.minioAddr(),
		AccessKey: s.Config.AccessKey, SecretKey: s.Config.SecretKey, LogPath: s.logPath,
		Wrap: []string{"nsenter", "--net=/run/netns/" + s.NS, "--"}, ReadyAddr: s.Config.Endpoint})
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// minioAddr is where MinIO listens: the store namespace's loopback, behind
// the delay line on the store's address.
func (s *ObjectStore) minioAddr() string { return "127.0.0.1:" + strconv.Itoa(StorePort) }

// Close stops MinIO and the delay line.
func (s *ObjectStore) Close() error {
	if s == nil {
		return nil
	}
	s.Stop()
	if s.delay != nil {
		return s.delay.Close()
	}
	return nil
}

// Stop stops MinIO (SIGTERM, SIGKILL after 10 s); its data stays, so
// Start serves the same objects again.
func (s *ObjectStore) Stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	s.proc.Stop(10 * time.Second)
	s.proc = nil
}

// Running reports whether MinIO is up.
func (s *ObjectStore) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.Exited():
		return false
	default:
		return true
	}
}

// LinkCheck is the emulated link as measured from the host, whose
// traffic to the store crosses the same veth and delay line as the
// nodes'.
type LinkCheck struct {
	Link string `json:"link"`
	// RequestMS: MinIO's liveness request on an open connection, 20
	// times: one round trip plus MinIO's own time.
	RequestMS   []float64 `json:"request_ms"`
	RTTMedianMS float64   `json:"rtt_median_ms"`
	// DirectMS: the same requests to MinIO inside its namespace, past
	// the link; AddedMS the difference of the medians: the link's round
	// trip as measured.
	DirectMS       []float64 `json:"direct_ms"`
	DirectMedianMS float64   `json:"direct_median_ms"`
	AddedMS        float64   `json:"added_ms"`
	GetBytes       int64     `json:"get_bytes"`
	GetMS          float64   `json:"get_ms"`
	GetMbit        float64   `json:"get_mbit_s"` // one S3 GET of GetBytes, on one connection
	PutMS          float64   `json:"put_ms"`
	PutMbit        float64   `json:"put_mbit_s"`
}

// CheckLink measures the link: 20 small requests on one connection
// through it and 20 past it (to MinIO inside its namespace), and a timed
// PUT and GET of an object of size bytes (random, so nothing
// compresses it), which is removed again.
func (s *ObjectStore) CheckLink(ctx context.Context, size int64) (*LinkCheck, error) {
	lc := &LinkCheck{Link: s.Link.String(), GetBytes: size}
	var err error
	if lc.RequestMS, err = s.requestTimes(ctx, nil); err != nil {
		return nil, err
	}
	direct := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var c net.Conn
		err := inNamespace(s.NS, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp4", s.minioAddr())
			return err
		})
		return c, err
	}
	if lc.DirectMS, err = s.requestTimes(ctx, direct); err != nil {
		return nil, err
	}
	lc.RTTMedianMS, lc.DirectMedianMS = median(lc.RequestMS), median(lc.DirectMS)
	lc.AddedMS = lc.RTTMedianMS - lc.DirectMedianMS
	mc, err := minio.New(s.Config.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.Config.AccessKey, s.Config.SecretKey, ""), Region: s.Config.Region})
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return nil, err
	}
	key := "linkcheck/" + hex.EncodeToString(data[:8])
	t0 := time.Now()
	if _, err := mc.PutObject(ctx, s.Config.Bucket, key, bytes.NewReader(data), size, minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		return nil, fmt.Errorf("link check: put: %w", err)
	}
	lc.PutMS = ms(time.Since(t0))
	defer mc.RemoveObject(context.Background(), s.Config.Bucket, key, minio.RemoveObjectOptions{})
	t0 = time.Now()
	obj, err := mc.GetObject(ctx, s.Config.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("link check: get: %w", err)
	}
	n, err := io.Copy(io.Discard, obj)
	obj.Close()
	if err != nil || n != size {
		return nil, fmt.Errorf("link check: get: %d of %d bytes: %v", n, size, err)
	}
	lc.GetMS = ms(time.Since(t0))
	lc.GetMbit = float64(size*8) / 1e6 / (lc.GetMS / 1000)
	lc.PutMbit = float64(size*8) / 1e6 / (lc.PutMS / 1000)
	return lc, nil
}

// requestTimes times 20 liveness requests to MinIO on one open
// connection, through the link, or with dial set, over the connection
// dial makes.
func (s *ObjectStore) requestTimes(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error)) ([]float64, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1, DialContext: dial}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	var out []float64
	for i := 0; i <= 20; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.Config.Endpoint+"/minio/health/live", nil)
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("link check: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("link check: minio liveness: %s", resp.Status)
		}
		if i > 0 { // the first one also opened the connection
			out = append(out, ms(time.Since(t0)))
		}
	}
	return out, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// WriteJSON writes v as indented JSON to path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
