package output

import (
	"encoding/json"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v4"
)

// yamlValue decodes a YAML document into the values JSON would give.
func yamlValue(t *testing.T, doc []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		t.Fatalf("not a YAML document: %v\n%s", err, doc)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var j any
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestJSONToYAMLKeepsStrings: strings that would read as other types stay
// strings.
func TestJSONToYAMLKeepsStrings(t *testing.T) {
	y, err := JSONToYAML([]byte(`{"a": "true", "b": "1.5", "c": "", "d": "null", "e": "- x", "f": 2, "g": null, "h": [], "i": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": "true", "b": "1.5", "c": "", "d": "null", "e": "- x", "f": 2.0, "g": nil, "h": []any{}, "i": map[string]any{}}
	if got := yamlValue(t, y); !reflect.DeepEqual(got, want) {
		t.Errorf("converted\n%s\ndecodes to %v, want %v", y, got, want)
	}
}
