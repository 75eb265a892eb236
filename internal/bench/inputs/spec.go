package inputs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// KeyPrefix is the first component of every input's Redis key.
const KeyPrefix = "thaw"

// Scale limits accepted by Generate. Figure 8 uses 0.25..4; B of json and
// compression (Table 2's 13 KB -> 148 KB) is 11.4.
const (
	MinScale = 1.0 / 16
	MaxScale = 16.0
)

// Formats of the generated inputs (Meta.Format).
const (
	FormatJPEG     = "jpeg"     // image/jpeg baseline JPEG
	FormatJSON     = "json"     // a JSON document of nested records
	FormatTable    = "table"    // JSON {"columns": [...], "rows": [[...], ...]}
	FormatText     = "text"     // ASCII, English-like text
	FormatY4M      = "y4m"      // YUV4MPEG2 4:2:0 video
	FormatNPY      = "npy"      // numpy .npy (format 1.0), little-endian float64
	FormatEdgeList = "edgelist" // little-endian uint32 pairs (u, v), 8 bytes per edge, nodes 0..Nodes-1
	FormatParams   = "params"   // a small JSON object: the function's event parameters
)

// Spec describes one benchmark function's input.
type Spec struct {
	// Function is the function's name (functions/<name>).
	Function string
	// Description says what the guest function does with the input.
	Description string
	// Format is the input's format (Format* constants).
	Format string
	// Fixed functions (hello, read-list, mmap) take the same parameters in
	// both phases: A and B are identical and scale is ignored.
	Fixed bool
	// BScale is the scale of Table 2's input B relative to A (1 when Fixed).
	BScale float64
	// Scales says what scale multiplies for this function.
	Scales string
	// Paper is FaaSnap's Table 2 input A / input B, for reference.
	Paper string

	gen func(p *prng, variant string, scale float64) ([]byte, Meta, error)
}

// Meta records what Generate produced: the key it is stored under, its size
// and the size parameters that were used. Fields that do not apply to a
// format are zero (and omitted in JSON).
type Meta struct {
	Function string  `json:"function"`
	Variant  string  `json:"variant"`
	Scale    float64 `json:"scale"`
	Key      string  `json:"key"`
	Format   string  `json:"format"`
	Bytes    int     `json:"bytes"`
	SHA256   string  `json:"sha256"` // hex digest of the bytes
	Fixed    bool    `json:"fixed,omitempty"`

	Width   int `json:"width,omitempty"`   // jpeg, y4m: pixels
	Height  int `json:"height,omitempty"`  // jpeg, y4m: pixels
	Quality int `json:"quality,omitempty"` // jpeg
	Frames  int `json:"frames,omitempty"`  // y4m
	FPS     int `json:"fps,omitempty"`     // y4m (frames per second, F<fps>:1)

	Records int `json:"records,omitempty"` // json: top-level records
	Rows    int `json:"rows,omitempty"`    // table
	Cols    int `json:"cols,omitempty"`    // table

	Nodes  int `json:"nodes,omitempty"`  // edgelist
	Edges  int `json:"edges,omitempty"`  // edgelist
	Attach int `json:"attach,omitempty"` // edgelist: edges per new node (Barabási-Albert m)

	N int `json:"n,omitempty"` // npy (matmul): matrix order; the array is (2, n, n)

	MiB    int    `json:"mib,omitempty"`    // mmap: memory allocated
	Mode   string `json:"mode,omitempty"`   // mmap: "page" (one write per page) or "fill"
	Passes int    `json:"passes,omitempty"` // read-list: walks over the list
}

var specs = []Spec{
	{Function: "hello", Description: "a minimal function", Format: FormatParams, Fixed: true, BScale: 1,
		Scales: "nothing (fixed)", Paper: "n/a / n/a", gen: genHello},
	{Function: "read-list", Description: "read every element of a list built at start-up", Format: FormatParams, Fixed: true, BScale: 1,
		Scales: "nothing (fixed)", Paper: "n/a (512 MB list) / n/a", gen: genReadList},
	{Function: "mmap", Description: "allocate and touch anonymous memory", Format: FormatParams, Fixed: true, BScale: 1,
		Scales: "nothing (fixed)", Paper: "512 MB / 512 MB", gen: genMmap},
	{Function: "image", Description: "rotate a JPEG image (PIL)", Format: FormatJPEG, BScale: 2,
		Scales: "pixels", Paper: "101 KB JPEG / 103 KB JPEG", gen: genImage},
	{Function: "json", Description: "deserialize and serialize a JSON document", Format: FormatJSON, BScale: 11.4,
		Scales: "bytes", Paper: "13 KB json / 148 KB json", gen: genJSON},
	{Function: "pyaes", Description: "AES-encrypt and decrypt the bytes (pyaes)", Format: FormatText, BScale: 2,
		Scales: "bytes", Paper: "string of 20k / string of 22k", gen: genPyaes},
	{Function: "chameleon", Description: "render the rows as an HTML table (Chameleon)", Format: FormatTable, BScale: 2,
		Scales: "rows", Paper: "table size 30k / 40k (cells)", gen: genChameleon},
	{Function: "matmul", Description: "multiply two random n×n matrices (numpy)", Format: FormatNPY, BScale: 2,
		Scales: "matrix elements (n grows with √scale)", Paper: "matrix size 2000 / 2200", gen: genMatmul},
	{Function: "ffmpeg", Description: "apply a grayscale filter to a video (ffmpeg)", Format: FormatY4M, BScale: 2,
		Scales: "frames (duration)", Paper: "1-sec 480p video, 338 KB / 381 KB", gen: genFFmpeg},
	{Function: "compression", Description: "compress a file (zlib)", Format: FormatText, BScale: 11.4,
		Scales: "bytes", Paper: "13 KB file / 148 KB file", gen: genCompression},
	{Function: "recognition", Description: "classify an image (a CNN)", Format: FormatJPEG, BScale: 2,
		Scales: "pixels", Paper: "101 KB JPEG / 103 KB JPEG", gen: genRecognition},
	{Function: "pagerank", Description: "PageRank of a graph (igraph)", Format: FormatEdgeList, BScale: 2,
		Scales: "nodes (edges grow with them)", Paper: "graph size 90k / 100k (nodes)", gen: genPagerank},
}

// Functions returns every function's name, in Table 2's order.
func Functions() []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Function
	}
	return names
}

// Lookup returns the Spec of a function.
func Lookup(function string) (Spec, bool) {
	for _, s := range specs {
		if s.Function == function {
			return s, true
		}
	}
	return Spec{}, false
}

// Key is the Redis key of an input: "thaw/<function>/<variant>/<scale>".
func Key(function, variant string, scale float64) string {
	return KeyPrefix + "/" + function + "/" + variant + "/" + strconv.FormatFloat(scale, 'g', -1, 64)
}

// NominalScale is the scale of Table 2's input: 1 for A, Spec.BScale for B.
func NominalScale(function, variant string) (float64, error) {
	s, ok := Lookup(function)
	if !ok {
		return 0, unknownFunction(function)
	}
	switch variant {
	case "A":
		return 1, nil
	case "B":
		return s.BScale, nil
	}
	return 0, badVariant(variant)
}

func unknownFunction(f string) error {
	return fmt.Errorf("inputs: unknown function %q (known: %s)", f, strings.Join(Functions(), ", "))
}

func badVariant(v string) error {
	return fmt.Errorf("inputs: variant %q: want \"A\" or \"B\"", v)
}

// Generate returns the input of function for variant "A" or "B" at scale
// (size relative to input A, MinScale..MaxScale), and its Meta. The same
// arguments always give the same bytes.
func Generate(function, variant string, scale float64) ([]byte, Meta, error) {
	s, ok := Lookup(function)
	if !ok {
		return nil, Meta{}, unknownFunction(function)
	}
	if variant != "A" && variant != "B" {
		return nil, Meta{}, badVariant(variant)
	}
	if math.IsNaN(scale) || scale < MinScale || scale > MaxScale {
		return nil, Meta{}, fmt.Errorf("inputs: scale %v out of range [%v, %v]", scale, MinScale, MaxScale)
	}
	seedVariant := variant
	if s.Fixed {
		seedVariant = "A" // the same input in both phases
	}
	data, m, err := s.gen(newPRNG("thaw/inputs/v1", function, seedVariant), variant, scale)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("inputs: %s %s x%v: %w", function, variant, scale, err)
	}
	sum := sha256.Sum256(data)
	m.Function, m.Variant, m.Scale = function, variant, scale
	m.Key = Key(function, variant, scale)
	m.Format = s.Format
	m.Fixed = s.Fixed
	m.Bytes = len(data)
	m.SHA256 = hex.EncodeToString(sum[:])
	return data, m, nil
}

// scaled is round(base*scale), at least min.
func scaled(base int, scale float64, min int) int {
	n := int(math.Round(float64(base) * scale))
	if n < min {
		n = min
	}
	return n
}

// scaledSqrt is round(base*sqrt(scale)) rounded to a multiple of step, at
// least step: for a 2-D quantity (width, height, matrix order) whose product
// scales with scale.
func scaledSqrt(base int, scale float64, step int) int {
	n := int(math.Round(float64(base)*math.Sqrt(scale)/float64(step))) * step
	if n < step {
		n = step
	}
	return n
}

// Row is one function of Table: its Table 2 inputs A (scale 1) and B
// (scale BScale).
type Row struct {
	Function    string `json:"function"`
	Description string `json:"description"`
	Scales      string `json:"scales"`
	Paper       string `json:"paper"`
	A           Meta   `json:"a"`
	B           Meta   `json:"b"`
}
