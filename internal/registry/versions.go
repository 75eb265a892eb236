package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/objstore"
	"github.com/thaw-dev/thaw/internal/registry/chunk"
)

// KindVersion is a version record's kind: versions/<name>/<number>.json,
// one immutable version of a function as its publishing node deployed it.
// Every node that imports the version gives it the same number, so
// NAME:3 runs the same code and configuration on every node.
const (
	KindVersion  = "version"
	VersionMagic = "thaw-version"
)

// ErrVersionConflict: the registry holds another content under a
// version's number (two nodes deployed the function on their own).
var ErrVersionConflict = errors.New("registry: a version of that number with other content")

// VersionRecord is one version of a function: its number and content
// digest, the function record a node registers it from (configuration,
// code archive, dependencies; its Latest is the version's newest snapshot)
// and every snapshot of the version pushed, oldest first.
type VersionRecord struct {
	Magic     string         `json:"magic"`
	Number    int            `json:"number"`
	Digest    string         `json:"digest"`
	Function  FunctionRecord `json:"function"`
	Snapshots []string       `json:"snapshots"`
	PushedAt  time.Time      `json:"pushed_at"`
}

func versionKey(name string, n int) string {
	return "versions/" + name + "/" + strconv.Itoa(n) + ".json"
}

// PushVersion writes version vr.Number of vr.Function.Name with its code
// (stored once, by digest), adding vr's snapshots to those the registry
// already lists for it. The same number with another digest is
// ErrVersionConflict and changes nothing.
func (s *Store) PushVersion(ctx context.Context, vr VersionRecord, code []byte) error {
	if err := s.canSign(); err != nil {
		return err
	}
	vr.Magic, vr.Function.Magic = VersionMagic, FunctionMagic
	vr.Function.CodeSHA256 = chunk.SumHex(code)
	vr.Function.Code = codeKey(vr.Function.CodeSHA256)
	vr.PushedAt = time.Now().UTC()
	vr.Function.PushedAt = vr.PushedAt
	l, err := s.pushLease(ctx, "function "+vr.Function.Name)
	if err != nil {
		return err
	}
	defer l.release()
	// Nodes pushing the same version at once each add their snapshots:
	// the record is written only over the one read, else read again.
	for attempt := 1; ; attempt++ {
		err := s.mergeVersion(ctx, vr, code)
		if !errors.Is(err, objstore.ErrPrecondition) {
			return err
		}
		if attempt == versionAttempts {
			return fmt.Errorf("%w: version %s:%d changed %d times while this node wrote it: %w", ErrBusy, vr.Function.Name, vr.Number, attempt, err)
		}
	}
}

// versionAttempts bounds how often PushVersion reads and writes a version
// record that other nodes keep changing.
const versionAttempts = 8

// mergeVersion adds vr's snapshots to the stored version record, stores
// the code archive unless present, and writes the record if nobody wrote
// it since it was read (objstore's ErrPrecondition if someone did).
func (s *Store) mergeVersion(ctx context.Context, vr VersionRecord, code []byte) error {
	key := versionKey(vr.Function.Name, vr.Number)
	old, tag, err := s.getVersionTag(ctx, vr.Function.Name, vr.Number)
	switch {
	case err == nil && old.Digest != vr.Digest:
		return fmt.Errorf("%w: %s:%d is %s there, %s here", ErrVersionConflict, vr.Function.Name, vr.Number, short(old.Digest), short(vr.Digest))
	case err == nil:
		for _, id := range vr.Snapshots {
			if !slices.Contains(old.Snapshots, id) {
				old.Snapshots = append(old.Snapshots, id)
			}
		}
		vr.Snapshots = old.Snapshots
	case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUntrusted):
		return err
	}
	vr.Function.Latest = vr.Snapshots[len(vr.Snapshots)-1]
	if err := s.putCode(ctx, vr.Function.Code, code); err != nil {
		return err
	}
	b, err := encodeChecked(vr, decodeVersionRecord)
	if err != nil {
		return err
	}
	// An invalid or untrusted record is replaced, as long as it is the
	// one read.
	cond := objstore.PutOptions{IfMatch: tag, IfAbsent: tag == ""}
	return s.putRecordIf(ctx, KindVersion, key, b, cond)
}

// GetVersion fetches version n of function name and verifies its
// signature before it checks its content.
func (s *Store) GetVersion(ctx context.Context, name string, n int) (*VersionRecord, error) {
	if !nameRE.MatchString(name) || n <= 0 {
		return nil, fmt.Errorf("%w: version %s:%d", ErrInvalid, name, n)
	}
	vr, _, err := s.getVersionTag(ctx, name, n)
	return vr, err
}

// getVersionTag is GetVersion with the record object's ETag ("" when
// there is none), also when the record is refused.
func (s *Store) getVersionTag(ctx context.Context, name string, n int) (*VersionRecord, string, error) {
	b, tag, err := s.getRecordTag(ctx, KindVersion, versionKey(name, n))
	if err != nil {
		return nil, tag, err
	}
	vr, err := decodeVersionRecord(b)
	if err == nil && (vr.Function.Name != name || vr.Number != n) {
		return nil, tag, fmt.Errorf("%w: %s holds version %s:%d", ErrInvalid, versionKey(name, n), vr.Function.Name, vr.Number)
	}
	return vr, tag, err
}

// DeleteVersion deletes version n of function name's record (its
// snapshots are deleted on their own; garbage collection then frees its
// code archive if nothing else names it). A missing record is no error.
func (s *Store) DeleteVersion(ctx context.Context, name string, n int) error {
	if !nameRE.MatchString(name) || n <= 0 {
		return fmt.Errorf("%w: version %s:%d", ErrInvalid, name, n)
	}
	return s.remove(ctx, []string{versionKey(name, n)})
}

// versionCode lists the code archives version records name (trusted or
// not: garbage collection keeps what any record names).
func (s *Store) versionCode(ctx context.Context, keep map[string]bool) error {
	for o, err := range s.list(ctx, "versions/") {
		if err != nil {
			return err
		}
		if !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		b, _, _, err := s.readRecord(ctx, KindVersion, o.Key)
		if err != nil {
			return fmt.Errorf("version record %s: %w", o.Key, err)
		}
		vr, err := decodeVersionRecord(b)
		if err != nil {
			return fmt.Errorf("version record %s: %w", o.Key, err)
		}
		keep[vr.Function.Code] = true
	}
	return nil
}

func decodeVersionRecord(b []byte) (*VersionRecord, error) {
	var vr VersionRecord
	if err := json.Unmarshal(b, &vr); err != nil {
		return nil, fmt.Errorf("%w: version record: %v", ErrInvalid, err)
	}
	if vr.Magic != VersionMagic || vr.Number <= 0 || !hexSum.MatchString(vr.Digest) || len(vr.Snapshots) == 0 {
		return nil, fmt.Errorf("%w: version record %s:%d", ErrInvalid, vr.Function.Name, vr.Number)
	}
	for _, id := range vr.Snapshots {
		if !idRE.MatchString(id) {
			return nil, fmt.Errorf("%w: version record %s:%d names snapshot %q", ErrInvalid, vr.Function.Name, vr.Number, id)
		}
	}
	if _, err := encodeChecked(vr.Function, decodeFunctionRecord); err != nil {
		return nil, fmt.Errorf("version record %s:%d: %w", vr.Function.Name, vr.Number, err)
	}
	return &vr, nil
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
