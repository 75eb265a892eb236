package pool

import (
	"sync"
	"time"
)

// The pools (keep-alive, VMM, ready clones) keep their VMs in lists by
// key, oldest first, under the pool's lock. These read the lists under that lock and
// act on what they found after releasing it (stopping a VM takes time).

// eachWhere calls do with every element of lists that match selects.
func eachWhere[K comparable, T any](mu *sync.Mutex, lists *map[K][]T, match func(T) bool, do func(T)) {
	var found []T
	mu.Lock()
	for _, list := range *lists {
		for _, x := range list {
			if match(x) {
				found = append(found, x)
			}
		}
	}
	mu.Unlock()
	for _, x := range found {
		do(x)
	}
}

// removeWhere takes every element match selects out of the lists, calling
// removed with each under the lock; false if there were none.
func removeWhere[K comparable, T any](mu *sync.Mutex, lists *map[K][]T, match func(T) bool, removed func(T)) bool {
	mu.Lock()
	defer mu.Unlock()
	found := false
	for key, list := range *lists {
		kept := list[:0:0]
		for _, x := range list {
			if match(x) {
				removed(x)
				found = true
			} else {
				kept = append(kept, x)
			}
		}
		(*lists)[key] = kept
	}
	return found
}

// withOldest calls do with the first element of the list whose first
// element is oldest; false if every list is empty.
func withOldest[K comparable, T any](mu *sync.Mutex, lists *map[K][]T, since func(T) time.Time, do func(T)) bool {
	var o T
	found := false
	mu.Lock()
	for _, list := range *lists {
		if len(list) > 0 && (!found || since(list[0]).Before(since(o))) {
			o, found = list[0], true
		}
	}
	mu.Unlock()
	if found {
		do(o)
	}
	return found
}

// count is how many elements the lists hold.
func count[K comparable, T any](mu *sync.Mutex, lists *map[K][]T) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, list := range *lists {
		n += len(list)
	}
	return n
}

// stopAll stops every element's timer and empties the lists (the pool is
// closing; the daemon stops the VMs themselves).
func stopAll[K comparable, T any](mu *sync.Mutex, lists *map[K][]T, timer func(T) *time.Timer) {
	mu.Lock()
	defer mu.Unlock()
	for _, list := range *lists {
		for _, x := range list {
			timer(x).Stop()
		}
	}
	*lists = map[K][]T{}
}

// doneFilling counts one fill of key less (the pool's lock held).
func doneFilling(filling map[Key]int, key Key) {
	if filling[key]--; filling[key] <= 0 {
		delete(filling, key)
	}
}

// waitFills waits, up to timeout, until no fill of snapshot id is under
// way (those begun before a drop are discarded when they end).
func waitFills(mu *sync.Mutex, filling map[Key]int, id string, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := 0
		for key, k := range filling {
			if key.Snapshot == id {
				n += k
			}
		}
		mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// setHeld marks snapshot id held (no fill starts for it) or not.
func setHeld(mu *sync.Mutex, held map[string]bool, id string, hold bool) {
	mu.Lock()
	defer mu.Unlock()
	if hold {
		held[id] = true
	} else {
		delete(held, id)
	}
}

// every calls f every interval, and whenever kick receives (nil: never),
// until stop is closed.
func every(stop <-chan struct{}, interval time.Duration, kick <-chan struct{}, f func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-kick:
		}
		f()
	}
}
