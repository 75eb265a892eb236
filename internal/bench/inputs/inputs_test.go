package inputs

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image/jpeg"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var testScales = []float64{0.25, 0.5, 1, 2, 4}

type genResult struct {
	data []byte
	meta Meta
}

var genCache sync.Map // Key -> genResult

// mustGenerate returns Generate's result, generated once per test binary
// (TestDeterministic compares fresh generations against these).
func mustGenerate(t *testing.T, f, v string, s float64) ([]byte, Meta) {
	t.Helper()
	if r, ok := genCache.Load(Key(f, v, s)); ok {
		return r.(genResult).data, r.(genResult).meta
	}
	data, m, err := Generate(f, v, s)
	if err != nil {
		t.Fatalf("Generate(%s, %s, %v): %v", f, v, s, err)
	}
	genCache.Store(Key(f, v, s), genResult{data, m})
	return data, m
}

// perFunction runs fn for every Spec as a parallel subtest.
func perFunction(t *testing.T, fn func(t *testing.T, spec Spec)) {
	for _, spec := range Specs() {
		t.Run(spec.Function, func(t *testing.T) {
			t.Parallel()
			fn(t, spec)
		})
	}
}

func TestDeterministic(t *testing.T) {
	perFunction(t, func(t *testing.T, spec Spec) {
		for _, v := range []string{"A", "B"} {
			for _, s := range []float64{0.25, 1} {
				d1, m1 := mustGenerate(t, spec.Function, v, s)
				d2, m2, err := Generate(spec.Function, v, s)
				if err != nil || !bytes.Equal(d1, d2) || m1 != m2 {
					t.Errorf("%s %s x%v: two generations differ (%v)", spec.Function, v, s, err)
				}
			}
		}
	})
}

// Pinned digests of input A at scale 1: the bytes must not change between
// runs, machines or refactorings (a deliberate change of a generator updates
// them). JPEGs are left out: their bytes belong to image/jpeg's encoder.
var golden = map[string]string{
	"hello":       "a9285749e6c9dfbfa749ae6f3586f904ae96ab48689b3dd1523edf7c74836885",
	"read-list":   "cc1a2fd6f394b19ee34c4f4dab57dc948f20b3aa9e39c606465b52a12e0db0a1",
	"mmap":        "2ff378cf035dc10ff87a2812c8a086ccff5740387263d31d71daf4aad578b495",
	"json":        "500250e1c2d93263ad1700a249b8de0bc7b61a90d1c2e966a5f020e3dd90fadd",
	"pyaes":       "f4c0cf3d193f0d1fd8e1117aa04f7ff14b2a52140693886a3090cb34bce22d94",
	"chameleon":   "e8447ee09db1d614d1bf12a36488724f84a583543767ccd0d211ffe54ddedc57",
	"matmul":      "e53dc78c5de2568cfbdb8310d5ad4fd227a4bbf1796462faeebb63ac4389de26",
	"ffmpeg":      "10f11000ecbad287f8c6cead035fc2ad05b094e071c784996379a6d738f72584",
	"compression": "d468b1ca1cfa8c5d14b084d08dd945311ffc12c6413ff0bb8fbf2b34955d78b3",
	"pagerank":    "4f6f95bb781934811ec2c6c0965197e20866957f15777890cf3ca7a68db652aa",
}

func TestGolden(t *testing.T) {
	for f, want := range golden {
		_, m := mustGenerate(t, f, "A", 1)
		if m.SHA256 != want {
			t.Errorf("%s A x1: sha256 %s, pinned %s", f, m.SHA256, want)
		}
	}
}

func TestVariantsDiffer(t *testing.T) {
	perFunction(t, func(t *testing.T, spec Spec) {
		for _, s := range []float64{0.5, 1, 2} {
			a, ma := mustGenerate(t, spec.Function, "A", s)
			b, mb := mustGenerate(t, spec.Function, "B", s)
			if spec.Fixed {
				if !bytes.Equal(a, b) {
					t.Errorf("%s is fixed but A and B differ", spec.Function)
				}
				continue
			}
			if bytes.Equal(a, b) {
				t.Errorf("%s x%v: A and B are the same bytes", spec.Function, s)
			}
			if ma.Key == mb.Key {
				t.Errorf("%s: A and B share key %s", spec.Function, ma.Key)
			}
		}
		// Table 2: B is larger than A.
		_, a := mustGenerate(t, spec.Function, "A", 1)
		_, b := mustGenerate(t, spec.Function, "B", spec.BScale)
		if !spec.Fixed && (b.Volume() <= a.Volume() || spec.BScale <= 1) {
			t.Errorf("%s: B (%s) not larger than A (%s)", spec.Function, b.Summary(), a.Summary())
		}
	})
}

func TestScaleMonotonic(t *testing.T) {
	perFunction(t, func(t *testing.T, spec Spec) {
		_, a := mustGenerate(t, spec.Function, "A", 1)
		var prev Meta
		for i, s := range testScales {
			_, m := mustGenerate(t, spec.Function, "B", s)
			if i > 0 {
				switch {
				case spec.Fixed:
					if m.SHA256 != prev.SHA256 {
						t.Errorf("%s: fixed input changes with scale", spec.Function)
					}
				case m.Volume() <= prev.Volume():
					t.Errorf("%s: volume %d at x%v not above %d at x%v", spec.Function, m.Volume(), s, prev.Volume(), prev.Scale)
				case spec.Format != FormatParams && m.Bytes <= prev.Bytes:
					t.Errorf("%s: %d bytes at x%v not above %d at x%v", spec.Function, m.Bytes, s, prev.Bytes, prev.Scale)
				}
			}
			if !spec.Fixed {
				// the scaled quantity tracks scale (within rounding)
				// json ends within a record (~1.5 KB) past its target
				want, slack := s*float64(a.Volume()), 0.0
				if spec.Format == FormatJSON {
					slack = 1500
				}
				if got := float64(m.Volume()); math.Abs(got-want) > 0.08*want+slack {
					t.Errorf("%s x%v: volume %v, want about %v", spec.Function, s, got, want)
				}
			}
			prev = m
		}
	})
}

func TestValid(t *testing.T) {
	perFunction(t, func(t *testing.T, spec Spec) {
		for _, v := range []string{"A", "B"} {
			for _, s := range []float64{0.25, 1, spec.BScale, 4} {
				data, m := mustGenerate(t, spec.Function, v, s)
				if m.Bytes != len(data) || m.Format != spec.Format || m.Key != Key(spec.Function, v, s) {
					t.Errorf("%s %s x%v: meta %+v inconsistent", spec.Function, v, s, m)
				}
				if err := validate(spec.Function, data, m); err != nil {
					t.Errorf("%s %s x%v: %v", spec.Function, v, s, err)
				}
			}
		}
	})
}

func validate(function string, data []byte, m Meta) error {
	switch m.Format {
	case FormatJPEG:
		return validateJPEG(data, m)
	case FormatJSON:
		return validateJSON(data, m)
	case FormatTable:
		return validateTable(data, m)
	case FormatText:
		return validateText(function, data, m)
	case FormatY4M:
		return validateY4M(data, m)
	case FormatEdgeList:
		return validateEdges(data, m)
	case FormatNPY:
		return validateNPY(data, m)
	case FormatParams:
		return validateParams(function, data, m)
	default:
		return fmt.Errorf("unknown format %q", m.Format)
	}
}

// validateJPEG checks that a JPEG input decodes at its size and quality.
func validateJPEG(data []byte, m Meta) error {
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if b := img.Bounds(); b.Dx() != m.Width || b.Dy() != m.Height {
		return fmt.Errorf("decoded %v, meta %dx%d", b, m.Width, m.Height)
	}
	if m.Width%8 != 0 || m.Height%8 != 0 || m.Quality != JPEGQuality {
		return fmt.Errorf("meta %+v", m)
	}
	return nil
}

// validateJSON checks that a JSON input has its records, well formed, near its target size.
func validateJSON(data []byte, m Meta) error {
	var doc struct {
		Count   int `json:"count"`
		Records []struct {
			ID      int `json:"id"`
			Name    string
			Address struct {
				Geo struct{ Lat, Lon float64 }
			}
			Orders []struct {
				Price float64
			}
		} `json:"records"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Count != m.Records || len(doc.Records) != m.Records || m.Records == 0 {
		return fmt.Errorf("%d records (count %d), meta %d", len(doc.Records), doc.Count, m.Records)
	}
	for i, r := range doc.Records {
		if r.ID != i+1 || r.Name == "" || math.Abs(r.Address.Geo.Lat) > 90 || math.Abs(r.Address.Geo.Lon) > 180 {
			return fmt.Errorf("record %d: %+v", i, r)
		}
	}
	want := scaled(JSONBaseBytes, m.Scale, 1)
	if len(data) < want || len(data) > want+3000 {
		return fmt.Errorf("%d bytes for a target of %d", len(data), want)
	}
	return nil
}

// validateTable checks that a table input has its rows and columns and cells that need escaping.
func validateTable(data []byte, m Meta) error {
	var tbl struct {
		Title  string   `json:"title"`
		Header []string `json:"header"`
		Rows   [][]any  `json:"rows"`
	}
	if err := json.Unmarshal(data, &tbl); err != nil {
		return err
	}
	if tbl.Title == "" || len(tbl.Rows) != m.Rows || len(tbl.Header) != m.Cols {
		return fmt.Errorf("%q: %d rows × %d columns, meta %d × %d", tbl.Title, len(tbl.Rows), len(tbl.Header), m.Rows, m.Cols)
	}
	for i, r := range tbl.Rows {
		if len(r) != m.Cols {
			return fmt.Errorf("row %d has %d cells", i, len(r))
		}
	}
	if !bytes.Contains(data, []byte(" & ")) || !bytes.Contains(data, []byte("<")) {
		return fmt.Errorf("no cells that need HTML escaping")
	}
	return nil
}

// validateText checks that a text input is printable, of its exact size, and compresses like text.
func validateText(function string, data []byte, m Meta) error {
	base := PyaesBaseBytes
	if function == "compression" {
		base = CompressionBaseBytes
	}
	if want := scaled(base, m.Scale, 16); len(data) != want {
		return fmt.Errorf("%d bytes, want %d", len(data), want)
	}
	for i, c := range data {
		if (c < 0x20 || c > 0x7e) && c != '\n' {
			return fmt.Errorf("byte %d is %#x", i, c)
		}
	}
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.DefaultCompression)
	w.Write(data)
	w.Close()
	if r := float64(len(data)) / float64(z.Len()); r < 1.5 || r > 6 {
		return fmt.Errorf("deflate ratio %.2f, want text-like 1.5..6", r)
	}
	return nil
}

// validateParams checks that a parameters input holds what its function reads.
func validateParams(function string, data []byte, m Meta) error {
	var p struct {
		Name   string `json:"name"`
		Passes int    `json:"passes"`
		MiB    int    `json:"mib"`
		Mode   string `json:"mode"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	switch function {
	case "hello":
		if p.Name == "" {
			return fmt.Errorf("no name: %s", data)
		}
	case "read-list":
		if p.Passes != m.Passes || p.Passes < 1 {
			return fmt.Errorf("%s vs meta %+v", data, m)
		}
	case "mmap":
		if p.MiB != m.MiB || p.Mode != m.Mode || p.MiB < 1 || (p.Mode != "page" && p.Mode != "fill") {
			return fmt.Errorf("%s vs meta %+v", data, m)
		}
	default:
		return fmt.Errorf("unexpected params function %s", function)
	}
	return nil
}

func validateY4M(data []byte, m Meta) error {
	hdr, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return fmt.Errorf("no header line")
	}
	fields := strings.Fields(string(hdr))
	if len(fields) == 0 || fields[0] != "YUV4MPEG2" {
		return fmt.Errorf("header %q", hdr)
	}
	var w, h int
	var fps, chroma string
	for _, f := range fields[1:] {
		switch f[0] {
		case 'W':
			w, _ = strconv.Atoi(f[1:])
		case 'H':
			h, _ = strconv.Atoi(f[1:])
		case 'F':
			fps = f[1:]
		case 'C':
			chroma = f[1:]
		}
	}
	if w != m.Width || h != m.Height || fps != fmt.Sprintf("%d:1", m.FPS) || chroma != "420jpeg" {
		return fmt.Errorf("header %q vs meta %+v", hdr, m)
	}
	frameLen := w*h + 2*((w+1)/2)*((h+1)/2)
	frames := 0
	for len(rest) > 0 {
		if !bytes.HasPrefix(rest, []byte("FRAME\n")) {
			return fmt.Errorf("frame %d: no FRAME marker", frames)
		}
		rest = rest[len("FRAME\n"):]
		if len(rest) < frameLen {
			return fmt.Errorf("frame %d: %d bytes, want %d", frames, len(rest), frameLen)
		}
		rest = rest[frameLen:]
		frames++
	}
	if frames != m.Frames || frames != scaled(VideoBaseFrames, m.Scale, 1) {
		return fmt.Errorf("%d frames, meta %d", frames, m.Frames)
	}
	if want := len(hdr) + 1 + frames*(len("FRAME\n")+frameLen); len(data) != want {
		return fmt.Errorf("%d bytes, want %d", len(data), want)
	}
	// frames move: the first and last luma planes differ
	if frames > 1 {
		first := data[len(hdr)+1+6 : len(hdr)+1+6+w*h]
		lastOff := len(data) - frameLen
		if bytes.Equal(first, data[lastOff:lastOff+w*h]) {
			return fmt.Errorf("first and last frames are identical")
		}
	}
	return nil
}

func validateEdges(data []byte, m Meta) error {
	if len(data)%8 != 0 {
		return fmt.Errorf("%d bytes: not uint32 pairs", len(data))
	}
	edges, maxNode := len(data)/8, -1
	seen := make(map[[2]int]bool)
	deg := make(map[int]int)
	for i := range edges {
		u := int(binary.LittleEndian.Uint32(data[8*i:]))
		v := int(binary.LittleEndian.Uint32(data[8*i+4:]))
		if u <= v {
			return fmt.Errorf("edge %d: %d %d (want new node first)", i, u, v)
		}
		k := [2]int{v, u}
		if seen[k] {
			return fmt.Errorf("duplicate edge %d %d", u, v)
		}
		seen[k] = true
		deg[u]++
		deg[v]++
		maxNode = max(maxNode, u)
	}
	if edges != m.Edges || maxNode+1 != m.Nodes || len(deg) != m.Nodes {
		return fmt.Errorf("%d edges over %d nodes (%d with edges), meta %d edges %d nodes", edges, maxNode+1, len(deg), m.Edges, m.Nodes)
	}
	if want := scaled(PagerankBaseNodes, m.Scale, PagerankAttach+1); m.Nodes != want {
		return fmt.Errorf("%d nodes, want %d", m.Nodes, want)
	}
	// preferential attachment: a heavy tail, the top node far above the mean
	top := 0
	for _, d := range deg {
		top = max(top, d)
	}
	if mean := 2 * edges / m.Nodes; top < 5*mean {
		return fmt.Errorf("max degree %d vs mean %d: no heavy tail", top, mean)
	}
	return nil
}

// validateNPY parses a .npy 1.0 file: magic, header dict, 64-byte aligned
// data of shape (2, n, n) little-endian float64 in [0, 1).
func validateNPY(data []byte, m Meta) error {
	if len(data) < 10 || string(data[:8]) != "\x93NUMPY\x01\x00" {
		return fmt.Errorf("no .npy 1.0 magic")
	}
	hl := int(binary.LittleEndian.Uint16(data[8:10]))
	if 10+hl > len(data) || (10+hl)%64 != 0 {
		return fmt.Errorf("header length %d", hl)
	}
	hdr := string(data[10 : 10+hl])
	want := fmt.Sprintf("{'descr': '<f8', 'fortran_order': False, 'shape': (2, %d, %d), }", m.N, m.N)
	if strings.TrimRight(hdr, " \n") != want || !strings.HasSuffix(hdr, "\n") {
		return fmt.Errorf("header %q, want %q", hdr, want)
	}
	if m.N != scaledSqrt(MatmulBaseN, m.Scale, 1) {
		return fmt.Errorf("n %d at scale %v", m.N, m.Scale)
	}
	body := data[10+hl:]
	if len(body) != 2*m.N*m.N*8 {
		return fmt.Errorf("%d data bytes, want %d", len(body), 2*m.N*m.N*8)
	}
	var sum float64
	for i := 0; i < len(body); i += 8 {
		f := math.Float64frombits(binary.LittleEndian.Uint64(body[i:]))
		if !(f >= 0 && f < 1) {
			return fmt.Errorf("element %d is %v", i/8, f)
		}
		sum += f
	}
	if mean := sum / float64(2*m.N*m.N); math.Abs(mean-0.5) > 0.02 {
		return fmt.Errorf("mean %v, want about 0.5", mean)
	}
	return nil
}

// argCase is a function, variant and scale, and what comes of them.
type argCase struct {
	f, v string
	s    float64
	want string
}

func TestBadArguments(t *testing.T) {
	for _, c := range []argCase{
		{"nope", "A", 1, "unknown function"},
		{"image", "C", 1, "variant"},
		{"image", "a", 1, "variant"},
		{"image", "A", 0, "scale"},
		{"image", "A", 100, "scale"},
		{"image", "A", math.NaN(), "scale"},
	} {
		if _, _, err := Generate(c.f, c.v, c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate(%q, %q, %v) = %v, want an error about %s", c.f, c.v, c.s, err, c.want)
		}
	}
	if _, err := NominalScale("image", "X"); err == nil {
		t.Error("NominalScale accepted variant X")
	}
}

func TestKeys(t *testing.T) {
	for _, c := range []argCase{
		{"image", "A", 1, "thaw/image/A/1"},
		{"json", "B", 11.4, "thaw/json/B/11.4"},
		{"pagerank", "B", 0.25, "thaw/pagerank/B/0.25"},
	} {
		if got := Key(c.f, c.v, c.s); got != c.want {
			t.Errorf("Key = %q, want %q", got, c.want)
		}
	}
	if s, _ := NominalScale("json", "B"); s != 11.4 {
		t.Errorf("json B nominal scale %v", s)
	}
	if s, _ := NominalScale("json", "A"); s != 1 {
		t.Errorf("json A nominal scale %v", s)
	}
}

func TestTableAndTime(t *testing.T) {
	start := time.Now()
	rows, err := Table()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generated A and B of %d functions in %v", len(rows), elapsed)
	if limit := 2 * time.Second; elapsed > limit && !raceEnabled {
		t.Errorf("generating every A and B took %v, want < %v", elapsed, limit)
	}
	if len(rows) != len(Functions()) {
		t.Fatalf("%d rows", len(rows))
	}
	md := Markdown(rows)
	for _, r := range rows {
		if r.A.Variant != "A" || r.B.Variant != "B" || r.A.Scale != 1 {
			t.Errorf("%s: row %+v", r.Function, r)
		}
		if !strings.Contains(md, "| "+r.Function+" |") || !strings.Contains(md, r.B.Key) {
			t.Errorf("markdown lacks %s", r.Function)
		}
	}
	t.Log("\n" + md)
}

func BenchmarkTable(b *testing.B) {
	for b.Loop() {
		if _, err := Table(); err != nil {
			b.Fatal(err)
		}
	}
}
