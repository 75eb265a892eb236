package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// bigResult is n bytes of JSON: an array of strings with escapes and
// multi-byte UTF-8, numbers and literals, the same for the same n and seed.
func bigResult(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	parts := []string{`"caf\u00e9"`, "\"\u00e9t\u00e9 \U0001F600\"", `-12.5e-3`, `true`, `null`, `{"k":[1,2,{}]}`, `"a\"b\\c\n"`}
	var block []byte // 16 KiB of values, repeated
	for len(block) < 16<<10 {
		if len(block) > 0 {
			block = append(block, ',')
		}
		block = append(block, parts[rng.IntN(len(parts))]...)
	}
	b := make([]byte, 1, n)
	b[0] = '['
	for len(b)+len(block) < n-40 {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, block...)
	}
	for len(b) < n-40 {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, parts[rng.IntN(len(parts))]...)
	}
	b = append(b, ",\""...)
	for len(b) < n-2 {
		b = append(b, 'x')
	}
	return append(b, "\"]"...)
}

// invokeWith runs one Invoke against a guest that answers with answer(id)
// and returns the reply, the error and the request the guest saw.
func invokeWith(t *testing.T, ctx context.Context, answer func(g *guest, id string)) (*Reply, error, map[string]any) {
	t.Helper()
	seen := make(chan map[string]any, 1)
	path := startGuest(t, func(g *guest) {
		line, err := g.rd.ReadBytes('\n')
		if err != nil {
			return
		}
		var req map[string]any
		_ = json.Unmarshal(line, &req)
		seen <- req
		answer(g, req["id"].(string))
	})
	c := dial(t, path)
	c.SpillTo(t.TempDir())
	r, err := c.Invoke(ctx, "hello", json.RawMessage(`{}`))
	select {
	case req := <-seen:
		return r, err, req
	case <-time.After(time.Second):
		return r, err, nil
	}
}

// Results come byte for byte, wherever the result is in the reply, up to
// MaxResult, and the agent is told the limit.
func TestResultsByteExact(t *testing.T) {
	for _, tt := range []struct {
		name   string
		result []byte
		line   func(id string, res []byte) string
	}{
		{"small, result last (protocol 3)", []byte(`{"a":[1,2.5,"x"]}`), func(id string, res []byte) string {
			return `{"id":"` + id + `","ok":true,"duration_ms":1.5,"result":` + string(res) + `}`
		}},
		{"2 MiB spilled, result before duration (older agents)", bigResult(2<<20, 1), func(id string, res []byte) string {
			return `{"id":"` + id + `","ok":true,"result":` + string(res) + `,"duration_ms":1.5}`
		}},
		{"exactly MaxResult", bigResult(MaxResult, 2), func(id string, res []byte) string {
			return `{"id":"` + id + `","ok":true,"result":` + string(res) + `,"duration_ms":1.5}`
		}},
		{"space around, key escaped", []byte(`"r"`), func(id string, res []byte) string {
			return ` { "id" : "` + id + `" , "ok" : true , "duration_ms" : 1.5 , "\u0072esult" : ` + string(res) + " }\r"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // 32 MiB under the race detector
			defer cancel()
			r, err, req := invokeWith(t, ctx, func(g *guest, id string) { g.send(tt.line(id, tt.result)) })
			if err != nil || !r.OK || r.DurationMS != 1.5 {
				t.Fatalf("Invoke = %+v, %v", r, err)
			}
			if !bytes.Equal(r.Result, tt.result) || cap(r.Result) > len(tt.result)*2 && len(tt.result) > spillAbove {
				t.Fatalf("result is %d bytes (cap %d), want the %d bytes sent", len(r.Result), cap(r.Result), len(tt.result))
			}
			if req["max_result"] != float64(MaxResult) {
				t.Errorf("request %v does not carry max_result %d", req, MaxResult)
			}
		})
	}
}

// A result or a reply over its limit is a handler error that says the
// limit, the rest of its line is skipped, and the channel stays usable.
// (With limits of 1 MiB and 64 KiB; TestLongReplies goes beyond the real
// MaxResult.)
func TestRepliesOverTheirLimits(t *testing.T) {
	const maxResult, maxEnvelope = 1 << 20, 64 << 10
	over := `"` + strings.Repeat("y", maxResult) + `"`
	for _, tt := range []struct {
		name, wantType, wantMsg string
		line                    func(id string) string
	}{
		{"result", "ResultTooLarge", "more than 1048576 bytes of JSON", func(id string) string {
			return `{"id":"` + id + `","ok":true,"result":` + over + `,"duration_ms":1}`
		}},
		{"error message", "ReplyTooLarge", "without its result is more than 65536 bytes", func(id string) string {
			return `{"id":"` + id + `","ok":false,"error":{"type":"E","message":"` + strings.Repeat("m", maxEnvelope) + `"}}`
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := startGuest(t, func(g *guest) {
				r, _ := g.next()
				g.send(reply("99", `{"ok":true,"result":`+over+`}`), tt.line(r.ID)) // a stale one first
				r, _ = g.next()
				g.send(reply(r.ID, `{"ok":true,"result":"after"}`))
			})
			c := dial(t, path)
			c.SpillTo(t.TempDir())
			c.maxResult, c.maxEnvelope = maxResult, maxEnvelope
			r, err := c.Invoke(testCtx(t), "hello", nil)
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			if r.OK || r.Error == nil || r.Error.Type != tt.wantType || !strings.Contains(r.Error.Message, tt.wantMsg) {
				t.Fatalf("Invoke = %+v (%+v); want error %s saying %q", r, r.Error, tt.wantType, tt.wantMsg)
			}
			if r, err := c.Invoke(testCtx(t), "hello", nil); err != nil || string(r.Result) != `"after"` {
				t.Fatalf("the next Invoke = %+v, %v; want the next reply", r, err)
			}
		})
	}
}

// Replies that are not one JSON object on one line are protocol errors.
func TestMalformedResults(t *testing.T) {
	for _, tt := range []struct{ name, body, want string }{
		{"invalid JSON in a large result", `{"ok":true,"result":[` + strings.Repeat(`1,`, 1<<20) + `}]}`, "malformed reply"},
		{"invalid UTF-8 in the result", "{\"ok\":true,\"result\":\"\xff\"}", "invalid UTF-8"},
		{"line ends inside the result", `{"ok":true,"result":[1,2`, "malformed reply"},
		{"line ends after the result", `{"ok":true,"result":[1,2]`, "line ends inside"},
		{"two results", `{"ok":true,"result":1,"result":2}`, "two results"},
		{"garbage after the object", `{"ok":true,"result":1} x`, "out of place"},
		{"not an object", "\x00" + `["ok",true]`, "where a reply"},
		{"result of the wrong reply shape", `{"ok":1,"result":1}`, "malformed reply"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err, _ := invokeWith(t, testCtx(t), func(g *guest, id string) {
				if raw, ok := strings.CutPrefix(tt.body, "\x00"); ok {
					g.send(raw)
					return
				}
				g.send(reply(id, tt.body))
			})
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrTimeout) {
				t.Fatalf("Invoke = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// A guest that stops in the middle of a result: the call ends at its
// deadline (silent guest) or at once with io.EOF (closed channel), and the
// spill is dropped.
func TestGuestStopsMidResult(t *testing.T) {
	half := reply("1", `{"ok":true,"result":"`+strings.Repeat("z", 3<<20))
	t.Run("silent", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err, _ := invokeWith(t, ctx, func(g *guest, id string) { _, _ = io.WriteString(g.conn, half) })
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("Invoke = %v, want ErrTimeout", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		_, err, _ := invokeWith(t, testCtx(t), func(g *guest, id string) {
			_, _ = io.WriteString(g.conn, half)
			g.conn.Close()
		})
		if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "cut short after") {
			t.Fatalf("Invoke = %v, want io.EOF after a cut reply", err)
		}
	})
}

// A guest that writes its result in small pieces, slowly, is read whole.
func TestSlowGuest(t *testing.T) {
	res := bigResult(200<<10, 3)
	line := reply("1", `{"ok":true,"result":`+string(res)+`}`) + "\n"
	r, err, _ := invokeWith(t, testCtx(t), func(g *guest, id string) {
		for p := line; p != ""; {
			k := min(len(p), 7001)
			if _, err := io.WriteString(g.conn, p[:k]); err != nil {
				return
			}
			p = p[k:]
			time.Sleep(time.Millisecond)
		}
	})
	if err != nil || !bytes.Equal(r.Result, res) {
		t.Fatalf("Invoke = %v, result %d bytes, want %d", err, len(r.Result), len(res))
	}
}

// The spill keeps small results in memory and large ones in a file that has
// no name; either way Bytes is the exact bytes, and Close drops them.
func TestSpill(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 10, spillAbove, spillAbove + 1, 3*spillAbove + 17} {
		s := spill{dir: dir}
		want := bigResult(max(n, 4), uint64(n))[:n]
		for p := want; len(p) > 0; {
			k := min(len(p), 4093)
			if _, err := s.Write(p[:k]); err != nil {
				t.Fatal(err)
			}
			p = p[k:]
		}
		if inFile := s.f != nil; inFile != (n > spillAbove) {
			t.Errorf("%d bytes: in a file = %v", n, inFile)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%d bytes: the spill directory holds %v", n, ents)
		}
		got, err := s.Bytes()
		if err != nil || !bytes.Equal(got, want) || s.Len() != int64(n) {
			t.Fatalf("%d bytes: Bytes = %d bytes, %v", n, len(got), err)
		}
		if n > spillAbove && cap(got) != n {
			t.Errorf("%d bytes read back into a buffer of %d", n, cap(got))
		}
		s.Close()
		if s.f != nil || s.Len() != 0 {
			t.Errorf("%d bytes: Close kept %d bytes", n, s.Len())
		}
	}
	s := spill{dir: "/nonexistent/dir"}
	if _, err := s.Write(make([]byte, spillAbove+1)); err == nil || !strings.Contains(err.Error(), "spill a result") {
		t.Fatalf("spill to a missing directory: %v", err)
	}
}
