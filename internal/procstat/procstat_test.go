package procstat

import (
	"os"
	"testing"
)

func TestReadSelf(t *testing.T) {
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Touch fresh memory: minor faults must grow.
	b := make([]byte, 8<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.MinorFaults == 0 || after.RssAnonKiB == 0 {
		t.Fatalf("counters did not move: %+v", d)
	}
	if _, err := Read(1 << 30); err == nil {
		t.Fatal("reading a pid that does not exist succeeded")
	}
}
