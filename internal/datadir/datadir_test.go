package datadir

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// A second daemon on a data directory is refused and names the holder.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	first, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second lock = %v", err)
	}
	first.Close()
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}
