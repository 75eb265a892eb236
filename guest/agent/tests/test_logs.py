"""An invocation's output capture (OutputCapture), run on the host: what a
handler, C code and subprocesses write to stdout and stderr is in the reply's
logs, in order, bounded; what is left running writes into the next
invocation's. The guest's /dev/kmsg is read through a stand-in that returns
one record per read as it does; the real one is read on real VMs
(e2e/logs_test.go)."""
import ctypes
import json
import os
import select
import socket
import subprocess
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import thaw_agent  # noqa: E402


def invoke(handle, capture, **req):
    fn = thaw_agent.Function("probe")
    fn.attach(types.SimpleNamespace(handle=handle), handle)
    r = thaw_agent.Agent(fn, None, capture).invoke("1", dict(req, event=None))
    return r.decoded() if isinstance(r, thaw_agent.ResultReply) else r


class CaptureTest(unittest.TestCase):
    def setUp(self):
        # attach() points this process's descriptors 1 and 2 at its file for
        # good, as in the guest: the test's own are put back afterwards.
        sys.stdout.flush()
        sys.stderr.flush()
        # As the guest may start it (not on a terminal, PYTHONUNBUFFERED
        # unset): attach() makes print() line buffered.
        was = (sys.stdout.line_buffering, sys.stdout.write_through)
        sys.stdout.reconfigure(line_buffering=False, write_through=False)
        self.addCleanup(lambda: sys.stdout.reconfigure(line_buffering=was[0], write_through=was[1]))
        fds = (os.dup(1), os.dup(2))
        self.cap = thaw_agent.OutputCapture()
        self.cap.attach()

        def restore():
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds + (self.cap.fd,):
                os.close(fd)
        self.addCleanup(restore)

    def invoke(self, handle, **req):
        return invoke(handle, self.cap, **req)

    def test_every_writer_in_order(self):
        def handle(event):
            print("print to stdout")
            sys.stderr.write("sys.stderr\n")
            os.write(1, b"fd 1\n")
            os.write(2, b"fd 2\n")
            subprocess.run(["sh", "-c", "echo subprocess stdout; echo subprocess stderr >&2"], check=True)
            libc = ctypes.CDLL(None)
            libc.printf(b"C printf, line buffered\n")
            return "done"
        r = self.invoke(handle)
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["result"], "done")
        want = ("print to stdout\nsys.stderr\nfd 1\nfd 2\nsubprocess stdout\nsubprocess stderr\n"
                "C printf, line buffered\n")
        self.assertEqual(r["logs"]["output"], want)
        self.assertEqual(r["logs"]["bytes"], len(want))
        self.assertNotIn("cut", r["logs"])
        # The next invocation has only its own.
        r = self.invoke(lambda e: print("second"))
        self.assertEqual(r["logs"], {"output": "second\n", "bytes": 7})
        r = self.invoke(lambda e: None)
        self.assertEqual(r["logs"], {"output": "", "bytes": 0})

    def test_warm_up_leaves_the_output_for_the_next_invocation(self):
        print("written before")
        r = self.invoke(None, function=thaw_agent.WARM_UP)
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["logs"], {"output": "written before\n", "bytes": 15})
        r = self.invoke(lambda e: print("mine"))
        self.assertEqual(r["logs"], {"output": "written before\nmine\n", "bytes": 20})

    def test_a_handler_that_raises_has_its_logs(self):
        def handle(event):
            print("before the exception")
            raise SystemExit(3)
        r = self.invoke(handle)
        self.assertFalse(r["ok"])
        self.assertEqual(r["error"]["type"], "SystemExit")
        self.assertEqual(r["logs"]["output"], "before the exception\n")

    def test_other_failures_have_logs_too(self):
        r = self.invoke(lambda e: print("x") or float("nan"))
        self.assertEqual((r["error"]["type"], r["logs"]["output"]), ("TypeError", "x\n"))
        r = self.invoke(lambda e: print("y") or "z" * 100, max_result=10)
        self.assertEqual((r["error"]["type"], r["logs"]["output"]), ("ResultTooLarge", "y\n"))
        # Nothing ran: empty logs, still there (the host tells this agent from older ones by them).
        fn = thaw_agent.Function("probe")
        fn.error = thaw_agent._error("FunctionNotFound", "no handler")
        r = thaw_agent.Agent(fn, None, self.cap).invoke("2", {"event": None})
        self.assertEqual(r["logs"], {"output": "", "bytes": 0})

    def test_output_over_the_bound_keeps_its_ends(self):
        lines = [f"line {i:06d} " + "x" * 80 for i in range(20000)]  # ~1.8 MB

        def handle(event):
            for line in lines:
                print(line)
        limit = 64 << 10
        self.invoke(lambda e: print("an earlier invocation"))
        logs = self.invoke(handle, max_logs=limit)["logs"]
        total = sum(len(l) + 1 for l in lines)
        self.assertEqual(logs["bytes"], total)
        out = logs["output"]
        self.assertLessEqual(len(out), limit + 100)
        self.assertGreater(len(out), limit - 2 * 4096)
        kept = out.split("\n")[:-1]
        self.assertEqual(kept[0], lines[0])
        self.assertEqual(kept[-1], lines[-1])
        marks = [l for l in kept if l.startswith("[thaw: ")]
        self.assertEqual(marks, [f"[thaw: {logs['cut']} bytes of output cut here]"])
        i = kept.index(marks[0])
        # Whole lines on both sides, in order, and the cut is what is missing.
        self.assertEqual(kept[:i], lines[:i])
        self.assertEqual(kept[i + 1:], lines[len(lines) - (len(kept) - i - 1):])
        self.assertEqual(logs["cut"], total - sum(len(l) + 1 for l in kept if l is not marks[0]))
        # Past OUTPUT_TRIM the file was emptied: the next invocation starts afresh.
        self.assertEqual(os.fstat(self.cap.fd).st_size, 0)
        self.assertEqual(self.invoke(lambda e: print("after"))["logs"], {"output": "after\n", "bytes": 6})

    def test_the_default_bound(self):
        r = self.invoke(lambda e: os.write(1, b"y" * (thaw_agent.MAX_LOGS + 1)) and None)
        self.assertEqual(r["logs"]["bytes"], thaw_agent.MAX_LOGS + 1)
        self.assertGreater(r["logs"]["cut"], 0)
        for bad in (True, "5", -1, 0, 1.5):
            r = self.invoke(lambda e: os.write(1, b"z" * 10) and None, max_logs=bad)
            self.assertEqual(r["logs"], {"output": "z" * 10, "bytes": 10}, bad)

    def test_bytes_that_are_not_utf8_are_shown_escaped(self):
        r = self.invoke(lambda e: os.write(1, "caf\u00e9 \xff".encode("utf-8") + b" \xfe\x00\n") and None)
        self.assertEqual(r["logs"]["output"], "caf\u00e9 \u00ff \\xfe\x00\n")
        json.dumps(r)  # and the reply is JSON

    def test_a_process_left_running_writes_into_the_next_invocation(self):
        rd, wr = os.pipe()
        procs = []

        def handle(event):
            # The child tells the handler it wrote its first line on its stdin's pipe.
            procs.append(subprocess.Popen(["sh", "-c", "echo started; echo >&0; sleep 0.2; echo late"], stdin=wr))
            os.read(rd, 1)
        r = self.invoke(handle)
        os.close(rd)
        os.close(wr)
        self.assertEqual(r["logs"]["output"], "started\n")
        r = self.invoke(lambda e: procs[0].wait() and None or print("second"))
        self.assertEqual(r["logs"]["output"], "late\nsecond\n")

    def test_output_between_invocations_is_trimmed_when_idle(self):
        self.invoke(lambda e: print("first"))
        os.write(1, b"w" * (thaw_agent.OUTPUT_TRIM + 1))  # a thread of the function, while the agent is idle
        self.cap.trim()
        self.assertEqual(os.fstat(self.cap.fd).st_size, 0)
        self.cap.trim()  # nothing more to drop
        r = self.invoke(lambda e: print("next"))
        n = thaw_agent.OUTPUT_TRIM + 1
        self.assertEqual(r["logs"], {"output": f"[thaw: {n} bytes written before this invocation were cut]\nnext\n",
                                     "bytes": n + 5, "cut": n})

    def test_no_capture_is_said_and_the_invocation_runs(self):
        cap = thaw_agent.OutputCapture()
        orig = os.memfd_create
        os.memfd_create = lambda *a: (_ for _ in ()).throw(OSError(24, "Too many open files"))
        self.addCleanup(setattr, os, "memfd_create", orig)
        cap.attach()
        r = invoke(lambda e: "ran", cap)
        self.assertTrue(r["ok"])
        self.assertEqual(r["logs"]["bytes"], 0)
        self.assertIn("Too many open files", r["logs"]["error"])


class KernelMessagesTest(unittest.TestCase):
    """/dev/kmsg answers one record per read and EAGAIN when none is left."""

    def capture_with(self, records):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        cap = thaw_agent.OutputCapture()
        cap.fd = -1  # output is not what is tested here
        cap.kmsg = os.dup(b.fileno())
        self.addCleanup(os.close, cap.kmsg)
        os.set_blocking(cap.kmsg, False)
        cap.kpoll.register(cap.kmsg, select.POLLIN)
        cap.skip_kernel_messages()  # seeking a socket fails: ignored
        for rec in records:
            a.send(rec)
        return cap

    def test_records_become_dmesg_lines(self):
        cap = self.capture_with([
            b"3,812,12345678,-;Out of memory: Killed process 231 (python3)\n SUBSYSTEM=mem\n",
            b"7,813,12345679,-;a debug message\n",
            b"6,814,22000001,-;python3[240]: segfault at 0 ip 00007f error 4\n",
            b"garbage without fields",
            b"4,815,notanumber,-;odd time\n",
        ])
        logs = cap.stop(1024)
        self.assertEqual(logs["error"], "output not captured")
        self.assertEqual(logs["kernel"],
                         "[   12.345678] Out of memory: Killed process 231 (python3)\n"
                         "[   22.000001] python3[240]: segfault at 0 ip 00007f error 4\n"
                         "[    0.000000] odd time\n")

    def test_kernel_messages_are_bounded(self):
        cap = self.capture_with([b"4,%d,1,-;%s\n" % (i, b"k" * 1000) for i in range(40)])
        kernel = cap.stop(1024)["kernel"]
        self.assertLessEqual(len(kernel), thaw_agent.MAX_KERNEL_LOG + 64)
        self.assertTrue(kernel.endswith(" more kernel messages cut]\n"), kernel[-80:])

    def test_none_is_no_field(self):
        self.assertNotIn("kernel", self.capture_with([]).stop(1024))


if __name__ == "__main__":
    unittest.main()
