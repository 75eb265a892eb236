package main

// The VMM backends thawd offers (thawd --vmm NAME): each registers itself
// with package vmm when linked in.
import (
	_ "github.com/thaw-dev/thaw/internal/vmm/qemu"
)
