package apitest

import (
	"bytes"
	"encoding/json"
)

// jsonValue is v as encoding/json sends it, decoded into plain values.
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return normalize(out), nil
}

// normalize turns json.Numbers into float64 (what kin-openapi expects).
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	case json.Number:
		f, _ := v.Float64()
		return f
	}
	return v
}
