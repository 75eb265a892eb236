package signing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// Envelope format identification.
const (
	Magic   = "thaw-signed"
	Version = 1
	// domain starts every signed message, so a signature made for
	// anything else (another program, another version of this format)
	// never verifies as an envelope's.
	domain = "thaw-signed-record v1\n"
)

// Envelope is a signed record as it is stored: the record's bytes
// (Payload, base64 in JSON), the kind and object name they were signed
// for, the signing key's id and the signature over all four.
type Envelope struct {
	Magic     string `json:"magic"`
	Version   int    `json:"version"`
	Kind      string `json:"kind"`
	Object    string `json:"object"`
	KeyID     string `json:"key_id"`
	Payload   []byte `json:"payload"`
	Signature []byte `json:"signature"`
}

// message is what is signed: the domain, then kind, object, key id and
// payload, each preceded by its length (8 bytes, big-endian), so no two
// different tuples make the same message.
func message(kind, object, keyID string, payload []byte) []byte {
	b := make([]byte, 0, len(domain)+32+len(kind)+len(object)+len(keyID)+len(payload))
	b = append(b, domain...)
	for _, f := range [][]byte{[]byte(kind), []byte(object), []byte(keyID), payload} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

var (
	kindRE  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	keyIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// Seal signs payload as the record of kind stored at object and returns
// the envelope's JSON.
func Seal(k *Key, kind, object string, payload []byte) ([]byte, error) {
	if !kindRE.MatchString(kind) || object == "" {
		return nil, fmt.Errorf("seal: kind %q, object %q", kind, object)
	}
	id := k.Public().ID()
	return json.Marshal(Envelope{Magic: Magic, Version: Version, Kind: kind, Object: object, KeyID: id, Payload: payload,
		Signature: k.sign(message(kind, object, id, payload))})
}

// ErrUntrusted: a record that is not signed by a trusted key for the
// object it was read from. Every *Refusal is one.
var ErrUntrusted = errors.New("record not signed by a trusted key")

// Reason is why a record was refused (a metric label).
type Reason string

// Reasons for a refusal.
const (
	Unsigned     Reason = "unsigned"      // no envelope: a bare record
	UnknownKey   Reason = "unknown_key"   // signed by a key the node does not trust
	BadSignature Reason = "bad_signature" // the signature does not verify: changed after signing
	WrongObject  Reason = "wrong_object"  // signed for another object or kind: moved or copied
	Malformed    Reason = "malformed"     // not an envelope this version reads
)

// Refusal says why a record is not trusted.
type Refusal struct {
	Reason Reason
	Kind   string // what was read
	Object string
	KeyID  string // the envelope's key id, if it has one
	Detail string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s %s refused: %s", r.Kind, r.Object, r.Detail)
}

// Unwrap makes every refusal ErrUntrusted.
func (r *Refusal) Unwrap() error { return ErrUntrusted }

// Open checks that b is an envelope of kind for object signed by a key in
// ring and returns the record's bytes and the key that signed them.
// Nothing of the payload is looked at before the signature verifies.
func Open(ring *Keyring, kind, object string, b []byte) ([]byte, PublicKey, error) {
	refuse := func(r Reason, keyID, format string, a ...any) ([]byte, PublicKey, error) {
		return nil, PublicKey{}, &Refusal{Reason: r, Kind: kind, Object: object, KeyID: keyID, Detail: fmt.Sprintf(format, a...)}
	}
	env, err := decode(b)
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			r.Kind, r.Object = kind, object
		}
		return nil, PublicKey{}, err
	}
	if env.Kind != kind || env.Object != object {
		return refuse(WrongObject, env.KeyID, "its signature is for %s %.200q: a signed record moved or copied to another object", env.Kind, env.Object)
	}
	k, ok := ring.Lookup(env.KeyID)
	if !ok {
		return refuse(UnknownKey, env.KeyID, "signed by key %s, which this node does not trust (thawd --registry-trusted-keys)", env.KeyID)
	}
	if len(env.Signature) != ed25519.SignatureSize || !ed25519.Verify(k.Key, message(kind, object, env.KeyID, env.Payload), env.Signature) {
		return refuse(BadSignature, env.KeyID, "the signature of key %s does not match its content: changed after it was signed", env.KeyID)
	}
	return env.Payload, k, nil
}

// decode parses an envelope: a record that is not one is Unsigned, an
// envelope that does not parse Malformed (Kind and Object left for the
// caller).
func decode(b []byte) (*Envelope, error) {
	var env Envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil || env.Magic != Magic {
		// Not an envelope, or a damaged one: which, by its magic.
		var head struct {
			Magic string `json:"magic"`
		}
		if herr := json.Unmarshal(b, &head); herr != nil {
			return nil, &Refusal{Reason: Malformed, Detail: fmt.Sprintf("not a JSON object: %v", herr)}
		}
		if head.Magic != Magic {
			return nil, &Refusal{Reason: Unsigned, Detail: fmt.Sprintf("not signed (magic %q, not a %q envelope): pushed by a node that does not sign, or written by something else", head.Magic, Magic)}
		}
		return nil, &Refusal{Reason: Malformed, Detail: fmt.Sprintf("signature envelope: %v", err)}
	}
	if len(bytes.TrimSpace(b[dec.InputOffset():])) != 0 {
		return nil, &Refusal{Reason: Malformed, Detail: "signature envelope: data after its end"}
	}
	if env.Version != Version {
		return nil, &Refusal{Reason: Malformed, Detail: fmt.Sprintf("signature envelope version %d, this thaw reads %d", env.Version, Version)}
	}
	if !keyIDRE.MatchString(env.KeyID) || !kindRE.MatchString(env.Kind) {
		return nil, &Refusal{Reason: Malformed, Detail: "signature envelope: its key id or kind is not one this thaw writes"}
	}
	return &env, nil
}

// Payload is the record in b without verifying anything: an envelope's
// payload, or b itself when it is a bare record. Only for reading what a
// record references (garbage collection counts every reference, trusted
// or not); never for deciding to run anything.
func Payload(b []byte) ([]byte, error) {
	env, err := decode(b)
	var r *Refusal
	switch {
	case err == nil:
		return env.Payload, nil
	case errors.As(err, &r) && r.Reason == Unsigned:
		return b, nil
	}
	return nil, err
}

// Signer is the key id an envelope names, unverified; "" for a bare
// record or one that does not parse.
func Signer(b []byte) string {
	env, err := decode(b)
	if err != nil {
		return ""
	}
	return env.KeyID
}
