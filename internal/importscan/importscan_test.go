package importscan

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("THAW_IMAGE") != "" {
			t.Fatalf("python3 is missing (scripts/install-deps.sh installs it): %v", err)
		}
		t.Skip("python3 is not installed (make test installs it and runs this)")
	}
}

func write(t *testing.T, dir, name, code string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestScanFindsImportTimeCalls(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	write(t, dir, "handler.py", `import random, time, uuid
import numpy as np
import socket
from datetime import datetime
from secrets import token_hex as tok
import requests

SEED = random.random()                 # 8
STARTED = time.time()                  # 9
ID = str(uuid.uuid4())                 # 10
NOISE = np.random.rand(3)              # 11
WHEN = datetime.now()                  # 12
TOKEN = tok(8)                         # 13
CONN = socket.create_connection(("10.0.2.2", 6379))  # 14

class Config:
    created = time.time()              # 17

def handle(event, started=time.monotonic()):
    return random.random(), time.time(), requests.get("http://x")  # runs later: not reported

def random_local():
    pass

LATER = lambda: uuid.uuid4()           # 25: not reported
random_local()                         # 26: not an import
`)
	write(t, dir, "helper.py", "import os\nKEY = os.urandom(16)\n")
	write(t, dir, "broken.py", "def (:\n")
	write(t, dir, "pkg/deep.py", "import random\nX = random.random()\n")
	found, err := Scan(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.String()[:strings.Index(f.String(), " runs")]+" "+f.Kind)
	}
	want := []string{"handler.py:8: random.random() random", "handler.py:9: time.time() time", "handler.py:10: uuid.uuid4() random",
		"handler.py:11: numpy.random.rand() random", "handler.py:12: datetime.datetime.now() time",
		"handler.py:13: secrets.token_hex() random", "handler.py:14: socket.create_connection() network",
		"handler.py:17: time.time() time", "helper.py:2: os.urandom() random"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(found[0].String(), "on_restore()") {
		t.Errorf("a warning says where the call belongs: %s", found[0])
	}
}

func TestScanOfCleanCode(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	write(t, dir, "handler.py", "import os\nGREETING = os.environ.get('GREETING')\n\ndef handle(e):\n    return GREETING\n")
	found, err := Scan(context.Background(), dir)
	if err != nil || len(found) != 0 {
		t.Fatalf("clean code: %v %v", found, err)
	}
}

func TestScanWithoutPython(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := Scan(context.Background(), t.TempDir()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("without python3: %v", err)
	}
}
