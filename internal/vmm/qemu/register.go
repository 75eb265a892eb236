package qemu

import "github.com/thaw-dev/thaw/internal/vmm"

// Name is the name QEMU registers under (thawd --vmm qemu).
const Name = "qemu"

func init() {
	vmm.Register(Name, func() (vmm.Backend, error) { return Backend{}, nil })
}
