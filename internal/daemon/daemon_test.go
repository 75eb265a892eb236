package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/problemtest"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"hello", true},
		{"a", true},
		{"a1", true},
		{"image-resize-2", true},
		{"a-", true},
		{"a" + strings.Repeat("b", 62), true},  // 63 characters
		{"a" + strings.Repeat("b", 63), false}, // 64 characters
		{"", false},
		{"Hello", false},
		{"1hello", false},
		{"-hello", false},
		{"hello_world", false},
		{"hello.py", false},
		{"hello world", false},
		{"hello/world", false},
		{"../etc", false},
		{"..", false},
		{"hello\n", false},
		{"\nhello", false},
		{"héllo", false},
		{"hello\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidName(tt.name)
			if tt.ok {
				if err != nil {
					t.Fatalf("ValidName(%q) = %v, want nil", tt.name, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ValidName(%q) = %v, want ErrInvalid", tt.name, err)
			}
		})
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		kind, id string
		ok       bool
	}{
		{"vm", "vm-0123456789ab", true},
		{"snapshot", "snap-0123456789ab", true},
		{"vm", "snap-0123456789ab", false}, // another kind's id
		{"snapshot", "vm-0123456789ab", false},
		{"vm", "vm-0123456789AB", false},
		{"vm", "vm-0123456789a", false},
		{"vm", "vm-0123456789abc", false},
		{"vm", "vm-0123456789ag", false},
		{"vm", "vm_0123456789ab", false},
		{"vm", "vm-0123456789ab\n", false},
		{"vm", "vm-0123456789ab/../x", false},
		{"snapshot", "../snap-0123456789ab", false},
		{"snapshot", "snap-", false},
		{"vm", "", false},
		{"function", "vm-0123456789ab", false}, // unknown kind
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+tt.id, func(t *testing.T) {
			err := validID(tt.kind, tt.id)
			if tt.ok {
				if err != nil {
					t.Fatalf("validID(%q, %q) = %v, want nil", tt.kind, tt.id, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("validID(%q, %q) = %v, want ErrInvalid", tt.kind, tt.id, err)
			}
			if !strings.Contains(err.Error(), tt.kind) {
				t.Errorf("error %q does not name the kind %q", err, tt.kind)
			}
		})
	}
}

func TestNewIDsAreValid(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range []struct{ kind, prefix string }{{"vm", "vm-"}, {"snapshot", "snap-"}} {
		for range 100 {
			id := newID(k.prefix)
			if err := validID(k.kind, id); err != nil {
				t.Fatalf("newID(%q) = %q, rejected by validID: %v", k.prefix, id, err)
			}
			if seen[id] {
				t.Fatalf("newID returned %q twice", id)
			}
			seen[id] = true
		}
	}
}

func validConfig() Config {
	return Config{DataDir: "/var/lib/thaw", ImageDir: "/usr/share/thaw/image", Accel: "auto",
		DefaultMemoryMiB: 256, DefaultVCPUs: 1, BootTimeout: 30 * time.Second, InvokeTimeout: 10 * time.Second,
		VMMSettings: qemu.Settings{Shim: "/usr/lib/thaw/libthaw_shim.so"}.Values()}
}

// TestConfigConfinementChecked: the daemon adds its confinement checks to
// the configuration's (package config), so Check reports them with the
// rest.
func TestConfigConfinementChecked(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(c *Config)
		want []string // one substring per problem
	}{
		{name: "valid", edit: func(*Config) {}},
		{name: "confinement out of range", edit: func(c *Config) {
			c.VMUIDBase, c.VMUIDCount, c.VMMemoryOverheadMiB, c.VMCPUWeight, c.ConsoleLogLimit, c.CgroupRoot = 500, 10, 32, 20000, 100, "sys/fs/cgroup"
		}, want: []string{"overlaps system users", "overhead 32 MiB", "cpu weight 20000", "console log limit 100", "cgroup root must be an absolute path"}},
		{name: "user id range past the top", edit: func(c *Config) { c.VMUIDBase, c.VMUIDCount = 4294967000, 1000 },
			want: []string{"do not fit below 4294967294"}},
		{name: "with other problems", edit: func(c *Config) { c.VMCPUWeight, c.DefaultVCPUs = 20000, 0 },
			want: []string{"cpu weight 20000", "default vcpus must be at least 1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			problemtest.Check(t, c.Check(), tt.want)
		})
	}
}
