package bench

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/bench/inputs"
)

// RedisCases builds the cases of FaaSnap's execution-time experiment for
// functions whose inputs live in r (loaded with inputs.Load): prepare with
// one variant (the record input) and test with the other, each at its
// Table 2 size, so the test input differs in content and size ("record A /
// test B"; swap the variants for "record B / test A").
func RedisCases(r *inputs.Redis, root string, functions []string, record, test string) ([]FunctionCase, error) {
	var out []FunctionCase
	for _, fn := range functions {
		ev := func(variant string) (json.RawMessage, error) {
			scale, err := inputs.NominalScale(fn, variant)
			if err != nil {
				return nil, err
			}
			return json.Marshal(r.Event(inputs.Key(fn, variant, scale)))
		}
		rec, err := ev(record)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn, err)
		}
		tst, err := ev(test)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fn, err)
		}
		mem := 512
		if fn == "hello" {
			mem = 256
		}
		out = append(out, FunctionCase{Name: fn, Dir: filepath.Join(root, "functions", fn), MemoryMiB: mem,
			RecordEvent: rec, TestEvent: tst, Services: []string{r.Addr()}})
	}
	return out, nil
}
