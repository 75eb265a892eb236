#!/usr/bin/env bash
# Self-contained test of libthaw_shim.so (docs/shim-layout.md) using thaw-shim-check, which maps
# a memory file the way QEMU 7.2 does on restore. Needs python3; the uffd cases need root (or
# vm.unprivileged_userfaultfd=1). Usage: make -C shim && bash shim/test.sh
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
B=$HERE/build
SHIM=$B/libthaw_shim.so
CHECK=$B/thaw-shim-check          # binds to mmap64, like QEMU
CHECK_MMAP=$B/thaw-shim-check-mmap # binds to mmap
for f in "$SHIM" "$CHECK" "$CHECK_MMAP"; do
	[ -e "$f" ] || { echo "missing $f: run make -C shim first"; exit 1; }
done

T=$(mktemp -d /tmp/thaw-shim-test.XXXXXX)
DAEMON_PID=
cleanup() {
	[ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT

FAILS=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; FAILS=$((FAILS + 1)); }
show() { sed 's/^/      /' "$T/out" "$T/err"; }

# run [VAR=value ...] -- CHECK-BINARY ARGS... : runs with the shim preloaded and a clean THAW_* env.
run() {
	local envs=()
	while [ "$1" != "--" ]; do envs+=("$1"); shift; done
	shift
	env -u THAW_SHIM_MODE -u THAW_SHIM_MEMFILE -u THAW_SHIM_LAYOUT -u THAW_SHIM_LSFILE \
		-u THAW_SHIM_UFFD_SOCK -u THAW_SHIM_READAHEAD LD_PRELOAD="$SHIM" "${envs[@]}" "$@" >"$T/out" 2>"$T/err"
	RC=$?
}
json_has() { grep -q "\"$1\":$2[,}]" "$T/out"; }

# expect_ok NAME: exit 0, no mismatch, file untouched, optional stderr regex in $WANT_ERR.
expect_ok() {
	if [ $RC -eq 0 ] && json_has mismatches 0 && json_has file_modified false &&
		{ [ -z "${WANT_ERR:-}" ] || grep -Eq "$WANT_ERR" "$T/err"; } &&
		{ [ -z "${NO_SHIM_LINE:-}" ] || ! grep -q thaw-shim: "$T/err"; }; then
		pass "$1"
	else
		fail "$1 (rc=$RC)"
	fi
	show
	WANT_ERR= NO_SHIM_LINE=
}
# expect_mmap_fail NAME REGEX: the intercepted mmap failed (exit 2) with one matching shim line.
expect_mmap_fail() {
	if [ $RC -eq 2 ] && [ "$(grep -c '^thaw-shim: ' "$T/err")" -eq 1 ] && grep -Eq "^thaw-shim: .*$2" "$T/err"; then
		pass "$1"
	else
		fail "$1 (rc=$RC, want 2 and /$2/)"
	fi
	grep '^thaw-shim: ' "$T/err" | sed 's/^/      /'
}

cat >"$T/gen.py" <<'EOF'
import os, random, struct, sys

PAGE = 4096
HDR, ENT = '<8sIIQQ', '<QQQII'

def table(path, mem_size, entries, magic=b'THAWLAY1', version=1, count=None, reserved=0):
    with open(path, 'wb') as f:
        f.write(struct.pack(HDR, magic, version, len(entries) if count is None else count, mem_size, reserved))
        for e in entries:
            g, l, fo, k = e[:4]
            f.write(struct.pack(ENT, g, l, fo, k, e[4] if len(e) > 4 else 0))

def sparse(path, npages, seed):
    rnd = random.Random(seed)
    with open(path, 'wb') as f:
        f.truncate(npages * PAGE)
        for p in range(npages):
            if rnd.random() < 0.4:
                f.seek(p * PAGE); f.write(rnd.randbytes(PAGE))

def layout(d, seed):
    """Memory file with non-zero runs, written zero runs and holes; a loading-set file with copies
    of some pages in shuffled order; a correct table, a wrong one and malformed ones."""
    rnd = random.Random(seed)
    npages = 2048 + 37
    kinds = []  # per page: 'd' data, 'z' written zeros, 'h' hole
    while len(kinds) < npages:
        kinds += ['d'] * rnd.randint(1, 3)
        kinds += [rnd.choice('zh')] * rnd.randint(1, 2)
    kinds = kinds[:npages]
    mem_size = npages * PAGE
    pages = {}
    with open(f'{d}/mem.bin', 'wb') as f:
        f.truncate(mem_size)
        for p, k in enumerate(kinds):
            if k == 'h':
                continue
            pages[p] = rnd.randbytes(PAGE) if k == 'd' else bytes(PAGE)
            f.seek(p * PAGE); f.write(pages[p])
    runs = []  # (kind, first page, n)
    for p, k in enumerate(kinds):
        c = 'd' if k == 'd' else '0'
        if runs and runs[-1][0] == c and runs[-1][1] + runs[-1][2] == p:
            runs[-1][2] += 1
        else:
            runs.append([c, p, 1])
    ents = []
    # Wrong content first over the first 64 pages; later entries must cover it (ordering + kind 0).
    ents.append((0, 64 * PAGE, 512 * PAGE, 1))
    for c, p, n in runs:
        if c == 'd':
            ents.append((p * PAGE, n * PAGE, p * PAGE, 1))
        elif p < 64:
            ents.append((p * PAGE, min(n, 64 - p) * PAGE, 0, 0))
    # Loading set: whole runs (multi-page entries) and single pages, incl. a few zero pages.
    chosen = [r for r in runs if r[0] == 'd' and rnd.random() < 0.25]
    chosen += [['s', p, 1] for p in rnd.sample(sorted(pages), 150)]
    rnd.shuffle(chosen)
    ls, ls_ents = bytearray(), []
    for _, p, n in chosen:
        ls_ents.append((p * PAGE, n * PAGE, len(ls), 2))
        for q in range(p, p + n):
            ls += pages[q]
    ls += rnd.randbytes(3 * PAGE)  # trailing junk: entries must not depend on EOF
    open(f'{d}/ls.bin', 'wb').write(ls)
    good = ents + ls_ents
    table(f'{d}/good.lay', mem_size, good)
    # Wrong: one single-page loading-set entry points at another page's copy.
    wrong = list(good)
    i = next(i for i, e in enumerate(wrong) if e[3] == 2 and e[1] == PAGE and any(pages[e[0] // PAGE]))
    wrong[i] = (wrong[i][0], PAGE, (wrong[i][2] + PAGE) % (len(ls) - 3 * PAGE), 2)
    table(f'{d}/wrong.lay', mem_size, wrong)
    bad = {
        'bad_magic': dict(magic=b'THAWLAY2'),
        'bad_version': dict(version=2),
        'bad_reserved': dict(reserved=1),
        'size_mismatch': dict(mem=mem_size + PAGE),
        'truncated': dict(count=len(good) + 1),
        'too_many': dict(count=(1 << 22) + 1),
        'oob': dict(e=(mem_size - PAGE, 2 * PAGE, 0, 0)),
        'oob_wrap': dict(e=(PAGE, (1 << 64) - PAGE, 0, 0)),
        'misaligned': dict(e=(PAGE + 512, PAGE, PAGE, 1)),
        'misaligned_len': dict(e=(PAGE, PAGE + 8, PAGE, 1)),
        'misaligned_file': dict(e=(PAGE, PAGE, PAGE + 8, 1)),
        'zero_len': dict(e=(PAGE, 0, 0, 1)),
        'bad_kind': dict(e=(PAGE, PAGE, 0, 4)),
        'entry_reserved': dict(e=(PAGE, PAGE, 0, 1, 7)),
        'mem_beyond': dict(e=(0, PAGE, mem_size, 1)),
        'ls_beyond': dict(e=(0, 2 * PAGE, len(ls) - PAGE, 2)),
    }
    for name, b in bad.items():
        es = good + [b['e']] if 'e' in b else good
        table(f'{d}/{name}.lay', b.get('mem', mem_size), es, magic=b.get('magic', b'THAWLAY1'),
              version=b.get('version', 1), count=b.get('count'), reserved=b.get('reserved', 0))
    print(f'{len(good)} entries ({sum(e[3] == 0 for e in good)} anon, {sum(e[3] == 1 for e in good)} '
          f'memory-file, {len(ls_ents)} loading-set) over {npages} pages; wrong entry {i}')

def big(d, npages, ls_every):
    """Every other page non-zero, each its own entry; every ls_every-th from the loading set."""
    mem_size = npages * PAGE
    ents, ls = [], bytearray()
    with open(f'{d}/big.bin', 'wb') as f:
        f.truncate(mem_size)
        for k, p in enumerate(range(0, npages, 2)):
            data = os.urandom(PAGE)
            f.seek(p * PAGE); f.write(data)
            ents.append((p * PAGE, PAGE, p * PAGE, 1))
            if k % ls_every == 0:
                ents.append((p * PAGE, PAGE, len(ls), 2))
                ls += data
    open(f'{d}/big_ls.bin', 'wb').write(ls)
    table(f'{d}/big.lay', mem_size, ents)
    print(f'{len(ents)} entries over {npages} pages')

def vmas(d, n):
    """n separated one-page file entries over a sparse file: ~2n VMAs, beyond vm.max_map_count."""
    npages = 2 * n
    with open(f'{d}/vmas.bin', 'wb') as f:
        f.truncate(npages * PAGE)
    table(f'{d}/vmas.lay', npages * PAGE, [(p * PAGE, PAGE, p * PAGE, 1) for p in range(1, npages, 2)])

def device(d, seed):
    """premap on device-DAX: 16 MiB of guest memory in 2 MiB units, units 0, 1, 3 and 6 with data;
    a device file whose range at 6 MiB holds those units packed (the VM's clone range); a table of
    device entries (kind 3). Also: a device entry beyond the device."""
    U, rnd = 2 << 20, random.Random(seed)
    units, mem_size = [0, 1, 3, 6], 8 * (2 << 20)
    dev = bytearray(rnd.randbytes(20 << 20))  # stale bytes everywhere else on the device
    with open(f'{d}/dmem.bin', 'wb') as f:
        f.truncate(mem_size)
        for k, u in enumerate(units):
            data = rnd.randbytes(U)
            f.seek(u * U); f.write(data)
            dev[(3 + k) * U:(4 + k) * U] = data
    open(f'{d}/dev.bin', 'wb').write(dev)
    ents = [(0, 2 * U, 3 * U, 3), (3 * U, U, 5 * U, 3), (6 * U, U, 6 * U, 3)]
    table(f'{d}/dev.lay', mem_size, ents)
    table(f'{d}/dev_beyond.lay', mem_size, ents + [(7 * U, U, 20 << 20, 3)])
    print(f'{len(ents)} device entries over {mem_size >> 20} MiB, device {len(dev) >> 20} MiB')

def devcheck(d):
    """After a write check through the device entries: the writes are in the clone range
    (6-14 MiB of the device), and the rest of the device is as it was."""
    before, after = open(f'{d}/dev.orig', 'rb').read(), open(f'{d}/dev.bin', 'rb').read()
    U = 2 << 20
    ok = before[:3 * U] == after[:3 * U] and before[7 * U:] == after[7 * U:] and before[3 * U:7 * U] != after[3 * U:7 * U]
    print('device: writes in the clone range only' if ok else 'device: writes outside the clone range, or none')
    sys.exit(0 if ok else 1)

cmd = sys.argv[1]
if cmd == 'sparse': sparse(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif cmd == 'layout': layout(sys.argv[2], int(sys.argv[3]))
elif cmd == 'big': big(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif cmd == 'vmas': vmas(sys.argv[2], int(sys.argv[3]))
elif cmd == 'device': device(sys.argv[2], int(sys.argv[3]))
elif cmd == 'devcheck': devcheck(sys.argv[2])
EOF

cat >"$T/daemon.py" <<'EOF'
# Fake thaw daemon for uffd mode: accept one shim connection, take the uffd (SCM_RIGHTS), ack,
# then serve every missing-page fault with UFFDIO_COPY from the memory file until SIGTERM.
import ctypes, errno, fcntl, json, os, select, signal, socket, struct, sys, time

sock_path, memfile, stats_path, behaviour = sys.argv[1:5]
PAGE = 4096
UFFD_EVENT_PAGEFAULT = 0x12
UFFDIO_COPY = 0xc028aa03  # _IOWR(0xAA, 0x03, struct uffdio_copy /* 40 bytes */)

stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)

srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sock_path)
srv.listen(1)
open(sock_path + '.ready', 'w').close()
srv.settimeout(60)
conn, _ = srv.accept()
data, fds = b'', []
while len(data) < 32:
    msg, f, _, _ = socket.recv_fds(conn, 32 - len(data), 1)
    if not msg:
        sys.exit('daemon: EOF before hello')
    data += msg
    fds += f
magic, base, length, psize, pid = struct.unpack('<8sQQII', data)
peer_pid = struct.unpack('3i', conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
assert magic == b'THAWUFD1' and psize == PAGE and len(fds) == 1 and pid == peer_pid, \
    (magic, psize, fds, pid, peer_pid)
uffd = fds[0]
if behaviour == 'noack':
    conn.close()
    sys.exit(0)
conn.sendall(b'\x01')
conn.close()

mem = os.open(memfile, os.O_RDONLY)
buf = ctypes.create_string_buffer(PAGE)
st = dict(faults=0, eexist=0, eagain=0, other_events=0, outside=0, length=length)
p = select.poll()
p.register(uffd, select.POLLIN)
deadline = time.monotonic() + 120
while not stop and time.monotonic() < deadline:
    if not p.poll(100):
        continue
    try:
        raw = os.read(uffd, 32 * 64)
    except BlockingIOError:
        continue
    for off in range(0, len(raw), 32):
        if raw[off] != UFFD_EVENT_PAGEFAULT:
            st['other_events'] += 1
            continue
        flags, address = struct.unpack_from('<QQ', raw, off + 8)
        dst = address & ~(PAGE - 1)
        if not base <= dst < base + length:
            st['outside'] += 1
            continue
        ctypes.memmove(buf, os.pread(mem, PAGE, dst - base).ljust(PAGE, b'\0'), PAGE)
        arg = bytearray(struct.pack('<QQQQq', dst, ctypes.addressof(buf), PAGE, 0, 0))
        while True:
            try:
                fcntl.ioctl(uffd, UFFDIO_COPY, arg)
                st['faults'] += 1
                break
            except OSError as e:
                if e.errno == errno.EEXIST:  # another fault on the same page was served first
                    st['eexist'] += 1
                    break
                if e.errno == errno.EAGAIN:  # mm changing under us: retry
                    st['eagain'] += 1
                    continue
                raise
json.dump(st, open(stats_path, 'w'))
EOF

# start_daemon BEHAVIOUR MEMFILE: starts the fake daemon on $T/uffd.sock and waits until it listens.
start_daemon() {
	rm -f "$T/uffd.sock" "$T/uffd.sock.ready" "$T/stats.json"
	python3 "$T/daemon.py" "$T/uffd.sock" "$2" "$T/stats.json" "$1" 2>"$T/daemon.err" &
	DAEMON_PID=$!
	for _ in $(seq 100); do [ -e "$T/uffd.sock.ready" ] && return 0; sleep 0.05; done
	echo "daemon did not start"; cat "$T/daemon.err"
	return 1
}
stop_daemon() {
	[ -n "$DAEMON_PID" ] || return 0
	kill -TERM "$DAEMON_PID" 2>/dev/null
	wait "$DAEMON_PID" 2>/dev/null
	DAEMON_PID=
}

echo "== (a) pass-through"
python3 "$T/gen.py" sparse "$T/sparse.bin" 1000 7
run -- "$CHECK" --threads 4 --write-check "$T/sparse.bin"
NO_SHIM_LINE=1 expect_ok "pass-through, no THAW_SHIM_MODE"
run THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/other.bin" THAW_SHIM_LAYOUT=/nonexistent -- \
	"$CHECK" "$T/sparse.bin"
expect_mmap_fail "mode set but THAW_SHIM_MEMFILE missing fails loudly" "THAW_SHIM_MEMFILE .*No such file"
touch "$T/other.bin"
run THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/other.bin" THAW_SHIM_LAYOUT=/nonexistent -- \
	"$CHECK" --write-check "$T/sparse.bin"
NO_SHIM_LINE=1 expect_ok "pass-through, mode set but a different memory file"

run THAW_SHIM_PROTECT=1 THAW_SHIM_READAHEAD=off THAW_SHIM_MEMFILE="$T/sparse.bin" -- "$CHECK" --write-check "$T/sparse.bin"
if json_has random_read true; then expect_ok "pass-through, THAW_SHIM_READAHEAD=off: guest RAM mapped MADV_RANDOM"; else
	fail "pass-through, THAW_SHIM_READAHEAD=off: guest RAM not MADV_RANDOM"; show; fi
run THAW_SHIM_PROTECT=1 THAW_SHIM_MEMFILE="$T/sparse.bin" -- "$CHECK" "$T/sparse.bin"
if json_has random_read false; then expect_ok "pass-through: readahead as the host has it without THAW_SHIM_READAHEAD"; else
	fail "pass-through: MADV_RANDOM without THAW_SHIM_READAHEAD"; show; fi

echo "== (b) layout mode"
python3 "$T/gen.py" layout "$T" 42 | sed 's/^/      generated: /'
L=(THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/mem.bin" THAW_SHIM_LSFILE="$T/ls.bin")
run "${L[@]}" THAW_SHIM_LAYOUT="$T/good.lay" -- "$CHECK" --write-check "$T/mem.bin"
WANT_ERR='^thaw-shim: layout: [0-9]+ entries' expect_ok "layout: correct table (mmap64)"
run "${L[@]}" THAW_SHIM_LAYOUT="$T/good.lay" -- "$CHECK_MMAP" --threads 2 "$T/mem.bin"
WANT_ERR='^thaw-shim: layout: ' expect_ok "layout: correct table (mmap symbol)"
# Same file reached through a symlink and a relative path: matching is by realpath.
ln -s "$T/mem.bin" "$T/mem-link.bin"
run "${L[@]}" THAW_SHIM_MEMFILE="$T/./mem-link.bin" THAW_SHIM_LAYOUT="$T/good.lay" -- \
	"$CHECK" "$T/mem.bin"
WANT_ERR='^thaw-shim: layout: ' expect_ok "layout: THAW_SHIM_MEMFILE via symlink"
run "${L[@]}" THAW_SHIM_LAYOUT="$T/good.lay" -- "$CHECK" --qemu-madvise --write-check "$T/mem.bin"
WANT_ERR='^thaw-shim: layout: ' expect_ok "layout: correct table + QEMU's madvise(HUGEPAGE/DONTFORK/MERGEABLE)"

run "${L[@]}" THAW_SHIM_LAYOUT="$T/wrong.lay" -- "$CHECK" "$T/mem.bin"
if [ $RC -eq 1 ] && ! json_has mismatches 0 && ! json_has first_mismatch -1; then
	pass "layout: wrong loading-set entry is detected"
else
	fail "layout: wrong loading-set entry is detected (rc=$RC)"
fi
show

for c in "bad_magic:bad magic" "bad_version:version 2" "bad_reserved:reserved 1" \
	"size_mismatch:mem_size" "truncated:bytes, want" "too_many:exceeds" \
	"oob:beyond mem_size" "oob_wrap:beyond mem_size" "misaligned:not page-aligned" \
	"misaligned_len:not page-aligned" "misaligned_file:not page-aligned" "zero_len:zero length" \
	"bad_kind:invalid kind" "entry_reserved:reserved field" \
	"mem_beyond:end of the memory file" "ls_beyond:end of the loading-set file"; do
	name=${c%%:*}
	run "${L[@]}" THAW_SHIM_LAYOUT="$T/$name.lay" -- "$CHECK" "$T/mem.bin"
	expect_mmap_fail "layout: malformed table ($name)" "${c#*:}.*: Invalid argument$"
done
run "${L[@]}" THAW_SHIM_LAYOUT="$T/nonexistent.lay" -- "$CHECK" "$T/mem.bin"
expect_mmap_fail "layout: missing table" "open layout table .*: No such file or directory$"
run THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/mem.bin" THAW_SHIM_LAYOUT="$T/good.lay" -- \
	"$CHECK" "$T/mem.bin"
expect_mmap_fail "layout: loading-set entries without THAW_SHIM_LSFILE" "THAW_SHIM_LSFILE is not set"
run THAW_SHIM_MODE=bogus THAW_SHIM_MEMFILE="$T/mem.bin" -- "$CHECK" "$T/mem.bin"
expect_mmap_fail "bad THAW_SHIM_MODE fails loudly" "not layout or uffd: Invalid argument$"

echo "== (b') layout mode at scale"
python3 "$T/gen.py" big "$T" 16384 4 | sed 's/^/      generated: /'
run THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/big.bin" THAW_SHIM_LAYOUT="$T/big.lay" \
	THAW_SHIM_LSFILE="$T/big_ls.bin" -- "$CHECK" --threads 2 --write-check "$T/big.bin"
WANT_ERR='^thaw-shim: layout: ' expect_ok "layout: 10240 entries over 64 MiB"
MAXMAP=$(cat /proc/sys/vm/max_map_count)
python3 "$T/gen.py" vmas "$T" $((MAXMAP / 2 + 1000))
run THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/vmas.bin" THAW_SHIM_LAYOUT="$T/vmas.lay" -- \
	"$CHECK" "$T/vmas.bin"
expect_mmap_fail "layout: more VMAs than vm.max_map_count=$MAXMAP fails loudly" \
	"max_map_count\?\): Cannot allocate memory$"

echo "== (b'') layout mode with a device (premap on device-DAX; a file stands in for the device)"
python3 "$T/gen.py" device "$T" 9 | sed 's/^/      generated: /'
cp "$T/dev.bin" "$T/dev.orig"
D=(THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/dmem.bin" THAW_SHIM_DEVICE="$T/dev.bin" THAW_SHIM_POPULATE=read
	THAW_SHIM_STATS="$T/dev.stats")
run "${D[@]}" THAW_SHIM_LAYOUT="$T/dev.lay" -- "$CHECK" --align 2097152 --threads 2 --write-check "$T/dmem.bin"
WANT_ERR='^thaw-shim: layout: 3 entries \(0 anon, 0 memory-file, 0 loading-set, 3 device\)' expect_ok \
	"device: shared clone range, populated, reads the snapshot, memory file untouched"
if python3 "$T/gen.py" devcheck "$T" >"$T/out" 2>&1 && grep -q "^bytes 16777216$" "$T/dev.stats"; then
	pass "device: guest writes land in the VM's range of the device and nowhere else"
else
	fail "device: guest writes land in the VM's range of the device and nowhere else"
fi
show
run "${D[@]}" THAW_SHIM_LAYOUT="$T/dev_beyond.lay" -- "$CHECK" "$T/dmem.bin"
expect_mmap_fail "device: entry beyond the device" "beyond the end of the device: Invalid argument$"
run THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$T/dmem.bin" THAW_SHIM_LAYOUT="$T/dev.lay" -- "$CHECK" "$T/dmem.bin"
expect_mmap_fail "device: device entries without THAW_SHIM_DEVICE" "THAW_SHIM_DEVICE is not set"
run "${D[@]}" THAW_SHIM_DEVICE="$T/nodev.bin" THAW_SHIM_LAYOUT="$T/dev.lay" -- "$CHECK" "$T/dmem.bin"
expect_mmap_fail "device: missing device" "open device .*: No such file or directory$"

echo "== (c) uffd mode"
U=(THAW_SHIM_MODE=uffd THAW_SHIM_MEMFILE="$T/mem.bin" THAW_SHIM_UFFD_SOCK="$T/uffd.sock")
for extra in "" "--qemu-madvise"; do
	name="uffd: 4 threads, fake daemon${extra:+, $extra}"
	if start_daemon serve "$T/mem.bin"; then
		run "${U[@]}" -- "$CHECK" --threads 4 --write-check $extra "$T/mem.bin"
		stop_daemon
		echo "      daemon: $(cat "$T/stats.json" 2>/dev/null)"
		if ! python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(not (s["faults"] > 0 and s["outside"] == 0 and s["other_events"] == 0))' "$T/stats.json" 2>/dev/null; then
			RC=99
			cat "$T/daemon.err"
		fi
		WANT_ERR='^thaw-shim: uffd: registered [0-9]+ bytes' expect_ok "$name"
	else
		fail "$name"
	fi
done
run "${U[@]}" THAW_SHIM_UFFD_SOCK="$T/nobody.sock" -- "$CHECK" "$T/mem.bin"
expect_mmap_fail "uffd: no daemon listening" "connect .*: (No such file or directory|Connection refused)$"
if start_daemon noack "$T/mem.bin"; then
	run "${U[@]}" -- "$CHECK" "$T/mem.bin"
	stop_daemon
	expect_mmap_fail "uffd: daemon hangs up without ack" "waiting for daemon ack .*: Connection reset by peer$"
else
	fail "uffd: daemon hangs up without ack"
fi

# --- protection: QEMU's hole punches into the memory file are ignored ---
punch() { # punch FILE [VAR=value ...]: fallocate(PUNCH_HOLE) page 1 of FILE with the shim preloaded
	local f=$1; shift
	env -i PATH="$PATH" LD_PRELOAD="$SHIM" "$@" fallocate --punch-hole --offset 4096 --length 4096 "$f" 2>"$T/err"
}
head -c 16384 /dev/urandom >"$T/prot.mem"
cp "$T/prot.mem" "$T/other.mem"
before=$(sha256sum <"$T/prot.mem")
if punch "$T/prot.mem" THAW_SHIM_PROTECT=1 THAW_SHIM_MEMFILE="$T/prot.mem" && [ "$(sha256sum <"$T/prot.mem")" = "$before" ] &&
	grep -q "kept .* intact" "$T/err"; then
	pass "protect: punch into the memory file ignored"
else
	fail "protect: punch into the memory file ignored"
fi
if punch "$T/other.mem" THAW_SHIM_PROTECT=1 THAW_SHIM_MEMFILE="$T/prot.mem" && [ "$(sha256sum <"$T/other.mem")" != "$before" ]; then
	pass "protect: other files are punched as asked"
else
	fail "protect: other files are punched as asked"
fi
cp "$T/prot.mem" "$T/unprot.mem"
if punch "$T/unprot.mem" THAW_SHIM_MEMFILE="$T/unprot.mem" && [ "$(sha256sum <"$T/unprot.mem")" != "$before" ]; then
	pass "protect: off without THAW_SHIM_PROTECT"
else
	fail "protect: off without THAW_SHIM_PROTECT"
fi
cp "$T/prot.mem" "$T/record.mem"
if punch "$T/record.mem" THAW_SHIM_PROTECT=1 THAW_SHIM_PUNCH=pass THAW_SHIM_MEMFILE="$T/record.mem" &&
	[ "$(sha256sum <"$T/record.mem")" != "$before" ] && [ "$(head -c 8192 "$T/record.mem" | tail -c 4096 | tr -d '\0' | wc -c)" = 0 ]; then
	pass "protect: THAW_SHIM_PUNCH=pass punches the record VM's own copy"
else
	fail "protect: THAW_SHIM_PUNCH=pass punches the record VM's own copy"
fi

# --- file table: QEMU runs as an unprivileged user and gets thaw's files as inherited descriptors ---
echo "== (e) file table (unprivileged, files in a root-only directory)"
cat >"$T/launch.py" <<'PYEOF'
# launch.py [--uid N] [--file PATH:MODE]... [--sock PATH] [--uffd-dev] -- CMD...: opens the files
# (MODE r or rw) and connects the socket as root, announces them as THAW_SHIM_FD_<n>, drops to
# uid N and runs CMD with the shim preloaded, like thawd starting QEMU.
import os, socket, sys
args = sys.argv[1:]
uid, files, fds, keep = None, [], [], []
while args[0] != "--":
    a = args.pop(0)
    if a == "--uid":
        uid = int(args.pop(0))
    elif a == "--file":
        path, mode = args.pop(0).rsplit(":", 1)
        files.append((path, os.open(path, os.O_RDWR if mode == "rw" else os.O_RDONLY)))
    elif a == "--sock":
        path = args.pop(0)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        keep.append(s)
        files.append((path, s.fileno()))
    elif a == "--uffd-dev":
        files.append(("/dev/userfaultfd", os.open("/dev/userfaultfd", os.O_RDWR)))
cmd = args[1:]
env = {k: v for k, v in os.environ.items() if not k.startswith("THAW_SHIM_FD_")}
for i, (path, fd) in enumerate(files):
    os.set_inheritable(fd, True)
    env["THAW_SHIM_FD_%d" % i] = "%d:%s" % (fd, path)
if uid is not None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
os.execvpe(cmd[0], cmd, env)
PYEOF
P=$T/private
mkdir -m 0700 "$P"
cp "$T/mem.bin" "$T/ls.bin" "$T/good.lay" "$P/"
LP=(THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE="$P/mem.bin" THAW_SHIM_LSFILE="$P/ls.bin" THAW_SHIM_LAYOUT="$P/good.lay")
run "${LP[@]}" -- python3 "$T/launch.py" --uid 65534 --file "$P/mem.bin:r" --file "$P/ls.bin:r" \
	--file "$P/good.lay:r" -- "$CHECK" --write-check "$P/mem.bin"
WANT_ERR='^thaw-shim: layout: [0-9]+ entries' expect_ok "table: layout as uid 65534, read-only memory file opened O_RDWR by the mapper"
run "${LP[@]}" -- python3 "$T/launch.py" --uid 65534 -- "$CHECK" "$P/mem.bin"
if [ $RC -ne 0 ] && grep -q "Permission denied" "$T/err" "$T/out"; then
	pass "table: without it the unprivileged mapper cannot open the files"
else
	fail "table: without it the unprivileged mapper cannot open the files (rc=$RC)"
fi
show
cp "$T/mem.bin" "$P/rw.bin"
before=$(sha256sum <"$P/rw.bin")
run -- python3 "$T/launch.py" --uid 65534 --file "$P/rw.bin:r" -- \
	python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.write(b"x"); f.close()' "$P/rw.bin"
if [ $RC -ne 0 ] && [ "$(sha256sum <"$P/rw.bin")" = "$before" ]; then
	pass "table: a file passed read-only cannot be written through it"
else
	fail "table: a file passed read-only cannot be written through it (rc=$RC)"
fi
show
if start_daemon serve "$P/mem.bin"; then
	run THAW_SHIM_MODE=uffd THAW_SHIM_MEMFILE="$P/mem.bin" THAW_SHIM_UFFD_SOCK="$T/uffd.sock" -- \
		python3 "$T/launch.py" --uid 65534 --file "$P/mem.bin:r" --sock "$T/uffd.sock" --uffd-dev -- \
		"$CHECK" --threads 2 --write-check "$P/mem.bin"
	stop_daemon
	WANT_ERR='^thaw-shim: uffd: registered [0-9]+ bytes' expect_ok "table: uffd as uid 65534 via /dev/userfaultfd and a connected socket"
else
	fail "table: uffd as uid 65534 via /dev/userfaultfd and a connected socket"
fi
if [ "$(cat /proc/sys/vm/unprivileged_userfaultfd)" = 0 ] && start_daemon serve "$P/mem.bin"; then
	run THAW_SHIM_MODE=uffd THAW_SHIM_MEMFILE="$P/mem.bin" THAW_SHIM_UFFD_SOCK="$T/uffd.sock" -- \
		python3 "$T/launch.py" --uid 65534 --file "$P/mem.bin:r" --sock "$T/uffd.sock" -- "$CHECK" "$P/mem.bin"
	stop_daemon
	expect_mmap_fail "table: uffd as uid 65534 without /dev/userfaultfd is refused by the kernel" "userfaultfd: Operation not permitted$"
fi

echo
if [ $FAILS -eq 0 ]; then
	echo "ALL PASS"
else
	echo "$FAILS FAILED"
	exit 1
fi
