package inputs

import (
	"context"
	"fmt"
)

// Load generates every requested input and SETs it in r under its Key,
// returning the Meta of each by key. Empty functions means all of them
// (Functions()); empty variants means "A" and "B"; empty scales means each
// variant's Table 2 size (NominalScale: A at 1, B at Spec.BScale). Otherwise
// every function × variant × scale is generated; the fixed functions (hello,
// read-list, mmap) store the same bytes under every key.
func Load(ctx context.Context, r *Redis, functions []string, variants []string, scales []float64) (map[string]Meta, error) {
	if len(functions) == 0 {
		functions = Functions()
	}
	if len(variants) == 0 {
		variants = []string{"A", "B"}
	}
	out := make(map[string]Meta)
	for _, f := range functions {
		for _, v := range variants {
			ss := scales
			if len(ss) == 0 {
				s, err := NominalScale(f, v)
				if err != nil {
					return out, err
				}
				ss = []float64{s}
			}
			for _, s := range ss {
				data, m, err := Generate(f, v, s)
				if err != nil {
					return out, err
				}
				if err := r.Set(ctx, m.Key, data); err != nil {
					return out, fmt.Errorf("inputs: SET %s (%d bytes) on %s: %w", m.Key, len(data), r.Addr(), err)
				}
				out[m.Key] = m
			}
		}
	}
	return out, nil
}
