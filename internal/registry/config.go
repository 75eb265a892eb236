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

// Store types: Config.Type.
const (
	TypeS3 = "s3" // an S3-compatible bucket (the default)
	TypeFS = "fs" // a directory, local or shared by the nodes (NFS)
)

// Config says where the registry is: an S3-compatible endpoint and bucket
// and the credentials for it, or (Type "fs") a directory. The secrets
// never appear in String, LogValue or JSON output of the config.
type Config struct {
	// Type is the kind of object store: TypeS3 ("" too) or TypeFS.
	Type string `json:"type,omitempty" yaml:"type"`
	// Path is the registry's directory (TypeFS): absolute, on a
	// filesystem every node mounts at the same place.
	Path      string `json:"path,omitempty" yaml:"path"`
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
	if c.Type == TypeFS {
		return fmt.Sprintf("registry{type=fs path=%s chunk_size=%d}", c.Path, c.ChunkSize)
	}
	return fmt.Sprintf("registry{endpoint=%s bucket=%s region=%s secure=%t ca_file=%s chunk_size=%d access_key=%s secret_key=%s}",
		c.Endpoint, c.Bucket, c.Region, c.Secure, c.CAFile, c.ChunkSize, hide(c.AccessKey), hide(c.SecretKey))
}

// LogValue logs the config with the secrets redacted.
func (c Config) LogValue() slog.Value {
	if c.Type == TypeFS {
		return slog.GroupValue(slog.String("type", c.Type), slog.String("path", c.Path), slog.Int("chunk_size", c.ChunkSize))
	}
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

// Location names the bucket or directory in messages.
func (c Config) Location() string {
	if c.Type == TypeFS {
		return c.Path
	}
	return c.Bucket
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Type {
	case TypeFS:
		errs = c.validateFS()
	case "", TypeS3:
		errs = c.validateS3()
	default:
		errs = append(errs, fmt.Errorf("registry type %q: want %s or %s", c.Type, TypeS3, TypeFS))
	}
	if c.ChunkSize != 0 && (c.ChunkSize < MinChunkSize || c.ChunkSize > MaxChunkSize || c.ChunkSize&(c.ChunkSize-1) != 0) {
		errs = append(errs, fmt.Errorf("registry chunk_size %d: a power of two from %d to %d", c.ChunkSize, MinChunkSize, MaxChunkSize))
	}
	return errors.Join(errs...)
}

// validateFS checks a directory registry's config: a path, absolute and
// clean, and none of the S3 fields.
func (c Config) validateFS() []error {
	var errs []error
	switch {
	case c.Path == "":
		errs = append(errs, errors.New("registry path is empty (type fs names a directory)"))
	case !filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path:
		errs = append(errs, fmt.Errorf("registry path %q: give an absolute, clean path", c.Path))
	}
	if c.Endpoint != "" || c.Bucket != "" || c.Region != "" || c.AccessKey != "" || c.SecretKey != "" || c.Secure || c.CAFile != "" {
		errs = append(errs, errors.New("registry type fs takes a path, not endpoint, bucket, region, keys, secure or ca_file"))
	}
	return errs
}

// validateS3 checks a bucket registry's config.
func (c Config) validateS3() []error {
	var errs []error
	if c.Path != "" {
		errs = append(errs, errors.New("registry path is for type fs; an S3 registry takes endpoint and bucket"))
	}
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
	return errs
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
	if c.Type == TypeFS {
		// A directory needs no credentials: the S3 variables are not
		// for it (and would make it invalid).
		env = Config{ChunkSize: env.ChunkSize}
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
