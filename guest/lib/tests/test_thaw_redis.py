"""Tests of guest/lib/thaw_redis.py: against a scripted fake server (always) and
a real redis-server on the loopback (skipped if redis-server is not installed).

Run: python3 -m unittest discover -s guest/lib/tests -v
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import thaw_redis  # noqa: E402


class FakeServer:
    """Accepts one connection, reads one command, answers with `reply` bytes
    (sent in `chunks` pieces), then closes. Records the raw command."""

    def __init__(self, reply, chunks=1):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.reply, self.chunks, self.received = reply, chunks, b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(5)
            try:
                self.received = conn.recv(1 << 20)
            except OSError:
                return
            step = max(1, len(self.reply) // self.chunks)
            for i in range(0, len(self.reply), step):
                conn.sendall(self.reply[i:i + step])
                time.sleep(0.01)
        self.sock.close()

    def client(self):
        return thaw_redis.connect("127.0.0.1", self.port, timeout=5)


class FakeServerTest(unittest.TestCase):
    def test_get_bulk_string_split_across_reads(self):
        value = bytes(range(256)) * 1000 + b"\r\n inside"
        srv = FakeServer(b"$%d\r\n%s\r\n" % (len(value), value), chunks=7)
        with srv.client() as r:
            self.assertEqual(r.get("k"), value)
        self.assertEqual(srv.received, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")

    def test_get_missing_is_none(self):
        with FakeServer(b"$-1\r\n").client() as r:
            self.assertIsNone(r.get("nope"))

    def test_set_encodes_binary_and_ex(self):
        srv = FakeServer(b"+OK\r\n")
        with srv.client() as r:
            self.assertTrue(r.set("k", b"a\r\nb", ex=5))
        self.assertEqual(srv.received, b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n$2\r\nEX\r\n$1\r\n5\r\n")

    def test_error_reply(self):
        with FakeServer(b"-WRONGTYPE Operation against a key\r\n").client() as r:
            with self.assertRaises(thaw_redis.ReplyError) as cm:
                r.get("k")
        self.assertIn("WRONGTYPE", str(cm.exception))

    def test_integer_and_array_replies(self):
        with FakeServer(b"*3\r\n:42\r\n$2\r\nhi\r\n$-1\r\n").client() as r:
            self.assertEqual(r.command("X"), [42, b"hi", None])

    def test_bad_replies(self):
        for reply, error in ((b"HTTP/1.1 400 Bad Request\r\n", thaw_redis.ProtocolError),  # garbage
                             (b"$2\r\nabXY", thaw_redis.ProtocolError),  # bulk without CRLF
                             (b"$100\r\nshort", thaw_redis.ConnectError),  # closed mid-reply
                             (b":1\r\n", thaw_redis.ProtocolError)):  # GET answered with no bulk
            with self.subTest(reply=reply), FakeServer(reply).client() as r:
                with self.assertRaises(error):
                    r.get("k")

    def test_connection_refused(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nobody listens there
        with self.assertRaises(thaw_redis.ConnectError) as cm:
            thaw_redis.connect("127.0.0.1", port, timeout=2)
        self.assertIn(f"127.0.0.1:{port}", str(cm.exception))

    def test_fetch(self):
        srv = FakeServer(b"$3\r\nabc\r\n")
        self.assertEqual(thaw_redis.fetch({"key": "in", "redis": {"host": "127.0.0.1", "port": srv.port}}), b"abc")

    def test_fetch_missing_key_is_key_error(self):
        srv = FakeServer(b"$-1\r\n")
        with self.assertRaises(KeyError) as cm:
            thaw_redis.fetch({"key": "in", "redis": {"host": "127.0.0.1", "port": srv.port}})
        self.assertIsInstance(cm.exception, thaw_redis.MissingKey)
        self.assertIn("'in' does not exist", str(cm.exception))

    def test_fetch_bad_events(self):
        for event in (None, [], {}, {"key": ""}, {"key": 3}, {"key": "k", "redis": "10.0.2.2"}):
            with self.assertRaises(ValueError, msg=repr(event)):
                thaw_redis.fetch(event)
        self.assertFalse(thaw_redis.wants_fetch({"n": 1}))
        self.assertTrue(thaw_redis.wants_fetch({"key": "k"}))

    def test_fetch_input_from_redis(self):
        srv = FakeServer(b"$3\r\nabc\r\n")
        event = {"key": "in", "redis": {"host": "127.0.0.1", "port": srv.port}}
        source, data, ms = thaw_redis.fetch_input(event, self.fail, {"n": 1})
        self.assertEqual((source, data), ("redis", b"abc"))
        self.assertGreaterEqual(ms, 0)
        self.assertEqual(srv.received, b"*2\r\n$3\r\nGET\r\n$2\r\nin\r\n")

    def test_fetch_input_inline(self):
        def make_input(size, seed):
            return b"x" * size + bytes([seed])
        defaults = {"size": 3, "seed": 1}
        for event, want in (({}, b"xxx\x01"), ({"size": "2", "other": 9}, b"xx\x01"),
                            ({"seed": 7, "key": ""}, b"xxx\x07")):
            with self.subTest(event=event):
                source, data, ms = thaw_redis.fetch_input(event, make_input, defaults)
                self.assertEqual((source, data), ("inline", want))
                self.assertIsInstance(ms, float)
        with self.assertRaises(ValueError):
            thaw_redis.fetch_input({"size": "big"}, make_input, defaults)

    def test_result(self):
        r = thaw_redis.result("inline", b"abc", 1.5, 10.0, 10.25, out_bytes=2, ok=True)
        self.assertEqual(list(r.items()), [("input", "inline"), ("input_bytes", 3), ("input_crc32", 891568578),
                                           ("out_bytes", 2), ("ok", True), ("input_ms", 1.5), ("compute_ms", 250.0)])

    def test_bad_argument_type(self):
        with FakeServer(b"+OK\r\n").client() as r:
            with self.assertRaises(TypeError):
                r.set("k", 1.5)


@unittest.skipUnless(shutil.which("redis-server"), "redis-server not installed")
class RealRedisTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="thaw-redis-test.")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            cls.port = s.getsockname()[1]
        cls.proc = subprocess.Popen(
            ["redis-server", "--port", str(cls.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", cls.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with thaw_redis.connect("127.0.0.1", cls.port, timeout=1) as r:
                    if r.ping():
                        break
            except thaw_redis.ConnectError:
                if time.monotonic() > deadline or cls.proc.poll() is not None:
                    cls.tearDownClass()
                    raise
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_set_get_large_binary(self):
        value = os.urandom(3 << 20) + b"\r\n$-1\r\n"
        with thaw_redis.connect("127.0.0.1", self.port) as r:
            self.assertTrue(r.set("big", value))
            self.assertEqual(r.get("big"), value)
            self.assertIsNone(r.get("absent"))
            with self.assertRaises(thaw_redis.ReplyError):
                r.command("NOSUCHCOMMAND")
            self.assertTrue(r.ping())  # the connection is still usable after an error reply
        self.assertEqual(thaw_redis.fetch({"key": "big", "redis": {"host": "127.0.0.1", "port": self.port}}), value)
        with self.assertRaises(thaw_redis.MissingKey):
            thaw_redis.fetch({"key": "absent", "redis": {"host": "127.0.0.1", "port": self.port}})


if __name__ == "__main__":
    unittest.main()
