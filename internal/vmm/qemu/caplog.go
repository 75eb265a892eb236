package qemu

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// DefaultConsoleLimit bounds a guest's console log when the spec names none.
const DefaultConsoleLimit = 1 << 20

// tailBytes of output past the limit are kept and written at close, so the
// log always ends with the guest's last words (a panic, the agent's error).
const tailBytes = 16 << 10

// cappedLog writes the first max bytes to a file, then keeps only the last
// tailBytes in memory; Close appends a note of what was dropped and that
// tail. Guest code can print without bound; the host's disk must not pay.
type cappedLog struct {
	mu      sync.Mutex
	f       *os.File
	max     int64
	written int64
	dropped int64
	tail    []byte // ring of the newest bytes past max
	pos     int
	full    bool
	closed  bool
}

func newCappedLog(path string, max int64) (*cappedLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return &cappedLog{f: f, max: max}, nil
}

func (c *cappedLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, os.ErrClosed
	}
	n := len(p)
	if room := c.max - c.written; room > 0 {
		k := min(int64(len(p)), room)
		w, err := c.f.Write(p[:k])
		c.written += int64(w)
		if err != nil {
			return w, err
		}
		p = p[k:]
	}
	if len(p) > 0 {
		c.keep(p)
	}
	return n, nil
}

// keep puts p into the tail ring and counts what falls out of it.
func (c *cappedLog) keep(p []byte) {
	if c.tail == nil {
		c.tail = make([]byte, tailBytes)
	}
	c.dropped += int64(len(p))
	for len(p) > 0 {
		k := copy(c.tail[c.pos:], p)
		p = p[k:]
		c.pos += k
		if c.pos == len(c.tail) {
			c.pos, c.full = 0, true
		}
	}
}

// Close writes the dropped-bytes note and the tail, then closes the file.
func (c *cappedLog) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.dropped > 0 {
		var tail []byte
		if c.full {
			tail = append(append(tail, c.tail[c.pos:]...), c.tail[:c.pos]...)
		} else {
			tail = c.tail[:c.pos]
		}
		kept := int64(len(tail))
		fmt.Fprintf(c.f, "\n[thaw: output beyond %d bytes was dropped: %d bytes; the last %d follow]\n", c.max, c.dropped-kept, kept)
		_, _ = c.f.Write(tail)
	}
	return c.f.Close()
}

// copyConsole copies the guest console from QEMU's socket into a capped
// log until QEMU closes it.
func copyConsole(from *os.File, path string, limit int64) {
	defer from.Close()
	if limit <= 0 {
		limit = DefaultConsoleLimit
	}
	log, err := newCappedLog(path, limit)
	if err != nil {
		_, _ = io.Copy(io.Discard, from) // keep QEMU's serial port draining
		return
	}
	_, _ = io.Copy(log, from)
	log.Close()
}
