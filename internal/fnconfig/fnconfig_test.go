package fnconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckReportsEveryProblem(t *testing.T) {
	env := map[string]string{
		"GOOD":         "value",
		"1BAD":         "x",
		"THAW_SECRETS": "x",
		"thaw_lower":   "x",
		"NUL":          "a\x00b",
		"LATIN":        "\xff",
		"BIG":          strings.Repeat("x", MaxEnvValue+1),
		"BOTH":         "x",
	}
	refs := map[string]string{"BOTH": "db", "DB_PASS": "not a name!", "OK": "db-password", "has-dash": "db"}
	err := Check(env, refs)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`"1BAD"`, "THAW_SECRETS: names starting with THAW_ are reserved", "thaw_lower",
		"NUL: value holds a NUL byte", "LATIN: value is not UTF-8", "BIG: value of 32769 bytes", "BOTH is both",
		`secret reference DB_PASS: invalid secret: secret name "not a name!"`, `"has-dash"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "GOOD") || strings.Contains(err.Error(), " OK") {
		t.Errorf("error blames good entries:\n%v", err)
	}
	if err := Check(map[string]string{"A": "1", "_B": ""}, map[string]string{"C": "db"}); err != nil {
		t.Errorf("good config refused: %v", err)
	}
}

func TestCheckBoundsSizes(t *testing.T) {
	many := map[string]string{}
	for i := range MaxEnv + 1 {
		many["V"+strings.Repeat("X", i%7)+string(rune('A'+i%26))+strings.Repeat("Y", i/26)] = "1"
	}
	if err := Check(many, nil); err == nil || !strings.Contains(err.Error(), "at most 128") {
		t.Errorf("too many variables: %v", err)
	}
	big := map[string]string{}
	for i := range 3 {
		big["V"+string(rune('A'+i))] = strings.Repeat("x", MaxEnvValue)
	}
	if err := Check(big, nil); err == nil || !strings.Contains(err.Error(), "environment of") {
		t.Errorf("too large in total: %v", err)
	}
}

func TestDigest(t *testing.T) {
	code := strings.Repeat("ab", 32)
	if Digest(code, nil) != code {
		t.Error("a function without environment changed digest")
	}
	a := Digest(code, map[string]string{"A": "1", "B": "2"})
	if a == code || len(a) != 64 {
		t.Errorf("digest %s", a)
	}
	for _, other := range []map[string]string{{"A": "1", "B": "3"}, {"A": "1"}, {"A": "1", "B": "2", "C": ""}, {"A1": "", "B": "2"}} {
		if Digest(code, other) == a {
			t.Errorf("environment %v digests as the other", other)
		}
	}
	if Digest(code, map[string]string{"B": "2", "A": "1"}) != a {
		t.Error("the digest depends on map order")
	}
}

func TestWriteDisk(t *testing.T) {
	root := t.TempDir()
	if err := WriteDisk(root, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, DiskDir)); !os.IsNotExist(err) {
		t.Fatalf("empty environment wrote %v", err)
	}
	env := map[string]string{"GREETING": "héllo", "EMPTY": ""}
	if err := WriteDisk(root, env); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, DiskDir, DiskFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version int               `json:"version"`
		Env     map[string]string `json:"env"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Version != 1 || doc.Env["GREETING"] != "héllo" || len(doc.Env) != 2 {
		t.Fatalf("config file %s: %v", b, err)
	}
}

func TestSecretNamesAndUses(t *testing.T) {
	refs := map[string]string{"A": "db", "B": "api", "C": "db"}
	if got := strings.Join(SecretNames(refs), ","); got != "api,db" {
		t.Errorf("names %s", got)
	}
	if !Uses(refs, "api") || Uses(refs, "other") {
		t.Error("Uses")
	}
}

func TestAssignments(t *testing.T) {
	m, err := Assignments([]string{"GREETING=hello=world", "EMPTY=", "DB=db-password"})
	if err != nil || len(m) != 3 || m["GREETING"] != "hello=world" || m["EMPTY"] != "" || m["DB"] != "db-password" {
		t.Fatalf("got %v, %v", m, err)
	}
	if m, err := Assignments(nil); m != nil || err != nil {
		t.Errorf("no items: %v, %v; want nil, nil", m, err)
	}
	for _, c := range []struct {
		items []string
		want  AssignmentError
		msg   string
	}{
		{[]string{"NOVALUE"}, AssignmentError{Item: "NOVALUE"}, `"NOVALUE": want NAME=VALUE`},
		{[]string{"A=1", "=x"}, AssignmentError{Item: "=x"}, `"=x": want NAME=VALUE`},
		{[]string{"A=1", "B=2", "A=3"}, AssignmentError{Item: "A", Twice: true}, "A is given twice"},
	} {
		m, err := Assignments(c.items)
		var ae *AssignmentError
		if m != nil || !errors.As(err, &ae) || *ae != c.want || err.Error() != c.msg {
			t.Errorf("%q: got %v, %v; want %+v %q", c.items, m, err, c.want, c.msg)
		}
	}
}
