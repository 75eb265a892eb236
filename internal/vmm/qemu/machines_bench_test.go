package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// machineVariant is thaw's command line with other machine options.
type machineVariant struct {
	name string
	edit func([]string) []string
}

// withMachine replaces the -machine type and adds options after thaw's.
func withMachine(typ, extra string) func([]string) []string {
	return func(args []string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == "-machine" {
				_, rest, _ := strings.Cut(out[i+1], ",")
				out[i+1] = typ + "," + rest
				if extra != "" {
					out[i+1] += "," + extra
				}
			}
		}
		return out
	}
}

// mmio turns thaw's virtio PCI devices into virtio-mmio ones (microvm).
func mmio(edit func([]string) []string) func([]string) []string {
	return func(args []string) []string {
		out := edit(args)
		for i, a := range out {
			if i > 0 && out[i-1] == "-device" && strings.HasPrefix(a, "virtio-") {
				name, opts, _ := strings.Cut(a, ",")
				name = strings.TrimSuffix(name, "-pci") + "-device"
				opts = strings.Replace(opts, "romfile=,", "", 1) // no option ROMs on mmio
				out[i] = name + "," + opts
				if opts == "" {
					out[i] = name
				}
			}
		}
		return out
	}
}

// withCPU replaces the -cpu model (an experiment: a different guest CPU is
// a different machine to the guest's code, which picks its code paths by CPUID).
func withCPU(model string) func([]string) []string {
	return func(args []string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == "-cpu" {
				out[i+1] = model
			}
		}
		return out
	}
}

// withoutVMGenID drops the vmgenid device: an experiment only (thaw never
// runs without it), to measure what its notification costs on resume.
func withoutVMGenID(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-device" && i+1 < len(args) && strings.HasPrefix(args[i+1], "vmgenid,") {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

var machineVariants = []machineVariant{
	{"pc", func(a []string) []string { return a }},
	{"pc,hpet=off", withMachine("pc", "hpet=off")},
	{"pc,smbus=off", withMachine("pc", "smbus=off")},
	{"pc,vmport=off", withMachine("pc", "vmport=off")},
	{"pc,pit=off", withMachine("pc", "pit=off")},
	{"pc,lean", withMachine("pc", "hpet=off,smbus=off,vmport=off,sata=off,usb=off,graphics=off")},
	{"pc,lean,pit=off", withMachine("pc", "hpet=off,smbus=off,vmport=off,sata=off,usb=off,graphics=off,pit=off")},
	{"microvm,acpi=on", mmio(withMachine("microvm", "acpi=on"))},
	{"microvm,acpi=off", mmio(withMachine("microvm", "acpi=off"))},
	{"microvm,lean", mmio(withMachine("microvm", "acpi=on,x-option-roms=off,pit=off,pic=off,rtc=off"))},
	{"pc,no-vmgenid", withoutVMGenID},
	{"pc,cpu=max,avx=off", withCPU("max,avx2=off,avx=off")},
	{"pc,cpu=qemu64", withCPU("qemu64")},
}

// TestMachineVariants measures QEMU start to QMP ready (Start returning, as
// thaw starts a VMM for a restore) with thaw's machine against cheaper pc
// options and microvm, THAW_MACHINE_BENCH_N starts each, interleaved. With
// THAW_MACHINE_BENCH_RESTORE set it also boots the guest on some variants,
// snapshots it and restores it N times: set-up (start, device state, cont)
// and resume (cont to the agent's answer to a ping), and whether the
// restored guest prints anything on its console. microvm needs an initrd
// that loads virtio_mmio (THAW_MMIO_INITRD); THAW_MACHINE_BENCH_RESTORE_VARIANTS
// (";"-separated names) picks the variants restored. THAW_MACHINE_BENCH_OUT: a
// directory for the samples (JSON lines) and a summary.
func TestMachineVariants(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("THAW_MACHINE_BENCH_N"))
	img := os.Getenv("THAW_IMAGE")
	if n <= 0 || img == "" {
		t.Skip("a benchmark: set THAW_MACHINE_BENCH_N and THAW_IMAGE")
	}
	shim, err := filepath.Abs("../../../bin/libthaw_shim.so")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(shim); err != nil {
		t.Skipf("no interposer (make build): %v", err)
	}
	dir := t.TempDir()
	fnDisk := filepath.Join(dir, "fn.img")
	if err := os.WriteFile(fnDisk, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	var im struct {
		Cmdline string `json:"cmdline"`
	}
	if b, err := os.ReadFile(filepath.Join(img, "image.json")); err != nil || json.Unmarshal(b, &im) != nil {
		t.Fatalf("image.json: %v", err)
	}
	base := func(id, mem, initrd string, shared bool) vmm.Spec {
		return vmm.Spec{ID: id, RunDir: filepath.Join(dir, id), MemoryMiB: 512, VCPUs: 1, Accel: vmm.AccelTCG,
			Kernel: filepath.Join(img, "vmlinuz"), Initrd: initrd, Cmdline: im.Cmdline + " thaw.function=hello",
			Disks:  []vmm.Disk{{Path: filepath.Join(img, "rootfs.ext4"), ReadOnly: true}, {Path: fnDisk, ReadOnly: true}},
			Memory: vmm.Memory{Path: mem, Shared: shared}, Incoming: !shared, GenID: vmm.NewGenID()}
	}
	out := benchOut(t)
	cols := map[string][]float64{}
	record := func(variant, metric string, ms float64) {
		cols[variant+"\t"+metric] = append(cols[variant+"\t"+metric], ms)
		out(map[string]any{"variant": variant, "metric": metric, "ms": ms})
	}
	ctx := context.Background()

	// Start to QMP ready, as a restore starts its VMM (no guest runs).
	sparse := filepath.Join(dir, "sparse.mem")
	if err := os.Truncate(sparseFile(t, sparse), 512<<20); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for _, v := range machineVariants {
			spec := base(fmt.Sprintf("s%d", i), sparse, filepath.Join(img, "initrd.img"), false)
			t0 := time.Now()
			m, err := start(ctx, spec, Settings{Shim: shim}, editArgs(v.edit))
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			record(v.name, "start_to_qmp_ms", msSince(t0))
			_ = m.Kill()
			_ = os.RemoveAll(spec.RunDir)
		}
	}

	if os.Getenv("THAW_MACHINE_BENCH_RESTORE") != "" {
		restoreVariants(t, n, dir, img, Settings{Shim: shim}, base, record)
	}
	summarize(t, cols)
}

func editArgs(edit func([]string) []string) func(*vmm.Spec, Descriptors) []string {
	return func(s *vmm.Spec, fds Descriptors) []string { return edit(Args(s, fds)) }
}

// restoreVariants boots, snapshots and restores the guest on the variants
// a guest can run on.
func restoreVariants(t *testing.T, n int, dir, img string, set Settings, base func(id, mem, initrd string, shared bool) vmm.Spec, record func(string, string, float64)) {
	ctx := context.Background()
	var snaps []variantSnap
	names := []string{"pc", "pc,no-vmgenid", "pc,lean", "microvm,acpi=on"}
	if v := os.Getenv("THAW_MACHINE_BENCH_RESTORE_VARIANTS"); v != "" {
		names = strings.Split(v, ";")
	}
	for _, name := range names {
		v := variantNamed(t, name)
		initrd := filepath.Join(img, "initrd.img")
		if strings.HasPrefix(name, "microvm") {
			if initrd = os.Getenv("THAW_MMIO_INITRD"); initrd == "" {
				t.Logf("%s: skipped, THAW_MMIO_INITRD not set", name)
				continue
			}
		}
		id := fmt.Sprintf("boot%d", len(snaps))
		mem := filepath.Join(dir, id+".mem")
		spec := base(id, mem, initrd, true)
		t0 := time.Now()
		m, err := start(ctx, spec, set, editArgs(v.edit))
		if err != nil {
			t.Fatalf("%s boot: %v", name, err)
		}
		conn := agent.NewConn(m.Agent())
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err = conn.WaitReady(bctx, 2*time.Second)
		cancel()
		if err != nil {
			_ = m.Kill()
			t.Fatalf("%s: agent not ready: %v; console: %s", name, err, logTail(filepath.Join(spec.RunDir, "console.log"), 2000))
		}
		record(name, "boot_to_agent_ms", msSince(t0))
		state := filepath.Join(dir, id+".state")
		if err := m.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.SaveState(ctx, state); err != nil {
			t.Fatalf("%s snapshot: %v", name, err)
		}
		_ = m.Kill()
		snaps = append(snaps, variantSnap{v, mem, state, initrd, name, false})
		if name == "pc" {
			snaps = append(snaps, variantSnap{v, mem, state, initrd, "pc,ping-before-cont", true})
		}
	}
	for i := range n {
		for _, s := range snaps {
			restoreVariant(t, base(fmt.Sprintf("r%d", i), s.mem, s.i, false), set, s, record)
		}
	}
}

// variantSnap is a guest snapshotted on a machine variant.
type variantSnap struct {
	v             machineVariant
	mem, state, i string
	name          string
	early         bool // the ping written before cont
}

// restoreVariant restores s with spec on QEMU with set, resumes it, waits for the agent's
// answer (or the ping written before cont) and records the phases' times.
func restoreVariant(t *testing.T, spec vmm.Spec, set Settings, s variantSnap, record func(string, string, float64)) {
	ctx := context.Background()
	t0 := time.Now()
	m, err := start(ctx, spec, set, editArgs(s.v.edit))
	if err != nil {
		t.Fatalf("%s restore: %v", s.v.name, err)
	}
	t1 := time.Now()
	if err := m.LoadState(ctx, s.state); err != nil {
		t.Fatalf("%s device state: %v", s.v.name, err)
	}
	t2 := time.Now()
	if s.early {
		if _, err := m.Agent().Write([]byte(`{"id":"early","op":"ping"}` + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	t3 := time.Now()
	if s.early {
		_ = m.Agent().SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReader(m.Agent()).ReadString('\n')
		if err != nil || !strings.Contains(line, `"early"`) {
			t.Fatalf("%s: early ping: %q %v", s.name, line, err)
		}
	} else {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = agent.NewConn(m.Agent()).Ping(pctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: ping after restore: %v", s.name, err)
		}
	}
	t4 := time.Now()
	record(s.name, "restore_start_ms", ms(t1.Sub(t0)))
	record(s.name, "restore_load_ms", ms(t2.Sub(t1)))
	record(s.name, "restore_setup_ms", ms(t3.Sub(t0)))
	record(s.name, "resume_to_pong_ms", ms(t4.Sub(t3)))
	time.Sleep(50 * time.Millisecond) // let anything the guest prints reach the log
	_ = m.Kill()
	if b, _ := os.ReadFile(filepath.Join(spec.RunDir, "console.log")); len(b) > 0 {
		t.Logf("%s: restored guest printed on its console: %q", s.name, b)
	}
	record(s.name, "console_bytes_after_restore", float64(fileSize(filepath.Join(spec.RunDir, "console.log"))))
	_ = os.RemoveAll(spec.RunDir)
}

func variantNamed(t *testing.T, name string) machineVariant {
	for _, v := range machineVariants {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no variant %s", name)
	return machineVariant{}
}

func sparseFile(t *testing.T, path string) string {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func ms(d time.Duration) float64  { return float64(d.Microseconds()) / 1000 }
func msSince(t time.Time) float64 { return ms(time.Since(t)) }

// benchOut returns a writer of JSON lines to THAW_MACHINE_BENCH_OUT (a
// no-op without it).
func benchOut(t *testing.T) func(any) {
	d := os.Getenv("THAW_MACHINE_BENCH_OUT")
	if d == "" {
		return func(any) {}
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(d, "machines.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := bufio.NewWriter(f)
	t.Cleanup(func() { w.Flush() })
	return func(v any) {
		b, _ := json.Marshal(v)
		w.Write(append(b, '\n'))
	}
}

// summarize logs (and writes next to the samples) median, p10 and p90 per
// variant and metric, in the order the keys sort.
func summarize(t *testing.T, cols map[string][]float64) {
	var lines []string
	for k, v := range cols {
		variant, metric, _ := strings.Cut(k, "\t")
		s := bench.Summarize(v)
		lines = append(lines, fmt.Sprintf("%-20s %-28s median %7.2f  p10 %7.2f  p90 %7.2f  (n=%d)", variant, metric, s.Median, s.P10, s.P90, s.N))
	}
	sort.Strings(lines)
	text := strings.Join(lines, "\n") + "\n"
	t.Logf("machine variants, 512 MiB, TCG:\n%s", text)
	if d := os.Getenv("THAW_MACHINE_BENCH_OUT"); d != "" {
		if err := os.WriteFile(filepath.Join(d, "summary.txt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
