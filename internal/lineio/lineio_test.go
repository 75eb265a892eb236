package lineio

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	long := strings.Repeat("x", 100)
	rd := bufio.NewReaderSize(strings.NewReader("a\r\n"+long+"\n"+long+"y\nlast"), 16)
	for _, want := range []string{"a", long} {
		if got, err := Read(rd, 100, "line"); err != nil || string(got) != want {
			t.Fatalf("Read = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := Read(rd, 100, "reply"); err == nil || err.Error() != "reply longer than 100 bytes" {
		t.Fatalf("over-long line: %v", err)
	}
	rd = bufio.NewReader(strings.NewReader("last"))
	if got, err := Read(rd, 100, "line"); err != nil || string(got) != "last" {
		t.Fatalf("unterminated last line: %q, %v", got, err)
	}
	if _, err := Read(rd, 100, "line"); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}
