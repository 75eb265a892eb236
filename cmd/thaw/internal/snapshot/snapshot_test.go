package snapshot

import (
	"bytes"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli/clitest"
)

func TestPrintStoreDevDAX(t *testing.T) {
	var out bytes.Buffer
	a := &app{&cli.App{Stdout: &out}}
	err := a.printStore(&client.StoreInfo{Available: true, Dir: "/dev/dax0.0", Kind: "devdax", PageSize: 2 << 20,
		CapacityBytes: 126 << 20, FreeBytes: 26 << 20, UsedBytes: 50 << 20, ReservedBytes: 50 << 20, Clones: 2,
		Entries: []client.StoreEntry{{Snapshot: "snap-1", Size: 256 << 20, Bytes: 50 << 20, Regions: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	clitest.WantContains(t, "stdout", out.String(), "devdax (2.0 MiB units)", "Held by clones:", "50.0 MiB (2 live)", "snap-1")
}
