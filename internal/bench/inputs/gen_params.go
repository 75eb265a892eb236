package inputs

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parameters of the synthetic functions, matmul's and pagerank's sizes.
// The fixed functions' parameters are the events their handlers take
// (functions/<name>/handler.py); they read nothing else from Redis.
const (
	// ReadListPasses: read-list walks its list (built at import, before the
	// snapshot: its size is the handler's, not an input) this many times.
	ReadListPasses = 1
	// MmapMiB of anonymous memory, written once per page (MmapMode "page"),
	// as in the paper (512 MB of a 2 GB guest there; TCG here).
	MmapMiB  = 64
	MmapMode = "page"
	// MatmulBaseN is matmul's n at scale 1; n grows with √scale (the
	// matrices' elements with scale). The paper's 2000 and 2200 are far too
	// slow under TCG.
	MatmulBaseN = 200
	// PagerankBaseNodes nodes at scale 1, each new node attached to
	// PagerankAttach earlier ones (Barabási-Albert, like the paper's
	// igraph.Graph.Barabasi(size, 10), built on the host instead).
	PagerankBaseNodes = 10000
	PagerankAttach    = 5
)

// hello: {"name": "thaw"}.
func genHello(_ *prng, _ string, _ float64) ([]byte, Meta, error) {
	b, err := json.Marshal(struct {
		Name string `json:"name"`
	}{"thaw"})
	return b, Meta{}, err
}

// read-list: {"passes": 1}.
func genReadList(_ *prng, _ string, _ float64) ([]byte, Meta, error) {
	b, err := json.Marshal(struct {
		Passes int `json:"passes"`
	}{ReadListPasses})
	return b, Meta{Passes: ReadListPasses}, err
}

// mmap: {"mib": 64, "mode": "page"}.
func genMmap(_ *prng, _ string, _ float64) ([]byte, Meta, error) {
	b, err := json.Marshal(struct {
		MiB  int    `json:"mib"`
		Mode string `json:"mode"`
	}{MmapMiB, MmapMode})
	return b, Meta{MiB: MmapMiB, Mode: MmapMode}, err
}

// matmul: both n×n matrices as one numpy .npy array of shape (2, n, n),
// little-endian float64 uniform in [0, 1) (the format functions/matmul reads
// with numpy.load(allow_pickle=False)). The paper's matmul draws its
// matrices inside the function from n alone; here they are data in Redis
// like every other function's input, so a larger input is also more data
// fetched into the guest (640 KB at n=200, 1.28 MB for B's n=283).
func genMatmul(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	n := scaledSqrt(MatmulBaseN, scale, 1)
	hdr := npyHeader("<f8", 2, n, n)
	out := make([]byte, len(hdr), len(hdr)+2*n*n*8)
	copy(out, hdr)
	for range 2 * n * n {
		// 53 random bits times 2^-53: exact, the same on every machine
		f := float64(p.u64()>>11) * (1.0 / (1 << 53))
		out = binary.LittleEndian.AppendUint64(out, math.Float64bits(f))
	}
	return out, Meta{N: n}, nil
}

// npyHeader is a .npy format 1.0 header for a C-order array: magic, version,
// header length, then the header dict padded with spaces and a newline so
// that the data starts at a multiple of 64 bytes.
func npyHeader(descr string, shape ...int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, strings.Join(dims, ", "))
	const pre = 10 // magic (6) + version (2) + header length (2)
	total := (pre + len(dict) + 1 + 63) / 64 * 64
	dict += strings.Repeat(" ", total-pre-len(dict)-1) + "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), byte(len(dict)>>8))
	return append(out, dict...)
}

// pagerank: an undirected Barabási-Albert graph as little-endian uint32
// pairs (v, t), 8 bytes per edge (the format functions/pagerank reads with
// array("I")), nodes 0..n-1, edges in order of creation, v > t. Node v > 0 attaches to min(v, m)
// distinct earlier nodes chosen with probability proportional to degree+1
// (igraph's default zero appeal). Edges: sum over v of min(v, m).
func genPagerank(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	m := PagerankAttach
	n := scaled(PagerankBaseNodes, scale, m+1)
	ends := make([]int32, 0, 2*m*n) // every edge endpoint: degree-proportional choice
	out := make([]byte, 0, 8*m*n)
	edges := 0
	var picked []int
	for v := 1; v < n; v++ {
		k := min(v, m)
		picked = picked[:0]
		for len(picked) < k {
			var t int
			if r := p.intn(len(ends) + v); r < len(ends) {
				t = int(ends[r])
			} else {
				t = r - len(ends)
			}
			dup := false
			for _, q := range picked {
				dup = dup || q == t
			}
			if !dup {
				picked = append(picked, t)
			}
		}
		for _, t := range picked {
			out = binary.LittleEndian.AppendUint32(out, uint32(v))
			out = binary.LittleEndian.AppendUint32(out, uint32(t))
			ends = append(ends, int32(v), int32(t))
			edges++
		}
	}
	return out, Meta{Nodes: n, Edges: edges, Attach: m}, nil
}
