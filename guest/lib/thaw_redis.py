"""thaw_redis: a tiny Redis client for thaw functions (standard library only).

Functions fetch their input from a Redis server on the host, as in FaaSnap's
evaluation. Under QEMU user-mode networking the guest reaches the host at
10.0.2.2, so a Redis server listening on the host's 127.0.0.1:PORT is
10.0.2.2:PORT from inside the guest.

It speaks RESP2 over one TCP connection and implements only what functions
need: GET, SET, PING and a raw command(). Connect inside handle(), never at
import time: the import runs before the snapshot, and a socket opened then is
dead in every VM restored from it. fetch_input and result are the input and
result of the Table-2 functions, the same in every handler.

    import thaw_redis
    data = thaw_redis.fetch({"redis": {"port": 6379}, "key": "input:json"})
    source, data, input_ms = thaw_redis.fetch_input(event, make_input, DEFAULTS)
    return thaw_redis.result(source, data, input_ms, t1, t2, out_bytes=...)

    with thaw_redis.connect("10.0.2.2", 6379, timeout=5) as r:
        r.set("k", b"v")
        r.get("k")        # b"v"; None if the key does not exist

Errors: every exception is a RedisError. ConnectError (cannot connect, or the
connection broke), ProtocolError (the server sent something that is not
RESP2), ReplyError (the server answered "-ERR ..."), MissingKey (also a
KeyError: fetch() of a key that does not exist).
"""

import socket
import time
import zlib

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "RedisError", "ConnectError", "ProtocolError",
           "ReplyError", "MissingKey", "Client", "connect", "fetch", "fetch_input", "result", "wants_fetch"]

DEFAULT_HOST = "10.0.2.2"  # the host, seen from a guest on QEMU user networking
DEFAULT_PORT = 6379
DEFAULT_TIMEOUT = 30.0     # seconds, per socket operation (TCG guests are slow)
_READ_CHUNK = 1 << 20


class RedisError(Exception):
    """Base class of every error raised by this module."""


class ConnectError(RedisError):
    """The server cannot be reached, or the connection failed or closed."""


class ProtocolError(RedisError):
    """The server's answer is not valid RESP2."""


class ReplyError(RedisError):
    """The server answered with an error reply (e.g. "WRONGTYPE ...")."""


class MissingKey(RedisError, KeyError):
    """fetch() of a key that does not exist."""

    def __str__(self):  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "missing key"


def _encode(arg):
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, (bytearray, memoryview)):
        return bytes(arg)
    if isinstance(arg, str):
        return arg.encode("utf-8")
    if isinstance(arg, int) and not isinstance(arg, bool):
        return str(arg).encode()
    raise TypeError(f"redis arguments must be bytes, str or int, not {type(arg).__name__}")


class Client:
    """One connection to a Redis server. Not thread-safe."""

    def __init__(self, host=DEFAULT_HOST, port=DEFAULT_PORT, timeout=DEFAULT_TIMEOUT):
        self.host, self.port, self.timeout = host, int(port), timeout
        try:
            self._sock = socket.create_connection((host, self.port), timeout=timeout)
        except OSError as e:
            raise ConnectError(f"cannot connect to redis at {host}:{self.port}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self._pos = 0

    # -- commands --

    def get(self, key):
        """Value of key as bytes, or None if the key does not exist."""
        reply = self.command("GET", key)
        if reply is not None and not isinstance(reply, bytes):
            raise ProtocolError(f"GET {key!r}: expected a bulk string, got {type(reply).__name__}")
        return reply

    def set(self, key, value, ex=None):
        """Sets key to value (bytes or str); ex: expiry in seconds. Returns True."""
        args = ["SET", key, value] + (["EX", int(ex)] if ex is not None else [])
        reply = self.command(*args)
        if reply != "OK":
            raise ProtocolError(f"SET {key!r}: unexpected reply {reply!r}")
        return True

    def ping(self):
        return self.command("PING") == "PONG"

    def command(self, *args):
        """Sends one command and returns its reply: str (simple string), int,
        bytes or None (bulk string), list (array). An error reply raises ReplyError."""
        if not args:
            raise ValueError("empty command")
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            a = _encode(a)
            parts.append(b"$%d\r\n" % len(a))
            parts.append(a)
            parts.append(b"\r\n")
        try:
            self._sock.sendall(b"".join(parts))
        except OSError as e:
            raise ConnectError(f"redis {self.host}:{self.port}: send failed: {e}") from e
        return self._reply()

    def close(self):
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- RESP2 parsing --

    def _fill(self, need):
        """Ensures at least `need` unread bytes are buffered."""
        while len(self._buf) - self._pos < need:
            try:
                data = self._sock.recv(max(_READ_CHUNK, need - (len(self._buf) - self._pos)))
            except socket.timeout as e:
                raise ConnectError(f"redis {self.host}:{self.port}: no answer within {self.timeout} s") from e
            except OSError as e:
                raise ConnectError(f"redis {self.host}:{self.port}: receive failed: {e}") from e
            if not data:
                raise ConnectError(f"redis {self.host}:{self.port}: connection closed by the server")
            if self._pos:
                del self._buf[:self._pos]
                self._pos = 0
            self._buf += data

    def _line(self):
        while True:
            end = self._buf.find(b"\r\n", self._pos)
            if end >= 0:
                line = bytes(self._buf[self._pos:end])
                self._pos = end + 2
                return line
            self._fill(len(self._buf) - self._pos + 1)

    def _exact(self, n):
        self._fill(n)
        with memoryview(self._buf) as view:  # one copy, not two
            data = bytes(view[self._pos:self._pos + n])
        self._pos += n
        return data

    def _int(self, text, what):
        try:
            return int(text)
        except ValueError:
            raise ProtocolError(f"bad {what} {text[:40]!r}") from None

    def _reply(self):
        line = self._line()
        if not line:
            raise ProtocolError("empty reply line")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode("utf-8", "replace")
        if kind == b"-":
            raise ReplyError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return self._int(rest, "integer reply")
        if kind == b"$":
            n = self._int(rest, "bulk length")
            if n == -1:
                return None
            if n < 0:
                raise ProtocolError(f"bad bulk length {n}")
            data = self._exact(n + 2)
            if data[-2:] != b"\r\n":
                raise ProtocolError("bulk string not terminated by CRLF")
            return data[:-2]
        if kind == b"*":
            n = self._int(rest, "array length")
            if n == -1:
                return None
            return [self._reply() for _ in range(n)]
        raise ProtocolError(f"unknown reply type {line[:40]!r}")


def connect(host=DEFAULT_HOST, port=DEFAULT_PORT, timeout=DEFAULT_TIMEOUT):
    """Opens a connection (raises ConnectError if the server cannot be reached)."""
    return Client(host, port, timeout)


def wants_fetch(event):
    """True if the event names a Redis key (functions fall back to an inline
    input otherwise)."""
    return isinstance(event, dict) and bool(event.get("key"))


def fetch(event):
    """The value of event["key"] as bytes, from the server in event["redis"].

    event: {"key": "input:json", "redis": {"host": "10.0.2.2", "port": 6379, "timeout": 30}}
    "redis" and each of its fields are optional (defaults: 10.0.2.2, 6379, 30 s).
    Raises ValueError for a malformed event, MissingKey if the key does not
    exist, ConnectError/ReplyError/ProtocolError for server problems."""
    if not isinstance(event, dict) or not isinstance(event.get("key"), str) or not event["key"]:
        raise ValueError('event must have a non-empty string "key" to fetch from redis')
    conf = event.get("redis") or {}
    if not isinstance(conf, dict):
        raise ValueError('event "redis" must be an object {"host": ..., "port": ...}')
    host = conf.get("host") or DEFAULT_HOST
    port = conf.get("port") or DEFAULT_PORT
    timeout = conf.get("timeout") or DEFAULT_TIMEOUT
    key = event["key"]
    with connect(host, port, timeout) as r:
        value = r.get(key)
    if value is None:
        raise MissingKey(f"redis key {key!r} does not exist on {host}:{port}")
    return value


def fetch_input(event, make_input, defaults):
    """A function's input: (source, data, input_ms).

    If the event names a key (wants_fetch), data is its value from Redis
    (fetch) and source is "redis"; otherwise data is
    make_input(**{name: int(event.get(name, default)) for name, default in
    defaults.items()}) and source is "inline". input_ms is the time this
    took in milliseconds, rounded to 3 decimals."""
    t0 = time.perf_counter()
    if wants_fetch(event):
        source, data = "redis", fetch(event)
    else:
        source = "inline"
        data = make_input(**{name: int(event.get(name, default)) for name, default in defaults.items()})
    return source, data, round((time.perf_counter() - t0) * 1000, 3)


def result(source, data, input_ms, t1, t2, **fields):
    """A function's result: {"input": source, "input_bytes", "input_crc32"
    (of data), **fields, "input_ms", "compute_ms"}, compute_ms being t2 - t1
    (time.perf_counter() seconds) in milliseconds, rounded to 3 decimals."""
    return {"input": source, "input_bytes": len(data), "input_crc32": zlib.crc32(data), **fields,
            "input_ms": input_ms, "compute_ms": round((t2 - t1) * 1000, 3)}
