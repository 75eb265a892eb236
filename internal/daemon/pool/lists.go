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
