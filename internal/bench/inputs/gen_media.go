package inputs

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
)

// Pictures (image, recognition): a synthetic "photo" of JPEGBaseW×JPEGBaseH
// pixels at scale 1 (about 80 KB at quality 90, near Table 2's 101 KB) (pixels grow with scale; width and height with √scale,
// rounded to multiples of 8): a two-colour gradient, translucent shapes, a
// vignette and per-pixel grain so that JPEG sizes resemble a photograph's.
// All integer arithmetic.
const (
	JPEGBaseW   = 640
	JPEGBaseH   = 480
	JPEGQuality = 90
)

// Video (ffmpeg): Y4M (YUV4MPEG2, 4:2:0, C420jpeg), which ffmpeg reads
// natively, VideoW×VideoH at VideoFPS; VideoBaseFrames at scale 1 (one
// second), frames grow with scale at a fixed resolution. A drifting gradient
// with bouncing sprites and a little luma grain.
const (
	VideoW          = 160
	VideoH          = 120
	VideoFPS        = 25
	VideoBaseFrames = 25
)

type rgb struct{ r, g, b int }

func randColor(p *prng) rgb { return rgb{p.intn(256), p.intn(256), p.intn(256)} }

func clamp8(v int) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// canvas is an RGB raster, 3 ints per pixel.
type canvas struct {
	w, h int
	px   []int
}

func newCanvas(w, h int) *canvas { return &canvas{w: w, h: h, px: make([]int, 3*w*h)} }

// gradient fills with c0..c1 along direction (ax, ay), shifted by phase
// (0..8191, a triangle wave so that the shift has no seam).
func (c *canvas) gradient(c0, c1 rgb, ax, ay, phase int) {
	den := ax*(c.w-1) + ay*(c.h-1)
	if den == 0 {
		den = 1
	}
	for y := range c.h {
		for x := range c.w {
			t := ((ax*x+ay*y)*4096/den + phase) % 8192
			if t >= 4096 {
				t = 8191 - t
			}
			i := 3 * (y*c.w + x)
			c.px[i] = c0.r + (c1.r-c0.r)*t/4096
			c.px[i+1] = c0.g + (c1.g-c0.g)*t/4096
			c.px[i+2] = c0.b + (c1.b-c0.b)*t/4096
		}
	}
}

// shape kinds
const (
	shapeEllipse = iota
	shapeRect
	shapeRing
	numShapes
)

// blend draws a shape centred at (cx, cy) with half-axes (rx, ry) pixels,
// alpha out of 256.
func (c *canvas) blend(kind, cx, cy, rx, ry int, col rgb, alpha int) {
	if rx < 1 {
		rx = 1
	}
	if ry < 1 {
		ry = 1
	}
	x0, x1 := max(cx-rx, 0), min(cx+rx, c.w-1)
	y0, y1 := max(cy-ry, 0), min(cy+ry, c.h-1)
	rx2, ry2 := int64(rx)*int64(rx), int64(ry)*int64(ry)
	for y := y0; y <= y1; y++ {
		dy := int64(y - cy)
		for x := x0; x <= x1; x++ {
			dx := int64(x - cx)
			inside := true
			if kind != shapeRect {
				// (dx/rx)^2 + (dy/ry)^2 <= 1, scaled by rx2*ry2
				d := dx*dx*ry2 + dy*dy*rx2
				lim := rx2 * ry2
				inside = d <= lim
				if kind == shapeRing {
					inside = inside && d*16 >= lim*9 // outer 1/4 of the radius
				}
			}
			if !inside {
				continue
			}
			i := 3 * (y*c.w + x)
			c.px[i] += (col.r - c.px[i]) * alpha / 256
			c.px[i+1] += (col.g - c.px[i+1]) * alpha / 256
			c.px[i+2] += (col.b - c.px[i+2]) * alpha / 256
		}
	}
}

// vignette darkens towards the corners by up to strength/256.
func (c *canvas) vignette(strength int) {
	cx, cy := c.w/2, c.h/2
	maxd := int64(cx)*int64(cx) + int64(cy)*int64(cy) + 1
	for y := range c.h {
		dy := int64(y - cy)
		for x := range c.w {
			dx := int64(x - cx)
			k := 256 - int(int64(strength)*(dx*dx+dy*dy)/maxd)
			i := 3 * (y*c.w + x)
			c.px[i] = c.px[i] * k / 256
			c.px[i+1] = c.px[i+1] * k / 256
			c.px[i+2] = c.px[i+2] * k / 256
		}
	}
}

type pictureStyle struct {
	shapes    int // translucent shapes
	objects   int // large opaque foreground shapes near the centre
	grain     int // per-channel noise amplitude
	vignette  int
	maxRadius int // of the shapes, in 1/4096 of the smaller side
}

// picture draws a synthetic photo. Shape positions and sizes are fractions
// of the picture, so the same seed gives the same scene at every size.
func picture(p *prng, w, h int, st pictureStyle) *image.RGBA {
	c := newCanvas(w, h)
	c0, c1 := randColor(p), randColor(p)
	ax, ay := p.intn(9), p.intn(9)
	if ax+ay == 0 {
		ax = 1
	}
	c.gradient(c0, c1, ax, ay, 0)
	side := min(w, h)
	for range st.shapes {
		kind := p.intn(numShapes)
		cx, cy := p.intn(4096)*w/4096, p.intn(4096)*h/4096
		r := p.between(st.maxRadius/8, st.maxRadius)
		rx := r * side / 4096
		ry := rx
		if kind != shapeRing && p.chance(1, 2) {
			ry = p.between(st.maxRadius/8, st.maxRadius) * side / 4096
		}
		c.blend(kind, cx, cy, rx, ry, randColor(p), p.between(96, 224))
	}
	for range st.objects {
		cx := p.between(1024, 3072) * w / 4096
		cy := p.between(1024, 3072) * h / 4096
		rx := p.between(400, 1000) * side / 4096
		ry := p.between(400, 1000) * side / 4096
		c.blend(shapeEllipse, cx, cy, rx, ry, randColor(p), 256)
		// a highlight on the object
		c.blend(shapeEllipse, cx-rx/3, cy-ry/3, rx/4, ry/4, rgb{255, 255, 255}, 96)
	}
	c.vignette(st.vignette)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	g := 2*st.grain + 1
	for i, o := 0, 0; i < len(c.px); i, o = i+3, o+4 {
		img.Pix[o] = clamp8(c.px[i] + p.intn(g) - st.grain)
		img.Pix[o+1] = clamp8(c.px[i+1] + p.intn(g) - st.grain)
		img.Pix[o+2] = clamp8(c.px[i+2] + p.intn(g) - st.grain)
		img.Pix[o+3] = 255
	}
	return img
}

func genJPEG(p *prng, scale float64, st pictureStyle) ([]byte, Meta, error) {
	w := scaledSqrt(JPEGBaseW, scale, 8)
	h := scaledSqrt(JPEGBaseH, scale, 8)
	img := picture(p, w, h, st)
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: JPEGQuality}); err != nil {
		return nil, Meta{}, err
	}
	return buf.Bytes(), Meta{Width: w, Height: h, Quality: JPEGQuality}, nil
}

// image: a busy scene of many translucent shapes.
func genImage(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	return genJPEG(p, scale, pictureStyle{shapes: 40, grain: 9, vignette: 80, maxRadius: 900})
}

// recognition: fewer background shapes and a couple of large objects in the
// middle, something for ResNet to look at.
func genRecognition(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	return genJPEG(p, scale, pictureStyle{shapes: 16, objects: 2, grain: 9, vignette: 110, maxRadius: 700})
}

type sprite struct {
	kind           int
	x, y, vx, vy   int // position and velocity in 1/16 pixel (per frame)
	rx, ry         int // pixels
	col            rgb
	alpha          int
	pulse, pulsePh int // radius pulsation period (frames) and phase
}

// bounce reflects pos in [0, span] (1/16 px).
func bounce(pos, span int) int {
	if span <= 0 {
		return 0
	}
	m := ((pos % (2 * span)) + 2*span) % (2 * span)
	if m > span {
		m = 2*span - m
	}
	return m
}

// y4mHeader is the stream header of a VideoW×VideoH 4:2:0 Y4M.
func y4mHeader(w, h, fps int) string {
	return fmt.Sprintf("YUV4MPEG2 W%d H%d F%d:1 Ip A1:1 C420jpeg\n", w, h, fps)
}

func genFFmpeg(p *prng, _ string, scale float64) ([]byte, Meta, error) {
	w, h, fps := VideoW, VideoH, VideoFPS
	frames := scaled(VideoBaseFrames, scale, 1)
	c0, c1 := randColor(p), randColor(p)
	ax, ay := p.between(1, 8), p.intn(9)
	drift := p.between(40, 160) * (2*p.intn(2) - 1) // gradient phase per frame, either way
	sprites := make([]sprite, p.between(5, 8))
	for i := range sprites {
		s := &sprites[i]
		s.kind = p.intn(numShapes)
		s.rx = p.between(6, 24)
		s.ry = s.rx
		if s.kind == shapeRect || p.chance(1, 3) {
			s.ry = p.between(6, 24)
		}
		s.x, s.y = p.intn(w*16), p.intn(h*16)
		s.vx, s.vy = p.between(-48, 48), p.between(-48, 48)
		s.col = randColor(p)
		s.alpha = p.between(160, 256)
		s.pulse, s.pulsePh = p.between(10, 40), p.intn(40)
	}
	frameLen := w*h + 2*(w/2)*(h/2)
	hdr := y4mHeader(w, h, fps)
	out := make([]byte, 0, len(hdr)+frames*(len("FRAME\n")+frameLen))
	out = append(out, hdr...)
	c := newCanvas(w, h)
	cb := make([]uint8, (w/2)*(h/2))
	cr := make([]uint8, (w/2)*(h/2))
	for f := range frames {
		c.gradient(c0, c1, ax, ay, ((f*drift)%8192+8192)%8192)
		for _, s := range sprites {
			x := bounce(s.x+s.vx*f, (w-1)*16) / 16
			y := bounce(s.y+s.vy*f, (h-1)*16) / 16
			// radius pulsates with a triangle wave of period s.pulse
			ph := (f + s.pulsePh) % s.pulse
			tri := min(ph, s.pulse-ph) * 8 / s.pulse // 0..4
			c.blend(s.kind, x, y, s.rx+tri, s.ry+tri, s.col, s.alpha)
		}
		out = append(out, "FRAME\n"...)
		for i := 0; i < len(c.px); i += 3 {
			yy, _, _ := color.RGBToYCbCr(clamp8(c.px[i]), clamp8(c.px[i+1]), clamp8(c.px[i+2]))
			out = append(out, clamp8(int(yy)+p.intn(7)-3))
		}
		for by := range h / 2 {
			for bx := range w / 2 {
				var r, g, b int
				for _, d := range [4][2]int{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
					i := 3 * ((2*by+d[1])*w + 2*bx + d[0])
					r += c.px[i]
					g += c.px[i+1]
					b += c.px[i+2]
				}
				_, u, v := color.RGBToYCbCr(clamp8(r/4), clamp8(g/4), clamp8(b/4))
				cb[by*(w/2)+bx], cr[by*(w/2)+bx] = u, v
			}
		}
		out = append(out, cb...)
		out = append(out, cr...)
	}
	return out, Meta{Width: w, Height: h, Frames: frames, FPS: fps}, nil
}
