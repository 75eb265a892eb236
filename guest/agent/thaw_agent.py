"""thaw guest agent: PID 1 inside every thaw microVM.

Sets up the guest (scratch mounts, network, function disk), imports the function's
handler before the host takes a snapshot, then serves newline-delimited JSON requests
on the virtio-serial port "org.thaw.agent", one at a time, in order.

Standard library only: the agent must not depend on anything a function might
shadow or break, and the rootfs ships only Debian's python3.

Protocol (one JSON object per line, UTF-8, both directions, but for the restore request):
  {"id":"1","op":"ping"}
    -> {"id":"1","ok":true,"op":"pong","agent":"thaw-agent/6","function":"hello","uptime_ms":...,"env":N}
       env: how many of the function's environment variables the agent set at boot
       (from the code disk's .thaw/config.json, before the handler was imported);
       plus "function_error":{"type","message","traceback"} when the function cannot be
       invoked (its dependency layer or its import failed): the host fails the boot.
  restore 3 <host CLOCK_REALTIME ns> <entropy, hex> [<secrets, hex>]
    -> {"id":"3","ok":true,"clock_step_ms":...,"reseeded":[...],"hook":{"ran":...,"ms":...,"error":...},"secrets":N}
       sent by the host after every restore, before the first invocation: the clock,
       the kernel's RNG, Python's generators (random, tempfile's names, numpy's global
       generator, multiprocessing's key), OpenSSL's DRBGs, the function's secrets into
       os.environ, then the function's on_restore() hook. The secrets (protocol 4) are
       NAME=VALUE entries joined by NUL bytes, in hex; absent: none. Only restored VMs get
       them, so no snapshot holds them. A plain line, not JSON: a clone's first request runs on code
       the VMM has not translated yet (TCG), so it takes the fewest code paths (no
       json.loads, no base64, a preformatted answer). Agents before protocol 2 answer
       it as malformed JSON (id null) and the host resends it as
  {"id":"3","op":"restore","time_ns":<host CLOCK_REALTIME>,"entropy":"<base64>"}
       which this agent still accepts.
  restore 3 <time_ns> <entropy, hex> <secrets, hex, or -> nohook
       (protocol 6) the same renewal without the on_restore() hook: a ready clone's
       fill, whose dispatch renews it again and runs the hook then, once.
  restore 3 <time_ns> <entropy, hex> <secrets, hex, or -> invoke {"id":"4","op":"invoke",...}
       (protocol 6) the renewal with the hook, answered as above, then the invoke
       request that is the rest of the line, answered as if it were the next line
       (a ready clone's dispatch: one round trip). Not run if the renewal failed.
       Agents before protocol 6 refuse both forms as malformed JSON (id null).
  {"id":"4","op":"clock","time_ns":<host CLOCK_REALTIME>}
    -> {"id":"4","ok":true,"clock_step_ms":...}   (after a pause)
  {"id":"2","op":"invoke","function":"hello","event":{...},"max_result":<bytes>,"max_logs":<bytes>}
    -> {"id":"2","ok":true,"duration_ms":...,"logs":{...},"result":...}
    -> {"id":"2","ok":false,"error":{"type":...,"message":...,"traceback":...},"duration_ms":...,"logs":{...}}
       The function "thaw:warm-up" (no function can be called so) runs a built-in
       handler that returns its event (protocol 6; older agents refuse it as
       FunctionNotFound) through the same path as the function's own, so that TCG
       has translated that path before a ready clone's first request. No function
       code runs; its output and kernel messages are left for the next invocation.
       The result is serialized once and comes last, written a piece at a time (the
       host streams it to a spill). A result whose JSON is longer than max_result
       (default MAX_RESULT) is not sent: the error ResultTooLarge says its size and
       the limit. Agents before protocol 3 put the result before duration_ms.
       logs (protocol 5): {"output":...,"bytes":N,"cut":N,"kernel":...,"error":...}:
       what the function and the processes it started wrote to stdout and stderr (file
       descriptors 1 and 2, in the order written) since the previous invocation ended:
       bytes in all; over max_logs bytes (default MAX_LOGS), its first and last parts
       with a line saying how many bytes were cut between them. kernel: the guest
       kernel's messages since then (an OOM kill, a segfault), as dmesg prints them;
       error: why nothing was captured. Every invoke reply of this agent has logs;
       older agents send none.
  Unsolicited, once after start-up if the host is connected: {"event":"ready",...}
"""

import base64
import binascii
import ctypes
import errno
import fcntl
import importlib
import json
import os
import random
import re
import select
import signal
import struct
import subprocess
import sys
import time
import traceback

AGENT = "thaw-agent/6"  # /2: the plain-line restore request; /3: results last, bounded; /4: environment and secrets; /5: logs;
# /6: restore without the hook, restore then invoke on one line, the warm-up invocation
WARM_UP = "thaw:warm-up"     # the built-in no-op function (protocol 6)
PORT_NAME = "org.thaw.agent"
FN_ROOT = "/fn"
DEFAULT_FN_DEV = "/dev/vdb"
DEPS_ROOT = "/deps"            # the function's dependency layer (thaw.deps=<fstype>)
DEFAULT_DEPS_DEV = "/dev/vdc"
DEPS_SITE = DEPS_ROOT + "/site"
DEFAULT_IP = "10.0.2.15/24"  # QEMU user-mode networking: guest address,
DEFAULT_GW = "10.0.2.2"      # and the host as seen from the guest.
MAX_LINE = 64 << 20          # longest request accepted; guards guest memory
MAX_RESULT = 32 << 20        # longest result (JSON bytes) unless the host says otherwise
MAX_ERROR_TEXT = 128 << 10   # characters of an error's message or traceback sent
READ_CHUNK = 1 << 16
SEND_CHUNK = 1 << 20         # bytes of a result encoded and written at a time
MAX_LOGS = 256 << 10         # bytes of an invocation's output sent unless the host says otherwise
MAX_KERNEL_LOG = 16 << 10    # characters of kernel messages sent per invocation
# While the host is disconnected the port polls as POLLHUP, so the agent sleeps
# in sigtimedwait instead. The kernel raises SIGIO when the host (re)connects, so
# this timeout is only a safety net and does not bound reconnect latency.
DISCONNECTED_WAIT_S = 0.02
IDLE_POLL_MS = 1000          # connected but idle: wake up to reap zombies

MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
RESTORE_PREFIX = b"restore "
RNDADDENTROPY = 0x40085203   # _IOW('R', 0x03, int[2])
RNDRESEEDCRNG = 0x5207       # _IO('R', 0x07)
MAX_ENTROPY = 512
MAX_SECRETS = 64             # variables in one restore request
ENV_NAME_RE = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch
CONFIG_FILE = ".thaw/config.json"  # on the code disk, beside the function's directory
RB_POWER_OFF = 0x4321FEDC

_libc = ctypes.CDLL(None, use_errno=True)
_console_fd = None


def log(msg):
    """One line on the serial console; never raises (the console is best effort)."""
    global _console_fd
    try:
        if _console_fd is None:
            _console_fd = os.open("/dev/console", os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
        os.write(_console_fd, f"thaw-agent: {msg}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def uptime_ms():
    return time.clock_gettime(time.CLOCK_BOOTTIME) * 1000.0


def power_off(reason):
    """Ends the VM. PID 1 must not just exit: that panics the kernel, which also
    ends the VM (panic=-1) but buries the reason in a panic message."""
    log(f"FATAL: {reason}; powering off")
    os.sync()
    _libc.reboot(RB_POWER_OFF)
    os._exit(1)  # only reached if reboot(2) failed


def kernel_params():
    try:
        with open("/proc/cmdline") as f:
            words = f.read().split()
    except OSError:
        return {}
    return dict(w.split("=", 1) for w in words if "=" in w)


def reap_zombies():
    """As PID 1 we inherit every orphan. Only called between requests, so a
    handler's own subprocess.run() never has its child's status stolen."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --- Guest setup -----------------------------------------------------------------

def mounted_paths():
    try:
        with open("/proc/mounts") as f:
            return {line.split()[1] for line in f if len(line.split()) > 1}
    except OSError:
        return set()


def mount(source, target, fstype, flags=0, data=""):
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype}): {os.strerror(err)}")


def ensure_scratch_mounts():
    """thaw-init normally did this already; the rootfs is read-only, so anything
    that writes (Python's tempfile, handlers) needs these tmpfs mounts."""
    have = mounted_paths()
    wanted = [("/tmp", "mode=1777"), ("/var/tmp", "mode=1777"), ("/run", "mode=755"),
              ("/root", "mode=700"), ("/dev/shm", "mode=1777")]
    for path, opts in wanted:
        if path in have or not os.path.isdir(path):
            continue
        try:
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts)
        except OSError as e:
            log(str(e))


def setup_network(params):
    """Static addressing for QEMU user-mode networking; no DHCP client needed."""
    ip_cmds = ["link set lo up"]
    if os.path.exists("/sys/class/net/eth0"):
        ip_cmds += [
            "link set eth0 up",
            f"addr add {params.get('thaw.ip', DEFAULT_IP)} dev eth0",
            f"route add default via {params.get('thaw.gw', DEFAULT_GW)}",
        ]
    else:
        log("no eth0: networking limited to loopback")
    # One `ip -batch` process instead of one per command: fork+exec is slow under TCG.
    try:
        r = subprocess.run(["ip", "-batch", "-"], input="\n".join(ip_cmds) + "\n",
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        log(f"network setup failed: {e}")
        return
    if r.returncode != 0:
        log(f"network setup failed: {r.stderr.strip()}")
    elif len(ip_cmds) > 1:
        log(f"network up: eth0 {params.get('thaw.ip', DEFAULT_IP)}")


class Function:
    """The one function this VM serves, imported eagerly so the import cost is
    paid before the snapshot. Failures are kept and reported on every invoke."""

    NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

    def __init__(self, name):
        self.name = name
        self.module = None
        self.handle = None
        self.on_restore = None  # the module's on_restore(), looked up once at import
        self.error = None  # {"type", "message", "traceback"} when not invocable
        self.env = 0  # environment variables set from the code disk's config

    def load(self, fn_dev, deps=None):
        """Mounts the function's disk (and dependency layer: deps is (device,
        fstype) or None) and imports its handler."""
        if self.name is None:
            self.error = _error("FunctionNotFound", "no thaw.function= on the kernel command line")
            return
        if not self.NAME_RE.match(self.name):
            self.error = _error("FunctionNotFound", f"invalid function name {self.name!r}")
            return
        if not self._mount_disk(fn_dev):
            return
        try:
            self.env = apply_config(os.path.join(FN_ROOT, CONFIG_FILE))
        except (OSError, ValueError) as e:
            self.error = _error("ConfigError", f"function configuration: {e}")
            log(self.error["message"])
            return
        fn_dir = os.path.join(FN_ROOT, self.name)
        if not os.path.isfile(os.path.join(fn_dir, "handler.py")):
            self.error = _error("FunctionNotFound", f"{fn_dir}/handler.py does not exist")
            log(self.error["message"])
            return
        sys.path.insert(0, fn_dir)
        if deps is not None and not self._add_deps(*deps, fn_dir):
            return
        os.chdir(fn_dir)  # lets handlers open their bundled files by relative path
        t0 = time.perf_counter()
        try:
            module = importlib.import_module("handler")
            handle = getattr(module, "handle", None)
            if not callable(handle):
                raise AttributeError(f"{fn_dir}/handler.py does not define a callable handle(event)")
        except BaseException as e:  # SystemExit etc. from module code must not kill PID 1
            self.error = _import_error(e, fn_dir)
            log(f"function {self.name}: import failed: {self.error['type']}: {self.error['message']}")
            return
        self.attach(module, handle)
        log(f"function {self.name} imported in {(time.perf_counter() - t0) * 1000:.0f} ms")

    def attach(self, module, handle):
        """Binds the imported handler module; whether it has an on_restore() hook
        is decided here, before the snapshot, not on every restore."""
        self.module = module
        self.handle = handle
        hook = getattr(module, "on_restore", None)
        self.on_restore = hook if callable(hook) else None

    def _add_deps(self, dev, fstype, fn_dir):
        """Mounts the dependency layer read-only and puts its site directory on
        sys.path right after the function's own directory, ahead of the image's
        packages. site.addsitedir processes its .pth files as pip's installs
        would have been."""
        import site
        try:
            if DEPS_ROOT not in mounted_paths():
                wait_for(dev)
                mount(dev, DEPS_ROOT, fstype, MS_RDONLY | MS_NOSUID | MS_NODEV)
            before = list(sys.path)
            site.addsitedir(DEPS_SITE)
        except BaseException as e:  # a broken .pth file raises from site
            self.error = _exc_error(e)
            self.error["message"] = f"dependency layer unavailable: {self.error['message']}"
            log(self.error["message"])
            return False
        added = [p for p in sys.path if p not in before]
        sys.path[:] = [fn_dir] + added + [p for p in before if p != fn_dir]
        return True

    def _mount_disk(self, fn_dev):
        if FN_ROOT in mounted_paths():
            return True
        wait_for(fn_dev)
        try:
            mount(fn_dev, FN_ROOT, "ext4", MS_RDONLY | MS_NOSUID | MS_NODEV)
            return True
        except OSError as e:
            self.error = _error("FunctionNotFound", f"function disk unavailable: {e}")
            log(self.error["message"])
            return False


def wait_for(dev):
    """virtio-blk devices appear when the module loads in the initramfs, so
    this wait is normally zero; it is short since a disk may be absent."""
    deadline = time.monotonic() + 0.5
    while not os.path.exists(dev) and time.monotonic() < deadline:
        time.sleep(0.01)


def apply_config(path):
    """Sets the function's environment from its configuration file, before its
    module is imported, so module-level code sees it; returns how many variables
    were set (0 without a file). Only plain variables are there: secrets never
    are (they arrive with the restore request)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return 0
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("env"), dict):
        raise ValueError(f"{path}: not a version 1 configuration")
    env = doc["env"]
    for k, v in env.items():
        if not isinstance(v, str) or not ENV_NAME_RE.fullmatch(k.encode()) or "\0" in v:
            raise ValueError(f"{path}: bad environment variable {k[:64]!r}")
    os.environ.update(env)
    return len(env)


def decode_secrets(blob):
    """The restore request's secrets: hex of NAME=VALUE entries joined by NUL
    bytes, as [(name, value)] bytes pairs. Refused whole if any entry is bad;
    the error never quotes a value."""
    try:
        raw = binascii.unhexlify(blob)
    except (binascii.Error, ValueError):
        raise ValueError("secrets are not hex") from None
    entries = raw.split(b"\0")
    if len(entries) > MAX_SECRETS:
        raise ValueError(f"more than {MAX_SECRETS} secrets")
    out = []
    for i, e in enumerate(entries):
        name, eq, value = e.partition(b"=")
        if not eq or not ENV_NAME_RE.fullmatch(name):
            raise ValueError(f"secret entry {i} is not NAME=VALUE")
        out.append((name, value))
    return out


def _error(type_, message, tb=""):
    """An error for the host. Its texts are cut so that the reply stays well under
    the host's bound on everything but a result (4 MiB even if every character
    were escaped)."""
    return {"type": _cut(type_, 256), "message": _cut(message), "traceback": _cut(tb)}


def _positive(v, default):
    """v if it is a positive integer, else default."""
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        return default
    return v


def _cut(text, limit=MAX_ERROR_TEXT):
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters cut]"


def _exc_error(e):
    return _error(type(e).__name__, str(e),
                  "".join(traceback.format_exception(type(e), e, e.__traceback__)))


def _import_error(e, fn_dir):
    """An exception from importing the handler, its traceback starting at the
    function's own code (the agent's and importlib's frames say nothing to its
    author); a SyntaxError in it shows the offending line without frames."""
    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(fn_dir + "/"):
        tb = tb.tb_next
    return _error(type(e).__name__, str(e), "".join(traceback.format_exception(type(e), e, tb)))


# --- Control channel ---------------------------------------------------------------

def find_port(name, timeout_s=10.0):
    """/dev/virtio-ports/<name> is a udev rule, and there is no udev: match the
    port name in sysfs. The name arrives from the host asynchronously after the
    port is created, hence the wait."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            vports = sorted(os.listdir("/sys/class/virtio-ports"))
        except OSError:
            vports = []
        for vport in vports:
            try:
                with open(f"/sys/class/virtio-ports/{vport}/name") as f:
                    if f.read().strip() == name and os.path.exists(f"/dev/{vport}"):
                        return f"/dev/{vport}"
            except OSError:
                continue
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


class Channel:
    """The virtio-serial port, tolerant of the host coming and going.

    Linux virtio_console semantics that shape this class:
      * host disconnected: read() returns 0 (EOF) and poll() reports POLLHUP at
        once, so we sleep in sigtimedwait(SIGIO) until the kernel signals that the
        host connected again (O_ASYNC) and then simply carry on reading;
      * host disconnected: write() would block (EAGAIN with O_NONBLOCK) until the
        host returns, so replies addressed to a host that went away are dropped;
      * a snapshot restored into a new QEMU looks like a disconnect + reconnect.
    """

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        # Blocked, so it stays pending for sigtimedwait; the no-op handler keeps
        # the default action (terminate) away should any thread unblock it.
        signal.signal(signal.SIGIO, lambda *_: None)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGIO})
        fcntl.fcntl(self.fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) | os.O_ASYNC)
        self.poller = select.poll()
        self.poller.register(self.fd, select.POLLIN)
        self.read_at = 0.0  # CLOCK_MONOTONIC (s) when the last read returned data

    def lines(self):
        """Yields complete request lines (bytes, without the newline) forever."""
        buf = bytearray()
        scanned = 0      # bytes of buf already known to hold no newline
        discarding = False  # inside an over-long line: drop up to its newline
        while True:
            nl = buf.find(b"\n", scanned)
            if nl >= 0:
                line = bytes(buf[:nl])
                del buf[:nl + 1]
                scanned = 0
                if discarding:
                    discarding = False
                    yield None  # reported as BadRequest by the caller
                else:
                    yield line
                continue
            scanned = len(buf)
            if len(buf) > MAX_LINE:
                buf.clear()
                scanned = 0
                discarding = True
            data = self._read()
            if data is None:
                continue
            if not data:
                # Host gone: a partial line belongs to the old connection and would
                # corrupt the first request of the next one.
                if buf or discarding:
                    log(f"host disconnected mid-request; dropped {len(buf)} bytes")
                buf.clear()
                scanned = 0
                discarding = False
                signal.sigtimedwait({signal.SIGIO}, DISCONNECTED_WAIT_S)
                continue
            buf += data

    def _read(self):
        """Bytes read, b"" if the host is disconnected, None if nothing arrived."""
        if not self.poller.poll(IDLE_POLL_MS):
            on_idle()
            return None
        try:
            data = os.read(self.fd, READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        self.read_at = time.monotonic()
        return data

    def send(self, obj, wait=True):
        """Writes one JSON line. Returns False if it was dropped because the host is
        not connected (or, with wait=False, not reading right now)."""
        return self.send_line(json.dumps(obj, separators=(",", ":")), wait)

    def send_line(self, text, wait=True):
        """Writes text (one line of JSON, without its newline); see send."""
        return self.write((text + "\n").encode(), wait)

    def send_chunks(self, chunks):
        """Writes the pieces of one line (bytes; the last ends with the newline) as
        they come, so that a long line is never held whole. Returns False if the host
        went away."""
        return all(self.write(c) for c in chunks)

    def write(self, data, wait=True):
        """Writes all of data; see send."""
        data = memoryview(data)
        while data:
            try:
                n = os.write(self.fd, data)
                data = data[n:]
                continue
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                log(f"write to {self.path} failed: {e}")
                return False
            if not wait:
                return False
            # Connected but the host is slow: wait for room. A disconnect shows as
            # POLLHUP without POLLOUT, and then the reply has no one to go to.
            events = 0
            while not events & select.POLLOUT:
                p = select.poll()
                p.register(self.fd, select.POLLOUT)
                events = sum(ev for _, ev in p.poll(IDLE_POLL_MS))
                if events & select.POLLHUP and not events & select.POLLOUT:
                    log("host disconnected before a reply could be sent; dropped it")
                    return False
        return True


# --- Output capture ------------------------------------------------------------------

NO_LOGS = {"output": "", "bytes": 0}  # the logs of an invocation whose handler did not run
KMSG_SKIP_LEVEL = 7  # kernel messages at this level (debug) and above are left out
OUTPUT_TRIM = 1 << 20  # the output file is emptied once this much was read from it


class OutputCapture:
    """Captures what the function writes to stdout and stderr. Once attached,
    file descriptors 1 and 2 point at a memory file (memfd) for good, so
    print(), C code and subprocesses are caught alike, in the order written.
    Each invocation's logs are what was written since the previous one ended
    (output of threads or processes the function left running included, as
    Lambda does), read when its handler returns: two system calls per
    invocation when nothing was written (under TCG each costs the guest about
    0.1 ms), none per line. The file is emptied now and then; what is written
    between invocations past OUTPUT_TRIM while the agent is idle is dropped
    (trim) and counted. kernel_path: /dev/kmsg, whose messages since the
    previous invocation (or the restore) are kept too."""

    def __init__(self, kernel_path=None):
        self.fd = -1
        self.end = 0       # offset in the file where the next invocation's output starts
        self.dropped = 0   # bytes written since then that were dropped
        self.error = "output not captured"
        self.kmsg = None
        self.kpoll = select.poll()
        if kernel_path is not None:
            try:
                self.kmsg = os.open(kernel_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                os.lseek(self.kmsg, 0, os.SEEK_END)
                self.kpoll.register(self.kmsg, select.POLLIN)
            except OSError as e:
                log(f"kernel messages will not be in invocation logs: {e}")

    def attach(self):
        """Points descriptors 1 and 2 at a new memory file; what was written
        before goes to the console still. Never raises."""
        _flush_std()
        try:
            fd = os.memfd_create("thaw-output", os.MFD_CLOEXEC)
        except OSError as e:
            self.error = f"output not captured: {e}"
            log(self.error)
            return
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        except OSError as e:
            self.error = f"output not captured: {e}"
            log(self.error)
            os.close(fd)
            return
        self.fd, self.end, self.error = fd, 0, None
        _line_buffered_output()

    def skip_kernel_messages(self):
        """Kernel messages so far are no invocation's (a clone's restore)."""
        if self.kmsg is not None:
            try:
                os.lseek(self.kmsg, 0, os.SEEK_END)
            except OSError:
                pass

    def stop(self, limit, keep=False):
        """An invocation's handler returned: its logs (never raises). keep (the
        warm-up): read them the same way, but leave them for the next invocation."""
        if self.fd < 0:
            logs = {"output": "", "bytes": 0, "error": self.error}
        else:
            _flush_std()
            try:
                logs = self._read(limit, keep)
            except OSError as e:
                logs = {"output": "", "bytes": 0, "error": f"output not read: {e}"}
        kernel = self.kernel_messages(keep)
        if kernel:
            logs["kernel"] = kernel
        return logs

    def _read(self, limit, keep=False):
        end = os.lseek(self.fd, 0, os.SEEK_CUR)  # shared by every writer: where the next byte goes
        start, dropped = self.end, self.dropped
        n = max(end - start, 0)
        logs = read_output(self.fd, start, n, limit) if n else {"output": "", "bytes": 0}
        if dropped:
            logs["output"] = f"[thaw: {dropped} bytes written before this invocation were cut]\n" + logs["output"]
            logs["bytes"] += dropped
            logs["cut"] = logs.get("cut", 0) + dropped
        if keep:
            return logs
        self.end, self.dropped = end, 0
        if end > OUTPUT_TRIM:
            self._empty()
        return logs

    def trim(self):
        """While the agent is idle: output written since the last invocation
        beyond OUTPUT_TRIM is dropped, so a function that writes between
        invocations does not fill the guest's memory."""
        if self.fd < 0:
            return
        try:
            end = os.lseek(self.fd, 0, os.SEEK_CUR)
            if end - self.end > OUTPUT_TRIM:
                self.dropped += end - self.end
                self._empty()
        except OSError as e:
            log(f"output file not trimmed: {e}")

    def _empty(self):
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        self.end = 0

    def kernel_messages(self, keep=False):
        """The kernel's messages not read yet, one "[seconds] text" line each,
        at most MAX_KERNEL_LOG characters. keep: only whether there are any, none
        read ("" either way)."""
        if self.kmsg is None or not self.kpoll.poll(0) or keep:  # poll: no exception to raise when there are none
            return ""
        lines, size, dropped = [], 0, 0
        for _ in range(100000):  # a kernel that never stops logging does not hold the reply
            try:
                rec = os.read(self.kmsg, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten before it was read: go on
                continue
            except OSError:
                break
            if not rec:
                break
            head, _, text = rec.decode("utf-8", "backslashreplace").partition(";")
            fields = head.split(",")
            if len(fields) < 3 or not fields[0].isdigit() or int(fields[0]) & 7 >= KMSG_SKIP_LEVEL:
                continue
            usec = int(fields[2]) if fields[2].isdigit() else 0
            line = "[%5d.%06d] %s" % (usec // 1000000, usec % 1000000, text.split("\n", 1)[0])
            if size + len(line) > MAX_KERNEL_LOG:
                dropped += 1
                continue
            lines.append(line)
            size += len(line) + 1
        if dropped:
            lines.append(f"[thaw: {dropped} more kernel messages cut]")
        return "\n".join(lines) + "\n" if lines else ""


_capture = None  # the agent's OutputCapture, trimmed while idle (on_idle)


def on_idle():
    """The agent is connected but idle (every IDLE_POLL_MS)."""
    reap_zombies()
    if _capture is not None:
        _capture.trim()


def _line_buffered_output():
    """C's stdout (extension code's printf) writes each line as it ends, as it
    did on the console, rather than when its buffer fills: an invocation's
    lines are in its own logs, without a flush after every invocation (a call
    through ctypes costs the guest about 0.2 ms under TCG)."""
    try:
        setvbuf = _libc.setvbuf
        setvbuf.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t)
        setvbuf(ctypes.c_void_p.in_dll(_libc, "stdout"), None, 1, 0)  # _IOLBF
    except (AttributeError, ValueError, OSError) as e:
        log(f"C stdout stays as it was: {e}")
    # Python's too, whatever it was at start (line buffered on a terminal
    # only): print() and a later write to stderr stay in the order written.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError, OSError):
            pass


def _flush_std():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a handler may have closed or replaced them
            pass


def read_output(fd, start, size, limit):
    """The size bytes of output at start in file fd: all of them if they are
    at most limit bytes, else their first three quarters and last quarter of
    limit, cut at line ends near there, with a line saying how many bytes were
    cut."""
    if size <= limit:
        return {"output": os.pread(fd, size, start).decode("utf-8", "backslashreplace"), "bytes": size}
    tail_n = limit // 4
    head = os.pread(fd, limit - tail_n, start)
    tail = os.pread(fd, tail_n, start + size - tail_n)
    nl = head.rfind(b"\n", max(0, len(head) - 4096))
    if nl >= 0:
        head = head[:nl + 1]
    nl = tail.find(b"\n", 0, 4096)
    if nl >= 0:
        tail = tail[nl + 1:]
    cut = size - len(head) - len(tail)
    mark = f"[thaw: {cut} bytes of output cut here]\n"
    if head and not head.endswith(b"\n"):
        mark = "\n" + mark
    return {"output": head.decode("utf-8", "backslashreplace") + mark + tail.decode("utf-8", "backslashreplace"),
            "bytes": size, "cut": cut}


# --- Requests ------------------------------------------------------------------------

class Agent:
    def __init__(self, function, channel, capture=None):
        self.function = function
        self.channel = channel
        self.capture = capture or OutputCapture()

    def serve(self):
        for line in self.channel.lines():
            if line is not None and line[:8] == RESTORE_PREFIX:
                answer, line = self.renew_line(line)
                self.channel.send_line(answer)
                if line is None:
                    continue  # else the request that came with the renewal, as the next line
            if line is not None and not line.strip():
                continue  # blank lines are harmless keep-alives
            reply = self.dispatch(line)
            if isinstance(reply, ResultReply):
                self.channel.send_chunks(reply.chunks())
            else:
                self.channel.send(reply)
            del reply  # a large result's text goes now, not at the next request
            reap_zombies()
            _openssl.refresh()  # a no-op unless the request imported modules

    def restore_line(self, line):
        """The plain-line restore request's answer (renew_line)."""
        return self.renew_line(line)[0]

    def renew_line(self, line):
        """The plain-line restore request, "restore <id> <time_ns> <hex> [<hex> [nohook |
        invoke <request>]]", answered with a preformatted JSON line. Returns the answer
        and the invoke request that came with it (None if none, or if the renewal
        failed)."""
        t0 = time.monotonic()
        parts = line.split(b" ", 6)
        if len(parts) not in (4, 5, 6, 7) or not parts[1].isdigit() or len(parts[1]) > 20:
            return json.dumps(self._bad_request(None, "restore: want 'restore <id> <time_ns> <hex entropy> "
                                                      "[<hex secrets> [nohook | invoke <request>]]'")), None
        rid = parts[1].decode()
        mode = parts[5] if len(parts) > 5 else b""
        if (mode, len(parts)) not in ((b"", 4), (b"", 5), (b"nohook", 6), (b"invoke", 7)):
            return json.dumps(self._bad_request(rid, "restore: after the secrets, want 'nohook' or 'invoke <request>'")), None
        try:
            time_ns = int(parts[2])
            entropy = check_entropy(bytes.fromhex(parts[3].decode("ascii")))
        except (ValueError, UnicodeDecodeError) as e:
            return json.dumps(self._bad_request(rid, f"restore: time_ns must be an integer, entropy hex: {e}")), None
        try:
            secrets = decode_secrets(parts[4]) if len(parts) > 4 and parts[4] != b"-" else ()
        except ValueError as e:
            return json.dumps(self._bad_request(rid, f"restore: {e}")), None
        r = self.renew(rid, time_ns, entropy, t0, secrets, hook=mode != b"nohook")
        if not r["ok"]:
            return json.dumps(r), None
        st = r["steps"]
        hook = r["hook"]
        return RESTORE_REPLY % (
            rid, r["clock_step_ms"], '["' + '","'.join(r["reseeded"]) + '"]',
            hook_json(hook), r["secrets"], r["duration_ms"],
            st["read"], st["decode"], st["clock"], st["kernel_rng"], st["random"], st["numpy"],
            st["openssl"], st["secrets"], st["hook"], st["total"]), (parts[6] if mode == b"invoke" else None)

    def dispatch(self, line):
        if line is None:
            return self._bad_request(None, f"request line longer than {MAX_LINE} bytes")
        try:
            req = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            return self._bad_request(None, f"malformed JSON: {e}")
        if not isinstance(req, dict):
            return self._bad_request(None, "request must be a JSON object")
        rid = req.get("id")
        if isinstance(rid, (dict, list)):
            return self._bad_request(None, "id must be a string")
        op = req.get("op")
        if op == "ping":
            pong = {"id": rid, "ok": True, "op": "pong", "agent": AGENT,
                    "function": self.function.name, "uptime_ms": uptime_ms(), "env": self.function.env}
            if self.function.error is not None:
                pong["function_error"] = self.function.error
            return pong
        if op == "invoke":
            return self.invoke(rid, req)
        if op == "restore":
            return self.restore(rid, req)
        if op == "clock":
            try:
                return {"id": rid, "ok": True, "clock_step_ms": set_clock(req.get("time_ns"))}
            except (OSError, ValueError) as e:
                return self._bad_request(rid, f"clock: {e}")
        return self._bad_request(rid, f"unknown op {op!r}")

    def invoke(self, rid, req):
        fn = self.function
        wanted = req.get("function")
        handle, warm_up = fn.handle, wanted == WARM_UP
        if warm_up:
            handle = warm_up_handle
        elif wanted is not None and wanted != fn.name:
            return {"id": rid, "ok": False, "duration_ms": 0.0, "logs": NO_LOGS, "error": _error(
                "FunctionNotFound", f"this VM serves {fn.name!r}, not {wanted!r}")}
        elif fn.error is not None:
            return {"id": rid, "ok": False, "duration_ms": 0.0, "logs": NO_LOGS, "error": fn.error}
        t0 = time.perf_counter()
        try:
            result, raised = handle(req.get("event")), None
        except BaseException as e:  # incl. SystemExit: the agent must outlive its handler
            result, raised = None, e
        duration = (time.perf_counter() - t0) * 1000.0
        logs = self.capture.stop(_positive(req.get("max_logs"), MAX_LOGS), keep=warm_up)
        if raised is not None:
            return {"id": rid, "ok": False, "error": _exc_error(raised), "duration_ms": duration, "logs": logs}
        try:
            # Serialized once, here, so that the host gets a proper error. allow_nan=False:
            # NaN/Infinity are not JSON and Go's decoder rejects them. ASCII (ensure_ascii):
            # its length in characters is its length in bytes.
            text = json.dumps(result, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError, MemoryError) as e:
            return {"id": rid, "ok": False, "duration_ms": duration, "logs": logs, "error": _error(
                "TypeError", f"result of handle() is not JSON serializable: {e}",
                "".join(traceback.format_exception(type(e), e, e.__traceback__)))}
        del result
        limit = _positive(req.get("max_result"), MAX_RESULT)
        if len(text) > limit:
            return {"id": rid, "ok": False, "duration_ms": duration, "logs": logs, "error": _error(
                "ResultTooLarge", f"the result of handle() is {len(text)} bytes of JSON, "
                f"more than the limit of {limit} bytes")}
        return ResultReply({"id": rid, "ok": True, "duration_ms": duration, "logs": logs}, text)

    def restore(self, rid, req):
        """The JSON restore request (agents before protocol 2 only had this)."""
        t0 = time.monotonic()
        try:
            entropy = decode_entropy(req.get("entropy"))
        except ValueError as e:
            return self._bad_request(rid, f"restore: {e}")
        return self.renew(rid, req.get("time_ns"), entropy, t0)

    def renew(self, rid, time_ns, entropy, t0, secrets=(), hook=True):
        """A clone's first moments: correct the clock, make its random numbers its
        own, set its secrets, and let the function renew what it made before the
        snapshot (unless hook is false: the hook runs at the next renewal).
        steps says where the guest's time went (ms of CLOCK_MONOTONIC): "read"
        from the request's bytes read to t0 (the request parsed from there on),
        "decode" to here, then each step."""
        mono = time.monotonic
        t1 = mono()
        read_at = getattr(self.channel, "read_at", 0.0)
        steps = {"read": (t0 - read_at) * 1000 if read_at else 0.0, "decode": (t1 - t0) * 1000}
        try:
            step = set_clock(time_ns)
            t2 = mono()
            steps["clock"] = (t2 - t1) * 1000
            reseed_kernel(entropy)
            t1 = mono()
            steps["kernel_rng"] = (t1 - t2) * 1000
        except (OSError, ValueError) as e:
            return self._bad_request(rid, f"restore: {e}")
        reseeded = ["kernel"]
        random.seed()  # from the freshly reseeded kernel RNG
        reseeded.append("random")
        t2 = mono()
        steps["random"] = (t2 - t1) * 1000
        renew_python_generators(reseeded)
        np = sys.modules.get("numpy")
        if np is not None and hasattr(np, "random"):
            np.random.seed()
            reseeded.append("numpy.random")
        t1 = mono()
        steps["numpy"] = (t1 - t2) * 1000
        reseeded += _openssl.reseed(entropy)
        t2 = mono()
        steps["openssl"] = (t2 - t1) * 1000
        t1 = t2
        environb = os.environb
        for name, value in secrets:
            environb[name] = value
        t2 = mono()
        steps["secrets"] = (t2 - t1) * 1000
        self.capture.skip_kernel_messages()  # the restore's are no invocation's
        hook = self.on_restore() if hook else HOOK_NONE
        t1 = mono()
        steps["hook"] = (t1 - t2) * 1000
        steps["total"] = (t1 - t0) * 1000
        return {"id": rid, "ok": True, "clock_step_ms": step, "reseeded": reseeded, "hook": hook,
                "secrets": len(secrets), "duration_ms": (t1 - t0) * 1000, "steps": steps}

    def on_restore(self):
        """Runs the function's optional on_restore() hook (Lambda SnapStart's
        after-restore hook). If it raises, the VM stays up and every invocation
        reports the error, as a failed import does."""
        fn = self.function
        hook = fn.on_restore
        if fn.error is not None or hook is None:
            return HOOK_NONE
        t0 = time.perf_counter()
        try:
            hook()
        except BaseException as e:  # SystemExit included: PID 1 must outlive it
            err = _exc_error(e)
            err["message"] = f"on_restore() failed: {err['message']}"
            fn.error = err
            log(f"function {fn.name}: on_restore failed: {err['type']}: {err['message']}")
            return {"ran": True, "ms": (time.perf_counter() - t0) * 1000, "error": err}
        return {"ran": True, "ms": (time.perf_counter() - t0) * 1000}

    @staticmethod
    def _bad_request(rid, message):
        return {"id": rid, "ok": False, "duration_ms": 0.0, "error": _error("BadRequest", message)}


class ResultReply:
    """A successful invocation's reply, its result already JSON text: written as the
    rest of the reply with the result last, a piece at a time, so a large result is
    serialized once and never copied whole again."""

    def __init__(self, head, text):
        self.head = head
        self.text = text

    def chunks(self):
        yield (json.dumps(self.head, separators=(",", ":"))[:-1] + ',"result":').encode()
        text = self.text
        for i in range(0, len(text), SEND_CHUNK):
            yield text[i:i + SEND_CHUNK].encode()
        yield b"}\n"

    def decoded(self):
        """The reply as the host reads it (tests)."""
        return json.loads(b"".join(self.chunks()))


def warm_up_handle(event):
    """The warm-up invocation's handler (WARM_UP): returns its event."""
    return event


HOOK_NONE = {"ran": False}
HOOK_NOT_RUN = '{"ran":false}'
HOOK_RAN = '{"ran":true,"ms":%.3f}'
# The plain-line restore's answer, the same JSON the JSON request gets (the
# names in "reseeded" are plain ASCII, so they need no escaping).
RESTORE_REPLY = ('{"id":"%s","ok":true,"clock_step_ms":%.3f,"reseeded":%s,"hook":%s,"secrets":%d,"duration_ms":%.3f,'
                 '"steps":{"read":%.3f,"decode":%.3f,"clock":%.3f,"kernel_rng":%.3f,"random":%.3f,'
                 '"numpy":%.3f,"openssl":%.3f,"secrets":%.3f,"hook":%.3f,"total":%.3f}}')


def hook_json(hook):
    """The hook's result as JSON, preformatted unless the hook failed."""
    if hook is HOOK_NONE:
        return HOOK_NOT_RUN
    if "error" not in hook:
        return HOOK_RAN % hook["ms"]
    return json.dumps(hook)


def set_clock(time_ns):
    """Sets CLOCK_REALTIME to the host's time; returns the step in ms (positive:
    the guest was behind). A restored guest's clock stands where the snapshot
    left it."""
    if not isinstance(time_ns, int) or isinstance(time_ns, bool) or time_ns <= 0:
        raise ValueError("time_ns must be a positive integer")
    before = time.clock_gettime_ns(time.CLOCK_REALTIME)
    time.clock_settime_ns(time.CLOCK_REALTIME, time_ns)
    return (time_ns - before) / 1e6


def decode_entropy(entropy_b64):
    if not isinstance(entropy_b64, str):
        raise ValueError("entropy must be base64 text")
    try:
        data = base64.b64decode(entropy_b64, validate=True)
    except ValueError as e:
        raise ValueError(f"entropy is not base64: {e}") from None
    return check_entropy(data)


def check_entropy(data):
    if not 32 <= len(data) <= MAX_ENTROPY:
        raise ValueError(f"entropy must be 32 to {MAX_ENTROPY} bytes, got {len(data)}")
    return data


_urandom_fd = None


def urandom_fd():
    """/dev/urandom for writing, opened once: main() opens it before the
    snapshot, so a clone's restore does not run open(2) and close(2) first."""
    global _urandom_fd
    if _urandom_fd is None:
        _urandom_fd = os.open("/dev/urandom", os.O_WRONLY | os.O_CLOEXEC)
    return _urandom_fd


def reseed_kernel(data):
    """Mixes the host's entropy into the kernel's pool, credited, and forces the
    CRNG to reseed now: on a ready CRNG, crediting alone waits for the next
    scheduled reseed, and until then every clone would draw the same bytes."""
    fd = urandom_fd()
    fcntl.ioctl(fd, RNDADDENTROPY, struct.pack("ii", len(data) * 8, len(data)) + data)
    fcntl.ioctl(fd, RNDRESEEDCRNG)


def renew_python_generators(reseeded):
    """Python-level generators that keep state a clone would share, besides
    the global random (reseeded by the caller): tempfile's name sequence
    (its own random.Random, renewed only when the pid changes, and every
    clone is pid 1) and multiprocessing's authentication key (os.urandom at
    import). Only those already imported; importing them here would cost
    every clone."""
    tf = sys.modules.get("tempfile")
    if tf is not None and getattr(tf, "_name_sequence", None) is not None:
        tf._name_sequence = None  # made anew, from os.urandom, at its next use
        reseeded.append("tempfile")
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        try:
            mp.current_process().authkey = os.urandom(32)
            reseeded.append("multiprocessing.authkey")
        except (AttributeError, ValueError, TypeError):
            pass


class OpenSSLGenerators:
    """OpenSSL's DRBGs live in process memory and reseed on fork detection
    (a pid change); the agent is pid 1 in every clone, so without help every
    clone of a snapshot draws the same ssl.RAND_bytes, TLS randoms and key
    nonces. After the kernel's RNG is reseeded, RAND_add on the primary DRBG
    reseeds it from the kernel (the host's entropy as additional input), and
    every public and private DRBG reseeds from it at its next use.

    Reached: every libcrypto mapped into this process that exports RAND_add
    (Debian's, which ssl and hashlib load, and copies bundled in wheels).
    Not reached: OpenSSL linked statically into an extension module, whose
    symbols are hidden (docs/security.md says so).

    The libraries are found before the snapshot (after the handler's import,
    and after an invocation that imported modules), so a clone's restore
    only makes the calls."""

    def __init__(self):
        self.rand_add = []  # (name, RAND_add)
        self.seen_modules = -1

    def refresh(self):
        """Looks for libcrypto mappings again if modules were imported since."""
        n = len(sys.modules)
        if n == self.seen_modules:
            return
        self.seen_modules = n
        paths = []
        try:
            with open("/proc/self/maps") as f:
                for line in f:
                    i = line.find("/")
                    if i < 0 or "libcrypto" not in line:
                        continue
                    path = line[i:].rstrip("\n")
                    if "libcrypto" in os.path.basename(path) and path not in paths:
                        paths.append(path)
        except OSError as e:
            log(f"cannot read /proc/self/maps: {e}")
            return
        found = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
                fn = lib.RAND_add
            except (OSError, AttributeError):
                continue  # gone, or no such export
            fn.argtypes = (ctypes.c_char_p, ctypes.c_int, ctypes.c_double)
            fn.restype = None
            found.append(("openssl:" + os.path.basename(path), fn))
        if [name for name, _ in found] != [name for name, _ in self.rand_add]:
            log("OpenSSL generators renewed at restore: " + (", ".join(name for name, _ in found) or "none"))
        self.rand_add = found

    def reseed(self, entropy):
        """Reseeds every OpenSSL found; returns their names."""
        names = []
        for name, rand_add in self.rand_add:
            rand_add(entropy, len(entropy), float(len(entropy)))
            names.append(name)
        return names


_openssl = OpenSSLGenerators()


def set_page_reporting_order(params):
    """Free page reporting (virtio-balloon) tells the host which guest pages
    are free, so the host can drop them; thaw uses it to turn pages the guest
    freed into zero pages in the memory file (FaaSnap §4.5 patched the guest
    kernel for that). By default only free 2 MiB blocks are reported. Linux
    6.1's balloon driver overwrites the page_reporting_order boot parameter
    when it registers, so the agent sets it afterwards from
    thaw.page_reporting_order."""
    order = params.get("thaw.page_reporting_order")
    if order is None:
        return
    path = "/sys/module/page_reporting/parameters/page_reporting_order"
    try:
        with open(path, "w") as f:
            f.write(order)
        log(f"page reporting order set to {order}")
    except OSError as e:
        log(f"cannot set page reporting order: {e}")


def main():
    log(f"{AGENT} starting (pid {os.getpid()}, uptime {uptime_ms():.0f} ms)")
    params = kernel_params()
    ensure_scratch_mounts()
    setup_network(params)
    set_page_reporting_order(params)

    function = Function(params.get("thaw.function"))
    deps = None
    if params.get("thaw.deps"):
        deps = (params.get("thaw.depsdev", DEFAULT_DEPS_DEV), params["thaw.deps"])
    function.load(params.get("thaw.fndev", DEFAULT_FN_DEV), deps)
    _openssl.refresh()

    try:
        urandom_fd()
    except OSError as e:  # reseed_kernel opens it then, and reports the error
        log(f"cannot open /dev/urandom: {e}")
    port = find_port(PORT_NAME)
    if port is None:
        power_off(f"virtio-serial port {PORT_NAME} not found")
    channel = Channel(port)
    log(f"serving on {port} ({PORT_NAME}), ready at {uptime_ms():.0f} ms")
    # Best effort: a host that is not connected yet will ping instead.
    ready = {"event": "ready", "agent": AGENT, "function": function.name, "uptime_ms": uptime_ms(),
             "env": function.env}
    if function.error is not None:
        ready["function_error"] = function.error
    channel.send(ready, wait=False)
    global _capture
    _capture = OutputCapture("/dev/kmsg")
    _capture.attach()  # from here on, what the function writes is in its invocations' logs
    Agent(function, channel, _capture).serve()


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:
        log("".join(traceback.format_exception(type(e), e, e.__traceback__)))
        power_off(f"agent crashed: {type(e).__name__}: {e}")
