package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RunWriter writes a run's files into one directory and keeps their paths.
type RunWriter struct {
	Dir   string
	Paths []string
}

// Write writes the file name of the run and records its path.
func (w *RunWriter) Write(name string, data []byte) error {
	p := filepath.Join(w.Dir, name)
	w.Paths = append(w.Paths, p)
	return os.WriteFile(p, data, 0o644)
}

// WriteRun starts a run's directory with NAME.jsonl (the samples, one a
// line) and NAME.json (the whole result: configuration, machine,
// summaries).
func WriteRun[S any](dir, name string, samples []S, result any) (*RunWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w := &RunWriter{Dir: dir}
	var jl strings.Builder
	enc := json.NewEncoder(&jl)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			return nil, err
		}
	}
	if err := w.Write(name+".jsonl", []byte(jl.String())); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return nil, err
	}
	return w, w.Write(name+".json", append(b, '\n'))
}

// ReadSamples reads a JSON lines file of samples (as WriteRun writes them).
func ReadSamples[S any](path string) ([]S, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []S
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var raw json.RawMessage
		var s S
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s: sample %d: %w", path, len(out)+1, err)
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s: sample %d: %w", path, len(out)+1, err)
		}
		if l, ok := any(&s).(interface{ fromLegacy(json.RawMessage) }); ok {
			l.fromLegacy(raw)
		}
		out = append(out, s)
	}
	return out, nil
}

// ReadRun reads a run's directory as WriteRun wrote it, NAME.json into
// result and NAME.jsonl into samples, and summarizes the samples again.
func ReadRun[S any](dir, name string, result interface{ Summarize() }, samples *[]S) error {
	path := filepath.Join(dir, name+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, result); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if *samples, err = ReadSamples[S](filepath.Join(dir, name+".jsonl")); err != nil {
		return err
	}
	result.Summarize()
	return nil
}
