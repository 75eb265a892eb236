// Package errdefs holds the service's error kinds: the sentinels every
// component of the daemon wraps (fmt.Errorf("...: %w", errdefs.ErrInvalid))
// and package api maps to status codes. It imports nothing of thaw's but
// the catalog's and the registry's own kinds, so any component can use it
// without importing the daemon (containerd's errdefs, for the same reason).
package errdefs

import (
	"errors"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/registry"
)

var (
	// ErrNotFound: no function, VM or snapshot by that name (404).
	ErrNotFound = catalog.ErrNotFound
	// ErrExists: the name is taken (409).
	ErrExists = catalog.ErrExists
	// ErrInvalid: the request is malformed (400).
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the resource is in the wrong state (409).
	ErrConflict = errors.New("conflict")
	// ErrTimeout: the guest did not answer within the invocation timeout (504).
	ErrTimeout = errors.New("timeout")
	// ErrSnapshotUnusable: a snapshot failed verification (422).
	ErrSnapshotUnusable = errors.New("snapshot unusable")
	// ErrVMFailed: the VM failed while serving the request (502).
	ErrVMFailed = errors.New("vm failed")
	// ErrNoSpace: the data directory's file system is full (507).
	ErrNoSpace = errors.New("no space left for thaw's data")
	// ErrForbidden: the caller may not do this (403).
	ErrForbidden = errors.New("forbidden")
	// ErrTooMany: a limit is reached; try again later (429).
	ErrTooMany = errors.New("too many")
	// ErrImport: a booted function's handler cannot be imported (or its
	// dependency layer mounted); the boot fails with the guest's traceback.
	ErrImport = errors.New("function cannot be imported")
	// ErrRegistryUnavailable: the snapshot registry cannot be reached (503).
	ErrRegistryUnavailable = registry.ErrUnavailable
	// ErrIndexUnavailable: the package index cannot be reached (503).
	ErrIndexUnavailable = deps.ErrIndexUnavailable
)
