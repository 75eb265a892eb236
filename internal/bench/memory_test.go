package bench

import (
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

func TestMemoryMarkdown(t *testing.T) {
	r := &MemoryResult{Strategies: []string{"reap", "premap"}, Clones: []int{1, 4},
		Samples: []MemorySample{
			{Function: "hello", Strategy: "reap", Clones: 1, AnonBytes: 30 << 20, TotalBytes: 30 << 20, PerCloneBytes: 30 << 20},
			{Function: "hello", Strategy: "reap", Clones: 4, AnonBytes: 120 << 20, TotalBytes: 120 << 20, PerCloneBytes: 30 << 20},
			{Function: "hello", Strategy: "premap", Clones: 4, AnonBytes: 100 << 20, StoreBytes: 84 << 20,
				TotalBytes: 184 << 20, PerCloneBytes: 46 << 20},
		}}
	md := r.Markdown()
	benchtest.WantAll(t, "markdown", md,
		"| reap | 30.0 (30) | 30.0 (120) | 30.0 | 0.0 |",
		"| premap | – | 46.0 (184) | 25.0 | 84.0 |",
		"**hello**",
	)
}

func TestMemoryFigures(t *testing.T) {
	r := &MemoryResult{Strategies: []string{"reap", "premap"}, Clones: []int{1, 4},
		Samples: []MemorySample{
			{Function: "hello", Strategy: "reap", Clones: 1, PerCloneBytes: 30 << 20},
			{Function: "hello", Strategy: "reap", Clones: 4, PerCloneBytes: 30 << 20},
			{Function: "hello", Strategy: "premap", Clones: 4, PerCloneBytes: 46 << 20},
		}}
	figs := r.Figures()
	svg := figs["memory-hello.svg"]
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "premap") || !strings.Contains(svg, "MiB per clone") {
		t.Fatalf("figure: %.300s", svg)
	}
}
