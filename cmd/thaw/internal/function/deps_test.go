package function

import (
	"bytes"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
)

// thaw function get shows what requirements.txt asked for, what was
// installed (hashes shortened) and the layer; a function without says so.
func TestWriteDeps(t *testing.T) {
	var b bytes.Buffer
	sum := strings.Repeat("f6", 32)
	writeDeps(&b, &client.FunctionDeps{Requested: []string{"chameleon>=4", "igraph==1.0.0"},
		Resolved: []string{"chameleon==4.6.0 --hash=sha256:" + sum, "igraph==1.0.0 --hash=sha256:" + sum},
		Layer:    strings.Repeat("3c", 32), LayerBytes: 9359360, Format: "erofs"})
	got := b.String()
	for _, want := range []string{"Requirements:\tchameleon>=4\n\tigraph==1.0.0\n", "Installed:\tchameleon==4.6.0 sha256:f6f6f6f6f6f6\n",
		"Layer:\t3c3c3c3c3c3c (erofs, 8.9 MiB)"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	b.Reset()
	writeDeps(&b, nil)
	if !strings.Contains(b.String(), "Requirements:\tnone") {
		t.Errorf("without deps: %q", b.String())
	}
}
