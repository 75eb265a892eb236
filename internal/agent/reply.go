package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/thaw-dev/thaw/internal/jsonscan"
)

// Limits of one reply line from the guest.
const (
	// MaxResult bounds a handler's result, as JSON text. The agent is told
	// it with every invocation and refuses a larger result itself; the host
	// enforces it whatever the guest does.
	MaxResult = 32 << 20
	// MaxEnvelope bounds the rest of a reply: everything but its result.
	MaxEnvelope = 4 << 20
)

// ErrTooLarge: a reply, or its result, is over its limit. The rest of its
// line was skipped, so the channel is still in step.
var ErrTooLarge = errors.New("reply over its limit")

// TooLargeError says which part of a reply went over which limit.
type TooLargeError struct {
	ID    string // the reply's id if it came before the limit was hit
	Part  string // "result" or "reply"
	Limit int
}

func (e *TooLargeError) Error() string {
	if e.Part == "result" {
		return fmt.Sprintf("the result is more than %d bytes of JSON, the limit", e.Limit)
	}
	return fmt.Sprintf("the guest's reply without its result is more than %d bytes, the limit", e.Limit)
}

func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// readReply reads the next reply line. Its result goes to a spill as it
// arrives, checked as JSON on the way; the rest of the line, with null in
// the result's place, is decoded as the Reply, whose Result is then the
// result's bytes. Read errors come back through c.ioErr.
func (c *Conn) readReply() (*Reply, error) {
	p := replyParser{maxResult: c.maxResult, maxEnv: c.maxEnvelope, spill: spill{dir: c.spillDir}}
	defer p.spill.Close()
	for {
		chunk, err := c.rd.ReadSlice('\n')
		eol := err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && p.seen > 0 {
				err = fmt.Errorf("reply cut short after %d bytes: %w", p.seen, err)
			}
			return nil, c.ioErr("read", err)
		}
		if eol {
			chunk = chunk[:len(chunk)-1]
		}
		p.seen += int64(len(chunk))
		if p.over == nil {
			if err := p.feed(chunk); err != nil {
				return nil, fmt.Errorf("agent sent malformed reply %.200q: %w", p.env, err)
			}
		}
		if eol {
			return p.finish()
		}
	}
}

// envState is where a replyParser is in the reply's top-level object.
type envState uint8

const (
	envStart    envState = iota // '{' comes
	envKeyOrEnd                 // after '{': a key or '}'
	envKey                      // after ',': a key
	envInKey                    // in a key
	envColon                    // after a key
	envValue                    // a value comes
	envInValue                  // in a value
	envAfter                    // after a value: ',' or '}'
	envEnd                      // after the closing '}'
)

// replyParser takes a reply line apart as it arrives: its result to spill,
// everything else to env, each part bounded.
type replyParser struct {
	maxResult, maxEnv int
	st                envState
	val               jsonscan.Value // the key or value being read
	env               []byte         // the line but its result (null instead) and space
	at                int            // where the key or value being read starts in env
	key               string         // the key whose value is being read
	inResult          bool           // the value being read is the result
	sawResult         bool
	id                string // the reply's id, once read
	spill             spill
	over              *TooLargeError // a part went over its limit: the rest is skipped
	seen              int64          // bytes of the line so far
}

// feed takes the next bytes of the line.
func (p *replyParser) feed(b []byte) error {
	for len(b) > 0 && p.over == nil {
		if p.st == envInKey || p.st == envInValue {
			n, done, err := p.val.Feed(b)
			if err != nil {
				return err
			}
			if err := p.keep(b[:n]); err != nil {
				return err
			}
			b = b[n:]
			if done {
				p.ended()
			}
			continue
		}
		c := b[0]
		if c == ' ' || c == '\t' || c == '\r' {
			b = b[1:]
			continue
		}
		if err := p.punct(c); err != nil {
			return err
		}
		if p.st != envInKey && p.st != envInValue {
			b = b[1:] // punctuation; a key or value that starts at c is the scanner's
		}
	}
	return nil
}

// punct handles byte c between the keys and values.
func (p *replyParser) punct(c byte) error {
	switch {
	case p.st == envStart && c == '{':
		p.st = envKeyOrEnd
	case (p.st == envKeyOrEnd || p.st == envAfter) && c == '}':
		p.st = envEnd
	case (p.st == envKeyOrEnd || p.st == envKey) && c == '"':
		p.st, p.val, p.at = envInKey, jsonscan.Value{}, len(p.env)
		return nil
	case p.st == envColon && c == ':':
		p.st = envValue
	case p.st == envAfter && c == ',':
		p.st = envKey
	case p.st == envValue:
		p.st, p.val, p.at = envInValue, jsonscan.Value{}, len(p.env)
		p.inResult = p.key == "result"
		if p.inResult {
			if p.sawResult {
				return errors.New("two results in one reply")
			}
			p.sawResult = true
			return p.keepEnv([]byte("null"))
		}
		return nil
	case p.st == envStart:
		return fmt.Errorf("%q where a reply (a JSON object) starts", c)
	default:
		return fmt.Errorf("%q out of place in the reply's object", c)
	}
	return p.keep([]byte{c})
}

// keep puts bytes of the line where they belong: the result's in the spill,
// the rest in env, each up to its limit.
func (p *replyParser) keep(b []byte) error {
	if p.st == envInValue && p.inResult {
		if p.spill.Len()+int64(len(b)) > int64(p.maxResult) {
			p.over = &TooLargeError{ID: p.id, Part: "result", Limit: p.maxResult}
			p.spill.Close()
			return nil
		}
		_, err := p.spill.Write(b)
		return err
	}
	return p.keepEnv(b)
}

// keepEnv adds b to env, up to its limit.
func (p *replyParser) keepEnv(b []byte) error {
	if len(p.env)+len(b) > p.maxEnv {
		p.over = &TooLargeError{ID: p.id, Part: "reply", Limit: p.maxEnv}
		return nil
	}
	p.env = append(p.env, b...)
	return nil
}

// ended: the key or value being read is complete.
func (p *replyParser) ended() {
	raw := p.env[p.at:]
	if p.st == envInKey {
		p.st, p.key = envColon, ""
		if bytes.IndexByte(raw, '\\') < 0 {
			p.key = string(raw[1 : len(raw)-1])
		} else {
			_ = json.Unmarshal(raw, &p.key)
		}
		return
	}
	if p.key == "id" {
		_ = json.Unmarshal(raw, &p.id) // not a string: decoding the whole reply says so
	}
	p.st, p.inResult = envAfter, false
}

// finish decodes the reply once its line has ended.
func (p *replyParser) finish() (*Reply, error) {
	if p.over != nil {
		return nil, p.over
	}
	if p.st != envEnd {
		return nil, fmt.Errorf("agent sent malformed reply %.200q: the line ends inside it", p.env)
	}
	var r Reply
	if err := json.Unmarshal(p.env, &r); err != nil {
		return nil, fmt.Errorf("agent sent malformed reply %.200q: %w", p.env, err)
	}
	r.Result = nil
	if p.sawResult {
		b, err := p.spill.Bytes()
		if err != nil {
			return nil, err
		}
		r.Result = b
	}
	return &r, nil
}
