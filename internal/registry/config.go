package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Config says where the registry is: an S3-compatible endpoint and bucket
// and the credentials for it. The secrets never appear in String, LogValue
// or JSON output of the config.
type Config struct {
	Endpoint  string `json:"endpoint" yaml:"endpoint"` // host:port, no scheme
	Bucket    string `json:"bucket" yaml:"bucket"`
	Region    string `json:"region,omitempty" yaml:"region"`
	AccessKey string `json:"access_key,omitempty" yaml:"access_key"`
	SecretKey string `json:"secret_key,omitempty" yaml:"secret_key"`
	Secure    bool   `json:"secure,omitempty" yaml:"secure"`   // HTTPS
	CAFile    string `json:"ca_file,omitempty" yaml:"ca_file"` // PEM bundle trusted for HTTPS besides the system's
	// ChunkSize is the chunk size of pushed snapshots (0: DefaultChunkSize).
	ChunkSize int `json:"chunk_size,omitempty" yaml:"chunk_size"`
}

// Environment variables ConfigFromEnv reads.
const (
	EnvEndpoint  = "THAW_REGISTRY_ENDPOINT"
	EnvBucket    = "THAW_REGISTRY_BUCKET"
	EnvRegion    = "THAW_REGISTRY_REGION"
	EnvSecure    = "THAW_REGISTRY_SECURE"
	EnvCAFile    = "THAW_REGISTRY_CA_FILE"
	EnvChunkSize = "THAW_REGISTRY_CHUNK_SIZE"
	EnvAccessKey = "AWS_ACCESS_KEY_ID"
	EnvSecretKey = "AWS_SECRET_ACCESS_KEY"
)

const redacted = "[redacted]"

// String describes the config with the secrets redacted.
func (c Config) String() string {
	return fmt.Sprintf("registry{endpoint=%s bucket=%s region=%s secure=%t ca_file=%s chunk_size=%d access_key=%s secret_key=%s}",
		c.Endpoint, c.Bucket, c.Region, c.Secure, c.CAFile, c.ChunkSize, hide(c.AccessKey), hide(c.SecretKey))
}

// LogValue logs the config with the secrets redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("endpoint", c.Endpoint), slog.String("bucket", c.Bucket),
		slog.String("region", c.Region), slog.Bool("secure", c.Secure), slog.String("ca_file", c.CAFile),
		slog.Int("chunk_size", c.ChunkSize), slog.String("access_key", hide(c.AccessKey)), slog.String("secret_key", hide(c.SecretKey)))
}

// GoString keeps %#v from printing the secrets.
func (c Config) GoString() string { return c.String() }

// MarshalJSON writes the config with the secrets redacted (for status
// output); files with secrets are written by their owner, not by thaw.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	p := plain(c)
	p.AccessKey, p.SecretKey = hide(c.AccessKey), hide(c.SecretKey)
	return json.Marshal(p)
}

func hide(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Endpoint == "" {
		errs = append(errs, errors.New("registry endpoint is empty"))
	} else if strings.Contains(c.Endpoint, "://") || strings.Contains(c.Endpoint, "/") {
		errs = append(errs, fmt.Errorf("registry endpoint %q: give host:port without a scheme or path (secure: true for HTTPS)", c.Endpoint))
	}
	if c.Bucket == "" {
		errs = append(errs, errors.New("registry bucket is empty"))
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		errs = append(errs, errors.New("registry access key and secret key must be given together"))
	}
	if c.CAFile != "" && !c.Secure {
		errs = append(errs, errors.New("registry ca_file needs secure: true"))
	}
	if c.ChunkSize != 0 && (c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize || c.ChunkSize&(c.ChunkSize-1) != 0) {
		errs = append(errs, fmt.Errorf("registry chunk_size %d: a power of two from %d to %d", c.ChunkSize, MinChunkSize, MaxChunkSize))
	}
	return errors.Join(errs...)
}

// LoadConfig reads a config file, YAML or JSON (JSON is YAML), refusing
// unknown keys, then lets the environment fill what the file leaves empty.
// The file holds secrets, so one others can read is refused.
func LoadConfig(path string, getenv func(string) string) (Config, error) {
	var c Config
	st, err := os.Stat(path)
	if err != nil {
		return c, fmt.Errorf("registry config: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return c, fmt.Errorf("registry config %s: mode %#o lets others read its secrets; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("registry config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("registry config %s: %w", filepath.Base(path), err)
	}
	env, err := ConfigFromEnv(getenv)
	if err != nil {
		return Config{}, err
	}
	c.fill(env)
	return c, c.Validate()
}

// ConfigFromEnv reads the THAW_REGISTRY_* and AWS_* variables. Unset
// variables leave fields empty; the result is not validated.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{Endpoint: getenv(EnvEndpoint), Bucket: getenv(EnvBucket), Region: getenv(EnvRegion),
		CAFile: getenv(EnvCAFile), AccessKey: getenv(EnvAccessKey), SecretKey: getenv(EnvSecretKey)}
	var errs []error
	if v := getenv(EnvSecure); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", EnvSecure, v))
		}
		c.Secure = b
	}
	if v := getenv(EnvChunkSize); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want a number of bytes", EnvChunkSize, v))
		}
		c.ChunkSize = n
	}
	return c, errors.Join(errs...)
}

// fill sets the fields of c that are empty from o.
func (c *Config) fill(o Config) {
	for _, p := range []struct{ dst, src *string }{{&c.Endpoint, &o.Endpoint}, {&c.Bucket, &o.Bucket},
		{&c.Region, &o.Region}, {&c.CAFile, &o.CAFile}, {&c.AccessKey, &o.AccessKey}, {&c.SecretKey, &o.SecretKey}} {
		if *p.dst == "" {
			*p.dst = *p.src
		}
	}
	c.Secure = c.Secure || o.Secure
	if c.ChunkSize == 0 {
		c.ChunkSize = o.ChunkSize
	}
}
