package lifecycle

import (
	"fmt"
	"sync"

	"github.com/thaw-dev/thaw/internal/errdefs"
)

// Names are the claims on function names that keep a create, deploys and
// a delete of one function apart: one create of a name at a time and
// nothing else meanwhile; any number of deploys (they queue on the
// versions component's lock) but no create; one delete and nothing else,
// and no VM of the function starts while it runs.
type Names struct {
	mu       sync.Mutex
	creating map[string]int  // being created (-1) or deployed (how many deploys)
	deleting map[string]bool // being deleted
}

func newNames() *Names {
	return &Names{creating: map[string]int{}, deleting: map[string]bool{}}
}

// underLock is f run under n's lock: a claim's release.
func (n *Names) underLock(f func()) func() {
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		f()
	}
}

// ClaimCreate claims name for one create (no deploy or delete of it
// meanwhile); release gives it back.
func (n *Names) ClaimCreate(name string) (release func(), err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.creating[name] != 0 {
		return nil, fmt.Errorf("function %q is being created or deployed: %w", name, errdefs.ErrExists)
	}
	n.creating[name] = -1
	return n.underLock(func() { delete(n.creating, name) }), nil
}

// ClaimDeploy keeps creates of name out while a deploy of it runs
// (deploys of one name queue on their own lock instead).
func (n *Names) ClaimDeploy(name string) (release func(), err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.creating[name] < 0 {
		return nil, fmt.Errorf("function %q is being created: %w", name, errdefs.ErrExists)
	}
	n.creating[name]++
	return n.underLock(func() {
		if n.creating[name]--; n.creating[name] == 0 {
			delete(n.creating, name)
		}
	}), nil
}

// BeginDelete marks name as being deleted (Deleting says so, and the
// daemon starts none of its VMs) until end; it refuses while the function
// is being created or deployed, or deleted already.
func (n *Names) BeginDelete(name string) (end func(), err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.creating[name] != 0:
		return nil, fmt.Errorf("%w: function %q is being created or deployed; delete it when that is done", errdefs.ErrConflict, name)
	case n.deleting[name]:
		return nil, fmt.Errorf("%w: function %q is being deleted already", errdefs.ErrConflict, name)
	}
	n.deleting[name] = true
	return n.underLock(func() { delete(n.deleting, name) }), nil
}

// Deleting says whether a delete of name is under way.
func (n *Names) Deleting(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deleting[name]
}
