package deps

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const sumA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const sumB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func TestParseRequirements(t *testing.T) {
	text := `# the function's packages
requests==2.32.3
Chameleon>=4  # a range: resolved
igraph[plotting]==1.0.0
texttable == 1.7.2 \
    --hash=sha256:` + sumA + ` \
    --hash sha256:` + strings.ToUpper(sumB) + `
numpy==1.*
urllib3<3; python_version >= "3.8"

`
	rs, err := ParseRequirements([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line          int
		name, version string
		hashes        int
	}{
		{2, "requests", "2.32.3", 0}, {3, "chameleon", "", 0}, {4, "igraph", "", 0},
		{5, "texttable", "1.7.2", 2}, {8, "numpy", "", 0}, {9, "urllib3", "", 0},
	}
	if len(rs) != len(want) {
		t.Fatalf("parsed %d requirements: %+v", len(rs), rs)
	}
	for i, w := range want {
		r := rs[i]
		if r.Line != w.line || r.Name != w.name || r.Version != w.version || len(r.Hashes) != w.hashes {
			t.Errorf("requirement %d = %+v, want line %d %s %q with %d hashes", i, r, w.line, w.name, w.version, w.hashes)
		}
	}
	if got := rs[3].Hashes; !slices.Equal(got, []string{sumA, sumB}) {
		t.Errorf("hashes %v: want both, lower case, sorted", got)
	}
	if rs.Locked() {
		t.Error("a file with ranges is not a complete lock")
	}
	if got := rs.Lines()[3]; got != "texttable == 1.7.2 --hash=sha256:"+sumA+" --hash=sha256:"+sumB {
		t.Errorf("line as given: %q", got)
	}
}

func TestRequirementsLocked(t *testing.T) {
	locked, err := ParseRequirements([]byte("a==1 --hash=sha256:" + sumA + "\nb==2.0 --hash=sha256:" + sumB + "\n"))
	if err != nil || !locked.Locked() {
		t.Fatalf("every line pinned and hashed is a lock: %v %v", locked.Locked(), err)
	}
	for _, text := range []string{"a==1\n", "a==1 --hash=sha256:" + sumA + "\nb>=2 --hash=sha256:" + sumB + "\n", "a[x]==1 --hash=sha256:" + sumA + "\n"} {
		rs, err := ParseRequirements([]byte(text))
		if err != nil || rs.Locked() {
			t.Errorf("%q: locked %v (%v), want resolved", text, rs.Locked(), err)
		}
	}
}

// What pip must never see is refused, naming the line.
func TestParseRequirementsRefuses(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"", "names no package"},
		{"# only a comment\n\n", "names no package"},
		{"-i https://evil.example/simple\nrequests\n", "line 1: option -i is not allowed"},
		{"--index-url=https://evil.example/simple\n", "option --index-url is not allowed"},
		{"--extra-index-url https://x\n", "option --extra-index-url"},
		{"-r other.txt\n", "option -r"},
		{"-e git+https://github.com/x/y\n", "option -e"},
		{"--find-links /tmp\n", "option --find-links"},
		{"requests\n--pre\n", "line 2: option --pre"},
		{"requests @ https://x/requests.whl\n", "not URLs"},
		{"./local/pkg\n", "not URLs"},
		{"/abs/path.whl\n", "not URLs"},
		{"git+https://github.com/x/y\n", "not URLs"},
		{"requests --hash=md5:abc\n", "give sha256:<64 hex digits>"},
		{"requests --hash=sha256:abc\n", "give sha256"},
		{"--hash=sha256:" + sumA + "\n", "--hash without a requirement"},
		{"requests --hash=sha256:" + sumA + " extra\n", "after --hash"},
		{"requests\nRequests==1\n", "line 2: requests is already required on line 1"},
		{"requests;;;\n", "is not a requirement"},
		{"na me\n", "is not a requirement"},
		{"pkg\x00\n", "not UTF-8"},
		{strings.Repeat("x", MaxRequirementsBytes+1), "larger than"},
		{strings.Repeat("p\n", 1) + strings.Repeat("q", 0), ""},
	} {
		rs, err := ParseRequirements([]byte(tc.text))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.text, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: (%v, %v), want ErrInvalid mentioning %q", tc.text, rs, err, tc.want)
		}
	}
	var many strings.Builder
	for i := range MaxRequirements + 1 {
		many.WriteString("p" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26) + "\n")
	}
	if _, err := ParseRequirements([]byte(many.String())); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("too many requirements: %v", err)
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{"Chameleon": "chameleon", "charset_normalizer": "charset-normalizer",
		"zope.interface": "zope-interface", "A__B--C..d": "a-b-c-d"} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseRequirements(f *testing.F) {
	f.Add([]byte("requests==2.32.3\nchameleon>=4 --hash=sha256:" + sumA + "\n"))
	f.Add([]byte("a \\\n==1 # c\n-i x\n"))
	f.Add([]byte("x; python_version<'3' \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseRequirements(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		for _, r := range rs {
			// Nothing that pip would take as an option or a location passes.
			if strings.HasPrefix(r.Spec, "-") || strings.ContainsAny(r.Spec, "@/\\:\n") || r.Name == "" || Normalize(r.Name) != r.Name {
				t.Fatalf("accepted %+v", r)
			}
			for _, h := range r.Hashes {
				if !hexRE.MatchString(h) {
					t.Fatalf("accepted hash %q", h)
				}
			}
		}
	})
}
