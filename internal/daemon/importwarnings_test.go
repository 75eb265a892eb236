package daemon

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
)

// A function whose module-level code draws a random number is created,
// with a warning that names the file, the line and the call.
func TestImportWarnings(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the daemon reads no code without it")
	}
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	fn, err := s.CreateFunction(ctx, FunctionSpec{Name: "seeded", Archive: bytes.NewReader(archivetest.TarGz(t,
		archivetest.Entry{Name: "handler.py", Body: "import random\n\nSEED = random.random()\n\ndef handle(e):\n    return SEED\n"}))})
	if err != nil {
		t.Fatal(err)
	}
	w := s.ImportWarnings(ctx, fn)
	if len(w) != 1 || !strings.HasPrefix(w[0], "handler.py:3: random.random() runs at import") {
		t.Fatalf("warnings %q", w)
	}
	clean, err := s.CreateFunction(ctx, FunctionSpec{Name: "clean", Archive: bytes.NewReader(archivetest.TarGz(t,
		archivetest.Entry{Name: "handler.py", Body: "import random\n\ndef handle(e):\n    return random.random()\n"}))})
	if err != nil {
		t.Fatal(err)
	}
	if w := s.ImportWarnings(ctx, clean); len(w) != 0 {
		t.Fatalf("clean code warned %q", w)
	}
}
