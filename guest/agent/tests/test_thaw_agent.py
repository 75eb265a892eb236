"""Unit tests of the guest agent's request handling, run on the host (make test).
They never set the host's clock or touch its RNG: only the paths that refuse
bad input, and the on_restore hook's bookkeeping, run here; the real effects
are tested on real VMs (e2e/clones_test.go)."""
import json
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import thaw_agent  # noqa: E402


def agent_with(module):
    fn = thaw_agent.Function("probe")
    fn.attach(module, getattr(module, "handle", None))
    return thaw_agent.Agent(fn, channel=None)


class RestoreOpTest(unittest.TestCase):
    def dispatch(self, agent, req):
        return agent.dispatch(json.dumps(req).encode())

    def test_bad_time_and_entropy_are_refused(self):
        a = agent_with(types.SimpleNamespace(handle=lambda e: e))
        for req in (
            {"id": "1", "op": "restore", "time_ns": -5, "entropy": "AAAA"},
            {"id": "1", "op": "restore", "time_ns": "now", "entropy": "AAAA"},
            {"id": "1", "op": "restore", "time_ns": True, "entropy": "AAAA"},
            # A valid time with bad entropy: refused before the clock is touched.
            {"id": "1", "op": "restore", "time_ns": 1, "entropy": "AAAA"},
            {"id": "1", "op": "clock", "time_ns": 0},
            {"id": "1", "op": "clock"},
        ):
            r = self.dispatch(a, req)
            self.assertFalse(r["ok"], req)
            self.assertEqual(r["error"]["type"], "BadRequest")

    def test_entropy_is_validated_before_use(self):
        for bad in (None, 7, "not base64!", "AAAA", "A" * 2000):
            with self.assertRaises(ValueError):
                thaw_agent.decode_entropy(bad)

    def test_entropy_decoding_is_strict_base64(self):
        import base64
        raw = bytes(range(64))
        good = base64.b64encode(raw).decode()
        self.assertEqual(thaw_agent.decode_entropy(good), raw)
        # Whatever base64.b64decode(validate=True) refused is refused still:
        # characters outside the alphabet, whitespace, missing or stray
        # padding, non-ASCII text.
        for bad in (good[:-2] + "!!", good[:10] + " " + good[10:], good[:-1], good + "=",
                    good[:20] + "=" + good[21:], good[:-1] + "\u00e9"):
            with self.assertRaises(ValueError, msg=bad):
                thaw_agent.decode_entropy(bad)

    def test_restore_reports_its_steps(self):
        calls = []
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0, on_restore=lambda: calls.append(1)))
        entropy = __import__("base64").b64encode(os.urandom(64)).decode()
        # The clock and the kernel RNG are the host's own here: stand them in.
        orig = thaw_agent.set_clock, thaw_agent.reseed_kernel
        thaw_agent.set_clock, thaw_agent.reseed_kernel = (lambda t: 0.0), (lambda d: calls.append(d))
        try:
            r = a.restore("5", {"time_ns": 1, "entropy": entropy})
        finally:
            thaw_agent.set_clock, thaw_agent.reseed_kernel = orig
        self.assertTrue(r["ok"], r)
        self.assertEqual(calls[0], __import__("base64").b64decode(entropy))
        self.assertEqual(calls[1], 1)  # the hook ran after the reseed
        self.assertEqual(set(r["steps"]), {"read", "decode", "clock", "kernel_rng", "random", "numpy", "openssl", "secrets",
                                             "hook", "total"})
        self.assertEqual(r["steps"]["total"], r["duration_ms"])

    def stand_in(self, calls):
        """The clock and the kernel RNG are the host's own here: stand them in."""
        settime, reseed = thaw_agent.time.clock_settime_ns, thaw_agent.reseed_kernel
        thaw_agent.time.clock_settime_ns = lambda clock, t: calls.append(t)
        thaw_agent.reseed_kernel = calls.append
        self.addCleanup(setattr, thaw_agent.time, "clock_settime_ns", settime)
        self.addCleanup(setattr, thaw_agent, "reseed_kernel", reseed)

    def test_restore_line_answers_as_the_json_request(self):
        calls = []
        self.stand_in(calls)
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0, on_restore=lambda: calls.append("hook")))
        raw = os.urandom(64)
        line = json.loads(a.restore_line(b"restore 17 1795566459000000000 " + raw.hex().encode()))
        self.assertEqual(calls, [1795566459000000000, raw, "hook"])
        full = a.restore("17", {"time_ns": 1795566459000000000, "entropy": __import__("base64").b64encode(raw).decode()})
        self.assertEqual(set(line), set(full))
        self.assertEqual(set(line["steps"]), set(full["steps"]))
        for k in ("id", "ok", "reseeded"):
            self.assertEqual(line[k], full[k], k)
        self.assertTrue(line["hook"]["ran"])
        self.assertGreaterEqual(line["hook"]["ms"], 0)

    def test_restore_line_without_hook_and_with_failing_hook(self):
        self.stand_in([])
        r = json.loads(agent_with(types.SimpleNamespace(handle=lambda e: 0)).restore_line(
            b"restore 3 5 " + bytes(32).hex().encode()))
        self.assertEqual((r["id"], r["ok"], r["hook"]), ("3", True, {"ran": False}))
        self.assertEqual(r["reseeded"][:2], ["kernel", "random"])

        def boom():
            raise RuntimeError("db gone")
        r = json.loads(agent_with(types.SimpleNamespace(handle=lambda e: 0, on_restore=boom)).restore_line(
            b"restore 4 5 " + bytes(32).hex().encode()))
        self.assertTrue(r["ok"])
        self.assertEqual(r["hook"]["error"]["type"], "RuntimeError")

    def test_bad_restore_lines_are_refused_before_the_clock(self):
        calls = []
        self.stand_in(calls)
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0))
        good = bytes(64).hex().encode()
        for line in (b"restore ", b"restore 1 5", b"restore 1 5 " + good + b" x", b"restore x 5 " + good,
                     b"restore 1 now " + good, b"restore 1 5 zz" + good, b"restore 1 5 " + good[:-1],
                     b"restore 1 5 " + bytes(8).hex().encode(), b"restore 1 5 " + bytes(600).hex().encode(),
                     b"restore 1 -5 " + good, b"restore 1 5 \xff\xfe", b"restore " + b"9" * 30 + b" 5 " + good):
            r = json.loads(a.restore_line(line))
            self.assertFalse(r["ok"], line)
            self.assertEqual(r["error"]["type"], "BadRequest", line)
        self.assertEqual(calls, [])  # neither the clock nor the RNG was touched

    def test_restore_line_sets_secrets_before_the_hook(self):
        calls = []
        self.stand_in(calls)
        seen = {}

        def hook():
            seen["A"], seen["B"] = os.environ.get("THAWTEST_A"), os.environ.get("THAWTEST_B")
        self.addCleanup(lambda: [os.environ.pop(k, None) for k in ("THAWTEST_A", "THAWTEST_B")])
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0, on_restore=hook))
        blob = b"\0".join([b"THAWTEST_A=s3cr=t value", "THAWTEST_B=caf\u00e9".encode()]).hex().encode()
        r = json.loads(a.restore_line(b"restore 8 5 " + bytes(32).hex().encode() + b" " + blob))
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["secrets"], 2)
        self.assertIn("secrets", r["steps"])
        self.assertEqual(seen, {"A": "s3cr=t value", "B": "caf\u00e9"})
        # Without the field: none, and the answer says so.
        r = json.loads(a.restore_line(b"restore 9 5 " + bytes(32).hex().encode()))
        self.assertEqual(r["secrets"], 0)

    def test_bad_secrets_are_refused_before_the_clock_and_not_quoted(self):
        calls = []
        self.stand_in(calls)
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0))
        good = bytes(32).hex().encode()
        for blob in (b"zz", b"abc", b"NOEQUALS".hex().encode(), b"1BAD=v".hex().encode(),
                     b"A=1\0B C=2".hex().encode(), b"\0".join([b"A=1"] * 65).hex().encode(),
                     b"A=1\0hunter2 value".hex().encode()):
            r = json.loads(a.restore_line(b"restore 1 5 " + good + b" " + blob))
            self.assertFalse(r["ok"], blob)
            self.assertEqual(r["error"]["type"], "BadRequest", blob)
            self.assertNotIn("hunter2", r["error"]["message"])
        self.assertEqual(calls, [])

    def test_config_sets_the_environment(self):
        # Not tempfile: its name sequence, once drawn, is what a restore renews.
        d = os.path.join(os.environ.get("TMPDIR", "/tmp"), "thaw-agent-test-" + os.urandom(6).hex())
        os.mkdir(d, 0o700)
        self.addCleanup(__import__("shutil").rmtree, d)
        path = os.path.join(d, "config.json")
        self.assertEqual(thaw_agent.apply_config(path), 0)  # none: nothing set
        self.addCleanup(lambda: os.environ.pop("THAWTEST_GREETING", None))
        with open(path, "w") as f:
            json.dump({"version": 1, "env": {"THAWTEST_GREETING": "h\u00e9llo"}}, f)
        self.assertEqual(thaw_agent.apply_config(path), 1)
        self.assertEqual(os.environ["THAWTEST_GREETING"], "h\u00e9llo")
        for bad in ({"version": 2, "env": {}}, {"version": 1, "env": {"1X": "v"}}, {"version": 1, "env": {"X": 5}},
                    {"version": 1, "env": {"X\n": "v"}}, [1]):
            with open(path, "w") as f:
                json.dump(bad, f)
            with self.assertRaises(ValueError, msg=bad):
                thaw_agent.apply_config(path)

    def test_ping_reports_the_environment(self):
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0))
        a.function.env = 3
        r = a.dispatch(b'{"id":"1","op":"ping"}')
        self.assertEqual((r["agent"], r["env"]), ("thaw-agent/6", 3))

    def test_on_restore_failure_is_reported_by_every_invocation(self):
        def boom():
            raise RuntimeError("db gone")
        a = agent_with(types.SimpleNamespace(handle=lambda e: "ok", on_restore=boom))
        hook = a.on_restore()
        self.assertTrue(hook["ran"])
        self.assertEqual(hook["error"]["type"], "RuntimeError")
        r = a.invoke("2", {"event": None})
        self.assertFalse(r["ok"])
        self.assertIn("on_restore() failed: db gone", r["error"]["message"])

    def test_on_restore_runs_and_may_be_absent(self):
        calls = []
        a = agent_with(types.SimpleNamespace(handle=lambda e: len(calls), on_restore=lambda: calls.append(1)))
        self.assertTrue(a.on_restore()["ran"])
        self.assertEqual(a.invoke("3", {"event": None}).decoded()["result"], 1)
        self.assertEqual(agent_with(types.SimpleNamespace(handle=lambda e: 0)).on_restore(), {"ran": False})

    def test_system_exit_in_the_hook_does_not_escape(self):
        def leave():
            raise SystemExit(3)
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0, on_restore=leave))
        self.assertEqual(a.on_restore()["error"]["type"], "SystemExit")


class FakeChannel:
    """Serves the given request lines and keeps what the agent sent, each
    sent line decoded."""

    def __init__(self, *lines):
        self.requests, self.sent = list(lines), []

    def lines(self):
        yield from self.requests

    def send_line(self, text, wait=True):
        self.sent.append(json.loads(text))
        return True

    def send(self, obj, wait=True):
        return self.send_line(json.dumps(obj), wait)

    def send_chunks(self, chunks):
        self.sent.append(json.loads(b"".join(chunks)))
        return True


class ReadyCloneTest(unittest.TestCase):
    """Protocol 6: the fill's renewal without the hook, the dispatch's renewal
    and invocation on one line, the warm-up invocation."""

    def setUp(self):
        self.calls = []
        RestoreOpTest.stand_in(self, self.calls)
        self.module = types.SimpleNamespace(handle=lambda e: self.calls.append(("handle", e)) or {"got": e},
                                            on_restore=lambda: self.calls.append("hook"))
        self.entropy = bytes(range(32)).hex().encode()

    def serve(self, *lines):
        a = agent_with(self.module)
        a.channel = FakeChannel(*lines)
        a.serve()
        return a.channel.sent

    def test_nohook_renews_without_the_hook(self):
        sent = self.serve(b"restore 3 5 " + self.entropy + b" - nohook")
        self.assertEqual(len(sent), 1)
        self.assertEqual((sent[0]["id"], sent[0]["ok"], sent[0]["hook"], sent[0]["secrets"]), ("3", True, {"ran": False}, 0))
        self.assertEqual(self.calls, [5, bytes(range(32))])  # clock and entropy, no hook

    def test_nohook_sets_secrets(self):
        self.addCleanup(os.environ.pop, "THAWTEST_N", None)
        sent = self.serve(b"restore 3 5 " + self.entropy + b" " + b"THAWTEST_N=v".hex().encode() + b" nohook")
        self.assertEqual((sent[0]["ok"], sent[0]["secrets"]), (True, 1))
        self.assertEqual(os.environ.get("THAWTEST_N"), "v")

    def test_invoke_line_renews_runs_the_hook_then_invokes(self):
        req = json.dumps({"id": "4", "op": "invoke", "function": "probe", "event": {"a": "b c"}}).encode()
        sent = self.serve(b"restore 3 7 " + self.entropy + b" - invoke " + req)
        self.assertEqual([r["id"] for r in sent], ["3", "4"])
        self.assertTrue(sent[0]["ok"] and sent[0]["hook"]["ran"], sent[0])
        self.assertEqual(sent[1]["result"], {"got": {"a": "b c"}})
        self.assertIn("logs", sent[1])
        self.assertEqual(self.calls, [7, bytes(range(32)), "hook", ("handle", {"a": "b c"})])

    def test_no_invoke_after_a_failed_renewal(self):
        req = json.dumps({"id": "4", "op": "invoke", "function": "probe", "event": 1}).encode()
        sent = self.serve(b"restore 3 5 " + bytes(8).hex().encode() + b" - invoke " + req)
        self.assertEqual(len(sent), 1)
        self.assertEqual((sent[0]["id"], sent[0]["ok"], sent[0]["error"]["type"]), ("3", False, "BadRequest"))
        self.assertEqual(self.calls, [])

    def test_bad_modes_are_refused_with_the_id(self):
        for line in (b"restore 3 5 " + self.entropy + b" - hook", b"restore 3 5 " + self.entropy + b" - invoke",
                     b"restore 3 5 " + self.entropy + b" - nohook x", b"restore 3 5 " + self.entropy + b" - nohook x y"):
            sent = self.serve(line)
            self.assertEqual(len(sent), 1, line)
            self.assertEqual((sent[0]["id"], sent[0]["ok"], sent[0]["error"]["type"]), ("3", False, "BadRequest"), line)
        self.assertEqual(self.calls, [])

    def test_warm_up_runs_the_invoke_path_without_the_function(self):
        req = {"id": "9", "op": "invoke", "function": thaw_agent.WARM_UP, "event": {"warm": [1, 2]}}
        sent = self.serve(json.dumps(req).encode())
        self.assertEqual(sent, [{"id": "9", "ok": True, "duration_ms": sent[0]["duration_ms"],
                                 "logs": {"output": "", "bytes": 0, "error": "output not captured"},
                                 "result": {"warm": [1, 2]}}])
        self.assertEqual(self.calls, [])  # neither the handler nor the hook ran

    def test_warm_up_runs_even_if_the_function_cannot(self):
        a = agent_with(self.module)
        a.function.error = thaw_agent._error("ImportError", "no module")
        r = a.invoke("1", {"function": thaw_agent.WARM_UP, "event": 1}).decoded()
        self.assertEqual((r["ok"], r["result"]), (True, 1))
        self.assertFalse(a.invoke("2", {"function": "probe", "event": 1})["ok"])


class ResultTest(unittest.TestCase):
    """Results are serialized once, bounded, and sent last, a piece at a time."""

    def invoke(self, result, **req):
        return agent_with(types.SimpleNamespace(handle=lambda e: result)).invoke("7", dict(req, event=None))

    def test_result_comes_last_and_exact(self):
        result = {"b": [1, 2.5, None, True], "a": "caf\u00e9 \U0001F600 <&>", "n": 10 ** 30}
        r = self.invoke(result)
        line = b"".join(r.chunks())
        self.assertTrue(line.endswith(b"}\n") and line.count(b"\n") == 1)
        want = json.dumps(result, separators=(",", ":")).encode()
        self.assertTrue(line.startswith(b'{"id":"7","ok":true,"duration_ms":'), line[:60])
        self.assertTrue(line.endswith(b',"result":' + want + b"}\n"), line[-80:])
        self.assertEqual(r.decoded()["result"], result)

    def test_large_result_in_pieces(self):
        big = ["x" * 1000] * 5000  # 5 MB of JSON: several pieces
        r = self.invoke(big)
        pieces = list(r.chunks())
        self.assertGreater(len(pieces), 5)
        self.assertTrue(all(len(p) <= thaw_agent.SEND_CHUNK for p in pieces))
        self.assertEqual(r.decoded()["result"], big)

    def test_result_over_the_limit(self):
        text_len = len(json.dumps("y" * 100))
        self.assertEqual(self.invoke("y" * 100, max_result=text_len).decoded()["result"], "y" * 100)
        r = self.invoke("y" * 100, max_result=text_len - 1)
        self.assertFalse(r["ok"])
        self.assertEqual(r["error"]["type"], "ResultTooLarge")
        self.assertIn(f"is {text_len} bytes of JSON, more than the limit of {text_len - 1} bytes", r["error"]["message"])
        # No usable limit from the host: the agent's own.
        for bad in (None, True, "5", -1, 0, 1.5):
            orig = thaw_agent.MAX_RESULT
            thaw_agent.MAX_RESULT = 50
            try:
                r = self.invoke("y" * 100, max_result=bad)
            finally:
                thaw_agent.MAX_RESULT = orig
            self.assertEqual(r["error"]["type"], "ResultTooLarge", bad)
            self.assertIn("limit of 50 bytes", r["error"]["message"])

    def test_results_that_are_not_json(self):
        for result in (float("nan"), {1j}, object()):
            r = self.invoke(result)
            self.assertFalse(r["ok"])
            self.assertEqual(r["error"]["type"], "TypeError")
            self.assertIn("not JSON serializable", r["error"]["message"])

    def test_error_texts_are_cut(self):
        def boom(e):
            raise ValueError("m" * (thaw_agent.MAX_ERROR_TEXT + 10))
        r = agent_with(types.SimpleNamespace(handle=boom)).invoke("8", {"event": None})
        msg = r["error"]["message"]
        self.assertEqual(msg, "m" * thaw_agent.MAX_ERROR_TEXT + "... [10 more characters cut]")
        self.assertLessEqual(len(r["error"]["traceback"]), thaw_agent.MAX_ERROR_TEXT + 40)

    def test_channel_writes_every_piece(self):
        import threading
        rd, wr = os.pipe()
        os.set_blocking(wr, False)  # as the port: a full pipe makes the channel wait
        ch = thaw_agent.Channel.__new__(thaw_agent.Channel)
        ch.path, ch.fd = "pipe", wr
        got = []
        reader = threading.Thread(target=lambda: got.append(b"".join(iter(lambda: os.read(rd, 1 << 16), b""))))
        reader.start()
        r = self.invoke(["z" * 999] * 3000)
        self.assertTrue(ch.send_chunks(r.chunks()))
        os.close(wr)
        reader.join()
        os.close(rd)
        self.assertEqual(got[0], b"".join(r.chunks()))
class FunctionErrorTest(unittest.TestCase):
    """A function that cannot be invoked says so in every ping, so the host
    fails the boot with its traceback instead of snapshotting it."""

    def test_ping_reports_the_import_error_and_only_then(self):
        fn = thaw_agent.Function("probe")
        try:
            raise ModuleNotFoundError("No module named 'requests'")
        except ModuleNotFoundError as e:
            fn.error = thaw_agent._exc_error(e)
        pong = thaw_agent.Agent(fn, channel=None).dispatch(b'{"id":"1","op":"ping"}')
        self.assertTrue(pong["ok"])
        self.assertEqual(pong["function_error"]["type"], "ModuleNotFoundError")
        self.assertIn("Traceback", pong["function_error"]["traceback"])
        healthy = agent_with(types.SimpleNamespace(handle=lambda e: e))
        self.assertNotIn("function_error", healthy.dispatch(b'{"id":"2","op":"ping"}'))


def scratch_dir(test):
    """A temporary directory, leaving tempfile's state as it was: the restore
    tests count what the agent renews, tempfile's name sequence included."""
    import tempfile
    saved = tempfile._name_sequence
    tmp = tempfile.TemporaryDirectory()
    tempfile._name_sequence = saved
    test.addCleanup(tmp.cleanup)
    return tmp


class ImportErrorTest(unittest.TestCase):
    """An import failure's traceback starts at the function's own code."""

    def load(self, source):
        tmp = scratch_dir(self)
        fn_dir = os.path.join(tmp.name, "probe")
        os.makedirs(fn_dir)
        with open(os.path.join(fn_dir, "handler.py"), "w") as f:
            f.write(source)
        saved = (thaw_agent.FN_ROOT, thaw_agent.log, list(sys.path), os.getcwd(), sys.modules.pop("handler", None))
        self.addCleanup(self.restore, saved)
        thaw_agent.FN_ROOT, thaw_agent.log = tmp.name, lambda msg: None  # not the host's console
        fn = thaw_agent.Function("probe")
        fn._mount_disk = lambda dev: True
        fn.load("/dev/null")
        return fn, fn_dir

    @staticmethod
    def restore(saved):
        thaw_agent.FN_ROOT, thaw_agent.log, path, cwd, handler = saved
        sys.path[:] = path
        os.chdir(cwd)
        sys.modules.pop("handler", None)
        if handler is not None:
            sys.modules["handler"] = handler

    def test_missing_module(self):
        fn, fn_dir = self.load("import thaw_no_such_module\n\ndef handle(e):\n    return e\n")
        self.assertEqual(fn.error["type"], "ModuleNotFoundError")
        tb = fn.error["traceback"]
        self.assertTrue(tb.startswith("Traceback (most recent call last):\n  File \"" + fn_dir + "/handler.py\", line 1"), tb)
        self.assertNotIn("thaw_agent.py", tb)
        self.assertNotIn("importlib", tb)

    def test_syntax_error_shows_the_line(self):
        fn, fn_dir = self.load("def handle(e:\n    return e\n")
        self.assertEqual(fn.error["type"], "SyntaxError")
        self.assertIn(fn_dir + "/handler.py", fn.error["traceback"])
        self.assertNotIn("importlib", fn.error["traceback"])

    def test_exception_at_import(self):
        fn, _ = self.load("raise RuntimeError('no config')\n")
        self.assertEqual((fn.error["type"], fn.error["message"]), ("RuntimeError", "no config"))


class DepsLayerTest(unittest.TestCase):
    """The layer's site directory goes right after the function's directory,
    ahead of everything else, and its .pth files are processed."""

    def setUp(self):
        self.tmp = scratch_dir(self)
        self.site = os.path.join(self.tmp.name, "site")
        os.makedirs(os.path.join(self.site, "extra"))
        with open(os.path.join(self.site, "extra.pth"), "w") as f:
            f.write("extra\n")
        saved = (thaw_agent.DEPS_SITE, thaw_agent.mounted_paths, list(sys.path))
        self.addCleanup(self.restore, saved)
        thaw_agent.DEPS_SITE = self.site
        thaw_agent.mounted_paths = lambda: {thaw_agent.DEPS_ROOT}  # already mounted
        saved_log = thaw_agent.log
        thaw_agent.log = lambda msg: None  # not the host's console
        self.addCleanup(setattr, thaw_agent, "log", saved_log)

    @staticmethod
    def restore(saved):
        thaw_agent.DEPS_SITE, thaw_agent.mounted_paths, path = saved
        sys.path[:] = path

    def test_layer_goes_after_the_function_and_before_the_rest(self):
        fn = thaw_agent.Function("probe")
        fn_dir = os.path.join(self.tmp.name, "fn")
        rest = list(sys.path)
        sys.path.insert(0, fn_dir)
        self.assertTrue(fn._add_deps("/dev/null", "erofs", fn_dir))
        self.assertEqual(sys.path[:3], [fn_dir, self.site, os.path.join(self.site, "extra")])
        self.assertEqual(sys.path[3:], rest)
        self.assertIsNone(fn.error)

    def test_a_layer_that_does_not_mount_is_the_function_error(self):
        thaw_agent.mounted_paths = lambda: set()
        saved = thaw_agent.mount

        def refuse(*args):
            raise OSError(19, "mount /dev/vdc on /deps (erofs): No such device")
        thaw_agent.mount = refuse
        self.addCleanup(setattr, thaw_agent, "mount", saved)
        fn = thaw_agent.Function("probe")
        self.assertFalse(fn._add_deps("/dev/null", "erofs", "/fn/probe"))
        self.assertIn("dependency layer unavailable", fn.error["message"])
        self.assertIn("No such device", fn.error["message"])


if __name__ == "__main__":
    unittest.main()


class GeneratorRenewalTest(unittest.TestCase):
    """What a clone renews besides the kernel's RNG and random's global
    generator. Run on the host, these check the bookkeeping and that the
    calls reach real libraries; that clones really differ is checked on
    real VMs (e2e/clones_test.go)."""

    def test_openssl_libraries_are_found_and_reseeded(self):
        import ssl
        ssl.RAND_bytes(8)  # the DRBG exists, as in a function that used ssl
        gens = thaw_agent.OpenSSLGenerators()
        gens.refresh()
        names = [n for n, _ in gens.rand_add]
        self.assertTrue(any(n.startswith("openssl:libcrypto") for n in names), names)
        self.assertEqual(gens.reseed(os.urandom(48)), names)
        before = len(gens.rand_add)
        gens.refresh()  # no module imported since: nothing looked up again
        self.assertEqual(len(gens.rand_add), before)

    def test_python_generators_renewed(self):
        import multiprocessing
        import tempfile
        next(tempfile._get_candidate_names())
        key = multiprocessing.current_process().authkey
        reseeded = []
        thaw_agent.renew_python_generators(reseeded)
        self.assertIn("tempfile", reseeded)
        self.assertIn("multiprocessing.authkey", reseeded)
        self.assertIsNone(tempfile._name_sequence)
        self.assertNotEqual(multiprocessing.current_process().authkey, key)
        next(tempfile._get_candidate_names())  # made anew on use

    def test_restore_line_lists_what_it_reseeded(self):
        calls = []
        settime, reseed = thaw_agent.time.clock_settime_ns, thaw_agent.reseed_kernel
        thaw_agent.time.clock_settime_ns = lambda clock, t: calls.append(t)
        thaw_agent.reseed_kernel = calls.append
        self.addCleanup(setattr, thaw_agent.time, "clock_settime_ns", settime)
        self.addCleanup(setattr, thaw_agent, "reseed_kernel", reseed)
        import ssl  # noqa: F401
        gens = thaw_agent.OpenSSLGenerators()
        gens.refresh()
        self.addCleanup(setattr, thaw_agent, "_openssl", thaw_agent._openssl)
        thaw_agent._openssl = gens
        a = agent_with(types.SimpleNamespace(handle=lambda e: 0))
        r = json.loads(a.restore_line(b"restore 8 5 " + os.urandom(40).hex().encode()))
        self.assertTrue(r["ok"], r)
        self.assertTrue(any(n.startswith("openssl:libcrypto") for n in r["reseeded"]), r["reseeded"])
        self.assertGreaterEqual(r["steps"]["openssl"], 0)
