// Package deps gives functions their own Python dependencies: a
// requirements.txt is resolved once with pip on the host (wheels only, for
// the guest's interpreter: nothing a package ships ever runs on the host),
// the wheels are checked and installed by this package into a directory
// tree, and the tree becomes a read-only file system image, the function's
// dependency layer. A layer is named by the digest of its resolved,
// hashed requirement lines (Lock.Digest), so every function with the same
// set shares one; the daemon attaches it to the function's VMs as a disk
// of its own and the guest agent puts it on sys.path.
//
// The pieces, each usable alone (a deploy calls them in this order):
//
//	ParseRequirements  requirements.txt -> Requirements (refuses what pip must not see)
//	Resolver.Resolve   Requirements -> Lock (pip download into the wheel cache; why it failed)
//	Layers.Build       Lock -> Layer (install, precompile, mkfs; shared by digest)
//	Layers.Collect     removes layers nothing uses, within a disk budget
//
// Errors wrap ErrInvalid (the request is at fault: a package that does not
// exist, has no wheel for the guest, conflicts, or a wheel that is not
// safe to install) or ErrIndexUnavailable (the index did not answer).
package deps

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrInvalid: the requirements cannot be satisfied as asked, or a
	// wheel is refused. Kinds below say why; every one wraps ErrInvalid.
	ErrInvalid = errors.New("dependencies refused")
	// ErrUnknownPackage: the index has no such project.
	ErrUnknownPackage = errors.New("unknown package")
	// ErrSdistOnly: the version exists only as source distributions, which
	// would have to be built (running the package's code).
	ErrSdistOnly = errors.New("source distributions only, no wheel")
	// ErrNoWheel: wheels exist, none for CPython 3.11 on manylinux x86_64.
	ErrNoWheel = errors.New("no wheel for the guest's Python and platform")
	// ErrNoVersion: no release matches the version asked for.
	ErrNoVersion = errors.New("no such version")
	// ErrConflict: the requirements contradict each other.
	ErrConflict = errors.New("conflicting requirements")
	// ErrHashMismatch: a downloaded file does not have a hash given for it.
	ErrHashMismatch = errors.New("hash mismatch")
	// ErrBadWheel: a wheel is not safe or not consistent (entries leaving
	// the layer, links, oversized entries, a RECORD that does not match).
	ErrBadWheel = errors.New("wheel refused")
	// ErrIndexUnavailable: the package index did not answer in time.
	ErrIndexUnavailable = errors.New("package index unavailable")
	// ErrLayerMissing: no layer by that digest on this node.
	ErrLayerMissing = errors.New("dependency layer missing")
	// ErrHostPython: the host's Python cannot serve as pip's interpreter.
	ErrHostPython = errors.New("host python unusable")
)

// invalid is an ErrInvalid of kind (nil: none more precise).
func invalid(kind error, format string, args ...any) error {
	if kind == nil {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	return fmt.Errorf("%w: %w: "+format, append([]any{ErrInvalid, kind}, args...)...)
}
