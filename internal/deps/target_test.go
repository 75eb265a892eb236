package deps

import (
	"slices"
	"testing"
)

func TestPlatforms(t *testing.T) {
	p := Platforms()
	for _, want := range []string{"manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64",
		"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} {
		if !slices.Contains(p, want) {
			t.Errorf("platforms lack %s", want)
		}
	}
	if slices.Contains(p, "manylinux_2_37_x86_64") || p[0] != "manylinux_2_36_x86_64" {
		t.Errorf("newest platform %s, want manylinux_2_36 (glibc 2.36)", p[0])
	}
	args := PipTargetArgs()
	if !slices.Contains(args, "--only-binary=:all:") || !slices.Contains(args, "cp311") || !slices.Contains(args, "3.11") {
		t.Errorf("pip args %v", args)
	}
}

func TestWheelCompatible(t *testing.T) {
	for file, want := range map[string]bool{
		"igraph-1.0.0-cp39-abi3-manylinux_2_28_x86_64.whl":                                                      true,
		"charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl": true,
		"Chameleon-4.6.0-py3-none-any.whl":                                                                      true,
		"texttable-1.7.2-py2.py3-none-any.whl":                                                                  true,
		"six-1.16.0-py2.py3-none-any.whl":                                                                       true,
		"foo-1.0-cp311-none-any.whl":                                                                            true,
		"foo-1.0-py310-none-any.whl":                                                                            true,
		"foo-1.0-1-cp311-cp311-manylinux2014_x86_64.whl":                                                        true, // build tag
		"foo-1.0-cp312-cp312-manylinux_2_17_x86_64.whl":                                                         false,
		"foo-1.0-cp310-cp310-manylinux_2_17_x86_64.whl":                                                         false,
		"foo-1.0-cp312-abi3-manylinux_2_17_x86_64.whl":                                                          false,
		"foo-1.0-cp311-cp311-manylinux_2_38_x86_64.whl":                                                         false, // glibc too new
		"foo-1.0-cp311-cp311-musllinux_1_1_x86_64.whl":                                                          false,
		"foo-1.0-cp311-cp311-linux_x86_64.whl":                                                                  false,
		"foo-1.0-cp311-cp311-manylinux_2_17_aarch64.whl":                                                        false,
		"foo-1.0-cp311-cp311-macosx_11_0_arm64.whl":                                                             false,
		"foo-1.0-cp311-cp311-win_amd64.whl":                                                                     false,
		"foo-1.0-pp310-pypy310_pp73-manylinux_2_17_x86_64.whl":                                                  false,
		"foo-1.0-py2-none-any.whl":                                                                              false,
		"foo-1.0-py312-none-any.whl":                                                                            false,
	} {
		wn, err := ParseWheelName(file)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if got := wn.Compatible(); got != want {
			t.Errorf("%s: compatible %v, want %v", file, got, want)
		}
	}
	wn, _ := ParseWheelName("Zope.Interface-6.0-cp311-cp311-manylinux_2_17_x86_64.whl")
	if wn.Name != "zope-interface" || wn.Version != "6.0" {
		t.Errorf("parsed %+v", wn)
	}
	for _, bad := range []string{"foo.tar.gz", "foo-1.0.whl", "foo-1.0-py3-none.whl", "../x-1-py3-none-any.whl"} {
		if _, err := ParseWheelName(bad); err == nil {
			t.Errorf("%s parsed as a wheel name", bad)
		}
	}
}

func TestFileVersion(t *testing.T) {
	for _, tc := range []struct{ file, name, version string }{
		{"pyaes-1.6.1.tar.gz", "pyaes", "1.6.1"},
		{"zope.interface-6.0.zip", "zope-interface", "6.0"},
		{"my-pkg-2.0.tar.gz", "my-pkg", "2.0"},
		{"igraph-1.0.0-cp39-abi3-manylinux_2_28_x86_64.whl", "igraph", "1.0.0"},
	} {
		if v, ok := fileVersion(tc.file, tc.name); !ok || v != tc.version {
			t.Errorf("fileVersion(%s, %s) = %q %v", tc.file, tc.name, v, ok)
		}
	}
	if _, ok := fileVersion("pyaes-1.6.1.tar.gz", "other"); ok {
		t.Error("another project's file matched")
	}
}
