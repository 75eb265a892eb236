// Package buildinfo is what a thaw binary knows of its build: the version,
// stamped by `make build` from git (`git describe`), and the Go toolchain.
package buildinfo

import (
	"fmt"
	"runtime"
)

// Version is set at build time (-ldflags -X); "dev" for a plain go build.
var Version = "dev"

// String is the version with the toolchain and platform.
func String() string {
	return fmt.Sprintf("%s (%s, %s/%s)", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
