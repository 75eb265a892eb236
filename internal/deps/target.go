package deps

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The guest's interpreter, which every layer is built for: Debian 12's
// CPython 3.11 on glibc 2.36, x86_64.
const (
	PythonVersion = "3.11"
	pythonMinor   = 11
	ABI           = "cp311"
	// GlibcMinor is the guest's glibc, 2.36: manylinux_2_36 and older.
	GlibcMinor = 36
	// PycMagic is CPython 3.11's bytecode magic number (hex): a host
	// Python with another one cannot precompile for the guest.
	PycMagic = "a70d0d0a"
	// Arch is the guest's machine.
	Arch = "x86_64"
)

// Platforms are the platform tags of wheels the guest runs, newest first:
// manylinux_2_36 down to manylinux_2_17 (manylinux2014), manylinux2010
// (manylinux_2_12) and manylinux1 (manylinux_2_5). pip expands only the
// legacy aliases itself, so every tag is passed.
func Platforms() []string {
	var out []string
	for minor := GlibcMinor; minor >= 17; minor-- {
		out = append(out, fmt.Sprintf("manylinux_2_%d_%s", minor, Arch))
	}
	return append(out, "manylinux2014_"+Arch, "manylinux_2_12_"+Arch, "manylinux2010_"+Arch,
		"manylinux_2_5_"+Arch, "manylinux1_"+Arch)
}

// PipTargetArgs are pip's options for wheels of the guest only.
func PipTargetArgs() []string {
	args := []string{"--only-binary=:all:"}
	for _, p := range Platforms() {
		args = append(args, "--platform", p)
	}
	return append(args, "--python-version", PythonVersion, "--implementation", "cp", "--abi", ABI)
}

// WheelName is a wheel's file name, parsed (PEP 427): name-version(-build)?-py-abi-plat.whl,
// each tag set '.'-separated.
type WheelName struct {
	File      string
	Name      string // normalized
	Version   string
	Python    []string
	ABI       []string
	Platforms []string
}

var wheelRE = regexp.MustCompile(`^([A-Za-z0-9_.]+)-([A-Za-z0-9_.!+]+)(-[0-9][A-Za-z0-9_.]*)?-([A-Za-z0-9_.]+)-([A-Za-z0-9_.]+)-([A-Za-z0-9_.]+)\.whl$`)

// ParseWheelName parses a wheel file name.
func ParseWheelName(file string) (WheelName, error) {
	m := wheelRE.FindStringSubmatch(file)
	if m == nil {
		return WheelName{}, fmt.Errorf("%q is not a wheel file name", file)
	}
	return WheelName{File: file, Name: Normalize(m[1]), Version: m[2],
		Python: strings.Split(m[4], "."), ABI: strings.Split(m[5], "."), Platforms: strings.Split(m[6], ".")}, nil
}

// Compatible says whether the guest's CPython 3.11 on manylinux x86_64
// can install the wheel (packaging.tags' order for that interpreter:
// cp311-cp311, cp3x-abi3, none-ABI tags of cp311/py3x, and any platform
// for pure wheels).
func (w WheelName) Compatible() bool {
	platOK := map[string]bool{}
	for _, p := range Platforms() {
		platOK[p] = true
	}
	for _, py := range w.Python {
		for _, abi := range w.ABI {
			for _, plat := range w.Platforms {
				if tagCompatible(py, abi, plat, platOK) {
					return true
				}
			}
		}
	}
	return false
}

func tagCompatible(py, abi, plat string, platOK map[string]bool) bool {
	native := platOK[plat]
	switch abi {
	case ABI:
		return py == ABI && native
	case "abi3":
		minor, ok := pyMinor(py, "cp")
		return ok && minor >= 2 && minor <= pythonMinor && native
	case "none":
		if !native && plat != "any" {
			return false
		}
		if py == ABI || py == "py3" {
			return true
		}
		minor, ok := pyMinor(py, "py")
		return ok && minor <= pythonMinor
	}
	return false
}

// pyMinor is the minor version of a python tag "cp39" or "py311" (prefix
// given) of Python 3.
func pyMinor(tag, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(tag, prefix+"3")
	if !ok || rest == "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}
