package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// configFile is a parsed config file: the values of each key, and the
// line it is on.
type configFile struct {
	path   string
	values map[string]fileEntry
}

type fileEntry struct {
	vals []string
	line int
}

// loadConfigFile reads path (YAML: a mapping of setting names to a value,
// or to a list for the repeatable ones). Keys that name no setting,
// repeated keys and values that are neither scalars nor lists of scalars
// are all reported, each with its line.
func loadConfigFile(path string, fs *pflag.FlagSet) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	cf := &configFile{path: path, values: map[string]fileEntry{}}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); errors.Is(err, io.EOF) {
		return cf, nil // empty, or only comments
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return cf, nil
		}
		root = root.Content[0]
	}
	if root.Kind == 0 || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		return cf, nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of settings (key: value)", path, root.Line)
	}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		f := fs.Lookup(k.Value)
		switch {
		case f == nil || f.Name != k.Value:
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", path, k.Line, k.Value))
			continue
		case cf.values[k.Value].line != 0:
			errs = append(errs, fmt.Errorf("%s:%d: %s is already set on line %d", path, k.Line, k.Value, cf.values[k.Value].line))
			continue
		}
		vals, err := nodeValues(v)
		if err == nil && len(vals) != 1 && !isList(f) {
			err = errors.New("takes one value, not a list")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, v.Line, k.Value, err))
			continue
		}
		cf.values[k.Value] = fileEntry{vals: vals, line: k.Line}
	}
	return cf, errors.Join(errs...)
}

// nodeValues is a scalar's text, or the texts of a list of scalars.
func nodeValues(n *yaml.Node) ([]string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil, errors.New("no value (leave the key out for the default)")
		}
		return []string{n.Value}, nil
	case yaml.SequenceNode:
		vals := []string{}
		for _, e := range n.Content {
			if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
				return nil, fmt.Errorf("line %d: want a list of plain values", e.Line)
			}
			vals = append(vals, e.Value)
		}
		return vals, nil
	}
	return nil, errors.New("want a value or a list of values")
}

// values is a setting's value as YAML: a list for the repeatable ones.
func settingNode(f *pflag.Flag) *yaml.Node {
	if isList(f) {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, v := range inner(f).(pflag.SliceValue).GetSlice() {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: v})
		}
		return seq
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: inner(f).String()}
	if n.Value == "" {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// writeEffective prints the settings in force as a config file, each with
// where its value came from; a default thawd computes at start is printed
// as it would compute it (computed).
func (s *settings) writeEffective(w io.Writer) error {
	m := &yaml.Node{Kind: yaml.MappingNode}
	computed := s.computed()
	s.fs.VisitAll(func(f *pflag.Flag) {
		v := settingNode(f)
		v.LineComment = s.source[f.Name]
		if c, ok := computed[f.Name]; ok { // left at 0 or empty, wherever that came from
			if c.vals != nil {
				v = valuesNode(f, c.vals)
			}
			if src := s.source[f.Name]; src == "default" {
				v.LineComment = "default: " + c.how
			} else {
				v.LineComment = src + "; computed: " + c.how
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}, v)
	})
	return dumpYAML(w, m)
}

// valuesNode is a setting's node holding vals (a list for the repeatable
// ones).
func valuesNode(f *pflag.Flag, vals []string) *yaml.Node {
	if isList(f) {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, v := range vals {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: v})
		}
		return seq
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Value: vals[0]}
}

// installedPaths are the settings whose default depends on where thawd
// runs from (a build tree, a user's cache), as the Debian package installs
// them: what a config file for /etc/thaw names.
var installedPaths = map[string]string{
	"image":          "/var/cache/thaw/images/current",
	"shim":           libDir + "/libthaw_shim.so",
	"snapbpf-object": libDir + "/snapbpf_capture.bpf.o",
}

// writeDefault prints a config file holding every setting at its default,
// each under its description; paths are the installed ones.
func writeDefault(w io.Writer) error {
	s := newSettings()
	for name, path := range installedPaths {
		if err := inner(s.fs.Lookup(name)).Set(path); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, `# thawd's configuration: thawd --config FILE (default %s).
# Each key is a thawd flag; THAWD_<KEY> in the environment (upper case, '_' for '-')
# overrides the file and a flag overrides both. Leave a key out for its default.
# Paths are where the Debian package installs thaw (the guest image where its unit
# looks: THAW_CACHE=/var/cache/thaw); leave them out to use thawd's own defaults.
# 'thawd config check' prints the settings in force, computed ones included.

`, defaultConfigFile)
	first := true
	var err error
	s.fs.VisitAll(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		m := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: f.Name, HeadComment: wrapComment(f.Usage)}, settingNode(f)}}
		err = dumpYAML(w, m)
	})
	return err
}

func dumpYAML(w io.Writer, n *yaml.Node) error {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// wrapComment breaks text into comment lines of about 90 columns.
func wrapComment(text string) string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > 90 {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}
