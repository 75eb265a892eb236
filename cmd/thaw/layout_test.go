package main

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCommandPackagesLayout: the command packages under internal/ import
// only the shared ones (cli, output), never one another, and the shared
// ones import no command package.
func TestCommandPackagesLayout(t *testing.T) {
	const prefix = "github.com/thaw-dev/thaw/cmd/thaw/internal/"
	// What the shared packages may import; a command package may import
	// them all.
	shared := map[string][]string{"cli": {"output", "cli/clitest"}, "cli/clitest": {"cli", "output"}, "output": nil}
	group := []string{"cli", "cli/clitest", "output"}
	dirs, err := filepath.Glob("internal/*")
	if err != nil {
		t.Fatal(err)
	}
	dirs = append(dirs, "internal/cli/clitest")
	groups := 0
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		pkg := strings.TrimPrefix(filepath.ToSlash(dir), "internal/")
		allowed, isShared := shared[pkg]
		if !isShared {
			allowed = group
			groups++
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				dep, ok := strings.CutPrefix(path, prefix)
				if ok && dep != pkg && !slices.Contains(allowed, dep) {
					t.Errorf("%s imports %s: a command package may import only cli and output, and cli and output no command package", file, path)
				}
			}
		}
	}
	if groups < 10 {
		t.Errorf("found %d command packages under internal/, want the CLI's groups", groups)
	}
}
