package inputs

import (
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
)

// prng draws from a PCG seeded by a hash of names. Only PCG.Uint64 (a
// specified algorithm) is used; the helpers below are ours so that the
// streams cannot change with the standard library's derived methods.
type prng struct{ src *rand.PCG }

func newPRNG(parts ...string) *prng {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	s := h.Sum64()
	return &prng{src: rand.NewPCG(s, s^0x9e3779b97f4a7c15)}
}

func (p *prng) u64() uint64 { return p.src.Uint64() }

// intn returns a number in [0, n), n > 0 (multiply-shift; the bias is below
// 2^-40 for the n used here).
func (p *prng) intn(n int) int {
	hi, _ := bits.Mul64(p.u64(), uint64(n))
	return int(hi)
}

// between returns a number in [lo, hi].
func (p *prng) between(lo, hi int) int { return lo + p.intn(hi-lo+1) }

// chance is true with probability num/den.
func (p *prng) chance(num, den int) bool { return p.intn(den) < num }

// pick returns one of the strings.
func (p *prng) pick(s []string) string { return s[p.intn(len(s))] }

// zipf samples ranks 0..n-1 with weight ~ 1/(rank+1), integer-only.
type zipf struct {
	cum   []int
	total int
}

func newZipf(n int) *zipf {
	z := &zipf{cum: make([]int, n)}
	for i := range n {
		z.total += 1_000_000 / (i + 1)
		z.cum[i] = z.total
	}
	return z
}

func (z *zipf) draw(p *prng) int {
	x := p.intn(z.total)
	lo, hi := 0, len(z.cum)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if z.cum[mid] > x {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
