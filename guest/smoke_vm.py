"""Host side of the guest smoke tests (smoke-test.sh, smoke-functions.py):
QEMU's command line for a thaw guest under TCG, and NDJSON connections to
the agent (virtio-serial) and QMP on their unix sockets.
"""
import json
import socket
import time


def qemu_argv(img, vmdir, append, mem, mem_path, share="on", kernel="vmlinux", fn_disk=None, qmp=False):
    """argv of a TCG guest of image img: RAM of size mem (QEMU syntax, e.g.
    "256M") in the file mem_path, console in vmdir/console.log; with qmp, a
    QMP socket vmdir/qmp.sock; with fn_disk, the root and function disks, user
    networking and the agent socket vmdir/agent.sock (devices in this order)."""
    argv = [
        "qemu-system-x86_64", "-machine", "pc,accel=tcg,memory-backend=mem", "-cpu", "max",
        "-smp", "1", "-m", mem,
        "-object", f"memory-backend-file,id=mem,size={mem},mem-path={mem_path},share={share}",
        "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-vga", "none",
        "-kernel", f"{img}/{kernel}", "-initrd", f"{img}/initrd.img", "-append", append,
        "-serial", f"file:{vmdir}/console.log",
    ]
    if qmp:
        argv += ["-qmp", f"unix:{vmdir}/qmp.sock,server=on,wait=off"]
    if fn_disk:
        argv += [
            "-drive", f"file={img}/rootfs.ext4,if=none,id=root,format=raw,readonly=on",
            "-device", "virtio-blk-pci,drive=root",
            "-drive", f"file={fn_disk},if=none,id=fn,format=raw,readonly=on",
            "-device", "virtio-blk-pci,drive=fn",
            "-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0",
            "-device", "virtio-serial-pci",
            "-chardev", f"socket,id=agent,path={vmdir}/agent.sock,server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=org.thaw.agent",
        ]
    return argv


def connect_unix(path, timeout=10):
    """Connects to a unix socket, retrying until QEMU has created it."""
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


class LineConn:
    """One JSON object per line, both ways."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def send(self, obj):
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self, timeout):
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


class Agent(LineConn):
    """The agent's protocol on its virtio-serial socket."""

    def __init__(self, path):
        super().__init__(connect_unix(path))
        self.n = 0

    def wait_pong(self, timeout=120):
        """Pings every 0.5 s (they queue while the guest has not opened the port)."""
        deadline, next_ping = time.monotonic() + timeout, 0
        while time.monotonic() < deadline:
            if time.monotonic() >= next_ping:
                self.n += 1
                self.send({"id": f"ping-{self.n}", "op": "ping"})
                next_ping = time.monotonic() + 0.5
            try:
                msg = self.recv(0.05)
            except socket.timeout:
                continue
            if msg.get("op") == "pong":
                return msg
        raise TimeoutError("no pong from the agent")

    def call(self, req, timeout=60):
        """Sends req with a fresh id and returns the answer with that id."""
        self.n += 1
        req = {"id": f"req-{self.n}", **req}
        self.send(req)
        while True:
            msg = self.recv(timeout)
            if msg.get("id") == req["id"]:
                return msg

    def invoke(self, function, event, timeout=60):
        return self.call({"op": "invoke", "function": function, "event": event}, timeout)


class QMP(LineConn):
    """A QMP connection, past the greeting and capabilities negotiation."""

    def __init__(self, path):
        super().__init__(connect_unix(path))
        self.recv(10)  # greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, **args):
        self.send({"execute": name, "arguments": args} if args else {"execute": name})
        while True:
            msg = self.recv(30)
            if "return" in msg:
                return msg["return"]
            if "error" in msg:
                raise RuntimeError(f"QMP {name}: {msg['error']}")

    def wait_migration(self):
        while True:
            st = self.cmd("query-migrate").get("status")
            if st == "completed":
                return
            if st in ("failed", "cancelled"):
                raise RuntimeError(f"migration {st}")
            time.sleep(0.002)
