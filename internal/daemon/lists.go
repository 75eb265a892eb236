package daemon

import "time"

// Both pools (keep-alive and VMM) keep their VMs in lists by key, oldest
// first; these read such lists under the pool's lock.

// where is every element of lists that match selects.
func where[K comparable, T any](lists map[K][]T, match func(T) bool) []T {
	var out []T
	for _, list := range lists {
		for _, x := range list {
			if match(x) {
				out = append(out, x)
			}
		}
	}
	return out
}

// oldest is the first element of the list whose first element is oldest;
// false if every list is empty.
func oldest[K comparable, T any](lists map[K][]T, since func(T) time.Time) (T, bool) {
	var o T
	found := false
	for _, list := range lists {
		if len(list) > 0 && (!found || since(list[0]).Before(since(o))) {
			o, found = list[0], true
		}
	}
	return o, found
}

// count is how many elements the lists hold.
func count[K comparable, T any](lists map[K][]T) int {
	n := 0
	for _, list := range lists {
		n += len(list)
	}
	return n
}
