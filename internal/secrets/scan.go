package secrets

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// ErrFound: a file holds a secret's value (Found says which and where).
var ErrFound = errors.New("file holds a secret")

// Found is a secret found in a file. Its message names the secret, the
// form and where, never the value.
type Found struct {
	Secret string
	Form   string
	File   string // as the caller named it (relative to the scanned directory)
	Offset int64
}

func (f *Found) Error() string {
	return fmt.Sprintf("%s holds the value of secret %q (%s) at offset %#x", f.File, f.Secret, f.Form, f.Offset)
}

func (f *Found) Unwrap() error { return ErrFound }

// Scanner searches bytes for many patterns at once.
//
// Every pattern is at least minPatternLen (7) bytes long, so every
// occurrence of one, wherever it starts, covers a 4-byte window at a
// 4-aligned offset that begins within the pattern's first 4 bytes. The
// scanner registers each pattern's 4 windows at offsets 0-3 and reads the
// data one aligned 32-bit word at a time: a word is tested against a bit
// table of the registered words' hashes (a few cycles, almost always a
// miss), and only on a hit looked up exactly and the candidates compared
// in full. The cost is one load and one table test per 4 bytes, whatever
// the number of patterns.
type Scanner struct {
	pats   []Pattern
	maxLen int
	salt   uint32
	table  *[tableSize]byte // 1 at hash(word) of every registered word
	keys   []uint32         // open addressing: registered words (0: empty slot)
	vals   []int32          // index into cands
	cands  [][]cand
	// zeroIdx is the candidates of the word 0, which the open addressing
	// cannot hold (-1: none).
	zeroIdx int32
}

// cand is pattern pat with a registered window at offset off.
type cand struct {
	pat int32
	off int32
}

const (
	hashMul = 0x9e3779b1
	// tableBits sizes the filter table: 1 MiB, so that even the largest
	// store (MaxSecrets values, 9 forms, 4 windows each: 9216 words)
	// leaves a random word a hit about once in a hundred.
	tableBits = 20
	tableSize = 1 << tableBits
)

// NewScanner builds a scanner for pats; patterns shorter than 7 bytes are
// left out (Patterns makes none).
func NewScanner(pats []Pattern) *Scanner {
	sc := &Scanner{zeroIdx: -1}
	byWord := map[uint32][]cand{}
	for _, p := range pats {
		if len(p.Bytes) < minPatternLen {
			continue
		}
		i := int32(len(sc.pats))
		sc.pats = append(sc.pats, p)
		sc.maxLen = max(sc.maxLen, len(p.Bytes))
		for j := range 4 {
			w := binary.LittleEndian.Uint32(p.Bytes[j:])
			byWord[w] = append(byWord[w], cand{i, int32(j)})
		}
	}
	if len(sc.pats) == 0 {
		return sc
	}
	slots := 1
	for slots < 2*len(byWord) {
		slots <<= 1
	}
	sc.keys, sc.vals = make([]uint32, slots), make([]int32, slots)
	words := make([]uint32, 0, len(byWord))
	for w := range byWord {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool { return words[i] < words[j] })
	// Zero words fill guest memory; a salt keeps them off a marked slot.
	sc.table = new([tableSize]byte)
	for sc.salt = 0; ; sc.salt++ {
		clear(sc.table[:])
		for _, w := range words {
			sc.table[sc.hash(w)] = 1
		}
		if sc.table[sc.hash(0)] == 0 || sc.salt > 64 {
			break
		}
	}
	for _, w := range words {
		sc.put(w, int32(len(sc.cands)))
		sc.cands = append(sc.cands, byWord[w])
	}
	return sc
}

func (sc *Scanner) hash(w uint32) uint32 { return ((w ^ sc.salt) * hashMul) >> (32 - tableBits) }

// put records that word w's candidates are cands[idx].
func (sc *Scanner) put(w uint32, idx int32) {
	if w == 0 { // a pattern with 4 zero bytes in a row: tested on every zero word
		sc.zeroIdx = idx
		return
	}
	mask := uint32(len(sc.keys) - 1)
	for i := (w * hashMul) & mask; ; i = (i + 1) & mask {
		if sc.keys[i] == 0 {
			sc.keys[i], sc.vals[i] = w, idx
			return
		}
	}
}

// lookup is the index of w's candidates, or -1.
func (sc *Scanner) lookup(w uint32) int32 {
	if w == 0 {
		return sc.zeroIdx
	}
	mask := uint32(len(sc.keys) - 1)
	for i := (w * hashMul) & mask; ; i = (i + 1) & mask {
		switch sc.keys[i] {
		case w:
			return sc.vals[i]
		case 0:
			return -1
		}
	}
}

// Empty says whether the scanner has no pattern (nothing can be found).
func (sc *Scanner) Empty() bool { return len(sc.pats) == 0 }

// scan looks for patterns in buf, whose first byte is at offset base of
// the data: only occurrences whose aligned window starts at a buffer index
// in [from, to) are reported (from and base+from 4-aligned), so adjacent
// calls with overlapping buffers report each occurrence once. It returns
// the first occurrence, or nil.
func (sc *Scanner) scan(buf []byte, base int64, from, to int) *Found {
	if len(sc.pats) == 0 {
		return nil
	}
	to = min(to, len(buf)-3)
	table, salt := sc.table, sc.salt
	i := from
	// Two words per load; a hit on either is looked at word by word.
	for ; i+4 < to; i += 8 { // to <= len(buf)-3: both words are in buf
		x := binary.LittleEndian.Uint64(buf[i:])
		w0, w1 := uint32(x), uint32(x>>32)
		if table[((w0^salt)*hashMul)>>(32-tableBits)]|table[((w1^salt)*hashMul)>>(32-tableBits)] == 0 {
			continue
		}
		if f := sc.verify(buf, base, i, w0); f != nil {
			return f
		}
		if f := sc.verify(buf, base, i+4, w1); f != nil {
			return f
		}
	}
	for ; i < to; i += 4 {
		w := binary.LittleEndian.Uint32(buf[i:])
		if table[((w^salt)*hashMul)>>(32-tableBits)] == 0 {
			continue
		}
		if f := sc.verify(buf, base, i, w); f != nil {
			return f
		}
	}
	return nil
}

// verify compares in full the candidates of word w found at buf[i:].
func (sc *Scanner) verify(buf []byte, base int64, i int, w uint32) *Found {
	idx := sc.lookup(w)
	if idx < 0 {
		return nil
	}
	for _, c := range sc.cands[idx] {
		p := sc.pats[c.pat]
		s := i - int(c.off)
		if s < 0 || s+len(p.Bytes) > len(buf) {
			continue
		}
		if bytes.Equal(buf[s:s+len(p.Bytes)], p.Bytes) {
			return &Found{Secret: p.Secret, Form: p.Form, Offset: base + int64(s)}
		}
	}
	return nil
}

// scanChunk is how much of a file one read covers at most; maxGap the
// longest hole a read goes through to reach the next data extent (so a
// file of many small extents takes few reads).
const (
	scanChunk = 4 << 20
	maxGap    = 64 << 10
)

// File looks for every pattern in the file at path, reading only its data
// extents (SEEK_DATA/SEEK_HOLE; holes are zeros, which no pattern's
// aligned window can be, a value having no NUL) in a read-only mapping of
// the file (or, where it cannot be mapped, with reads that take nearby
// extents together). The first occurrence is returned as a *Found naming
// the file as name.
func (sc *Scanner) File(ctx context.Context, path, name string) error {
	if len(sc.pats) == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("scan %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("scan %s: %w", name, err)
	}
	err = sc.mapped(ctx, f, fi.Size())
	if errors.Is(err, errNoMapping) {
		err = sc.read(ctx, f, fi.Size())
	}
	var found *Found
	if errors.As(err, &found) {
		found.File = name
		return found
	}
	if err != nil {
		return fmt.Errorf("scan %s: %w", name, err)
	}
	return nil
}

var errNoMapping = errors.New("file cannot be mapped")

// mapped scans f's data extents in a read-only shared mapping of it. A
// fault (the file cut short meanwhile, which thaw never does to a
// snapshot) is an error, not a crash.
func (sc *Scanner) mapped(ctx context.Context, f *os.File, size int64) (err error) {
	if size == 0 || size != int64(int(size)) {
		return errNoMapping
	}
	m, merr := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if merr != nil {
		return errNoMapping
	}
	defer unix.Munmap(m)
	_ = unix.Madvise(m, unix.MADV_SEQUENTIAL)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			err = fmt.Errorf("the file changed while it was read: %v", r)
		}
	}()
	return snapshot.DataExtents(f, size, func(data, hole int64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if found := sc.scan(m, 0, int(data&^3), int(hole)); found != nil {
			return found
		}
		return nil
	})
}

// read scans f's data extents with reads, nearby extents in one read.
func (sc *Scanner) read(ctx context.Context, f *os.File, size int64) error {
	r := &fileScan{sc: sc, f: f, size: size, buf: make([]byte, 4+scanChunk+sc.maxLen)}
	err := snapshot.DataExtents(f, size, func(data, hole int64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		for c := data &^ 3; c < hole; c += scanChunk {
			if err := r.add(c, min(hole, c+scanChunk)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = r.flush()
	}
	return err
}

// fileScan batches a file's data extents into reads of up to scanChunk.
type fileScan struct {
	sc    *Scanner
	f     *os.File
	size  int64
	buf   []byte
	batch [][2]int64 // extents [from, to) to scan, from 4-aligned
}

// add queues [from, to) for scanning, reading what is queued first if it
// is too far away or the read would grow too long.
func (r *fileScan) add(from, to int64) error {
	if n := len(r.batch); n > 0 && (from-r.batch[n-1][1] > maxGap || to-r.batch[0][0] > scanChunk) {
		if err := r.flush(); err != nil {
			return err
		}
	}
	r.batch = append(r.batch, [2]int64{from, to})
	return nil
}

// flush reads the queued extents in one read (with the bytes around them
// that candidates starting before or ending after them need) and scans
// each; a find is returned as a *Found.
func (r *fileScan) flush() error {
	if len(r.batch) == 0 {
		return nil
	}
	lo, hi := max(0, r.batch[0][0]-4), min(r.size, r.batch[len(r.batch)-1][1]+int64(r.sc.maxLen))
	n, err := r.f.ReadAt(r.buf[:hi-lo], lo)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for _, e := range r.batch {
		if found := r.sc.scan(r.buf[:n], lo, int(e[0]-lo), int(e[1]-lo)); found != nil {
			return found
		}
	}
	r.batch = r.batch[:0]
	return nil
}

// Dir looks for every pattern in every regular file under dir (symbolic
// links are not followed); a *Found names the file relative to dir.
func (sc *Scanner) Dir(ctx context.Context, dir string) error {
	if len(sc.pats) == 0 {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		return sc.File(ctx, p, rel)
	})
}
