"""Preemption (docs/checkpoints.md): SIGTERM / SIGUSR1 / SIGINT and cloud notices stop the run
at the next step boundary (or during an evaluation) with a committed checkpoint and exit 75;
the resumed run ends exactly where an uninterrupted one would. Notice sources are served from
127.0.0.1 only."""
import http.server
import json
import os
import signal
import subprocess
import threading
import time

from common import DLRUN, RunDir, cfg, expect, main, train

TINY = cfg("tiny.yaml")
LONG = ("train.epochs=200",)  # long enough that only a stop request ends it


def start(r, *overrides):
    env = dict(os.environ)
    env.pop("DLRUN_FAULT", None)
    return subprocess.Popen([DLRUN, "train", TINY, "--run-dir", r.path, *LONG, *overrides], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_step(r, p, step, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.poll() is not None:
            raise AssertionError(f"dlrun exited early ({p.returncode}):\n{p.stdout.read()}")
        if os.path.exists(r.file("metrics.jsonl")) and any(s >= step for s in r.step_losses()):
            return
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached")


def check_interrupted(r, p, code=75):
    try:
        out, _ = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    expect(p.returncode == code, f"exit {p.returncode}, expected {code}:\n{out[-3000:]}")
    s = r.summary()
    expect(s["status"] == "interrupted", s["status"])
    latest = open(r.file("checkpoints", "LATEST")).read().strip()
    expect(latest == f"step-{s['steps']:08d}", f"LATEST {latest} but stopped at step {s['steps']}")
    ev = [m for m in r.metrics() if m.get("event") == "preempt"]
    expect(len(ev) == 1 and ev[0]["latency_s"] >= 0 and ev[0]["commit_time"] >= ev[0]["signal_time"], ev)
    expect(s["preemption"]["reason"] == ev[0]["reason"], s["preemption"])
    return s, out


def test_sigterm_at_step_then_exact_resume():
    with RunDir() as r, RunDir() as ref:
        p = train(TINY, r.path, env={"DLRUN_FAULT": "signal_at_step:21"}, check=75)
        s = r.summary()
        expect(s["steps"] == 21 and s["checkpoint"].endswith("step-00000021"), s)
        train(TINY, r.path)
        train(TINY, ref.path)
        expect(r.summary()["params_sha256"] == ref.summary()["params_sha256"], "resume after SIGTERM differs")
        expect(r.summary()["steps_lost"] == 0, r.summary()["steps_lost"])


def test_external_signals():
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        with RunDir() as r:
            p = start(r)
            wait_for_step(r, p, 3)
            p.send_signal(sig)
            s, out = check_interrupted(r, p)
            expect(signal.Signals(sig).name in s["preemption"]["reason"], s["preemption"])


def test_file_notice():
    with RunDir() as r:
        notice = r.file("preempt-notice")
        p = start(r, "preemption.watch=file", f"preemption.endpoint={notice}", "preemption.poll_s=0.05")
        wait_for_step(r, p, 3)
        open(notice, "w").write("terminating")
        s, _ = check_interrupted(r, p)
        expect("file" in s["preemption"]["reason"], s["preemption"])


def test_a_signal_during_evaluation_ends_it_and_saves():
    """The stop flag is checked around evaluations, not only after steps: a SIGTERM that
    arrives while evaluating ends the evaluation early, saves, and exits 75."""
    with RunDir() as r, RunDir() as ref:
        train(TINY, r.path, env={"DLRUN_FAULT": "signal_during:eval"}, check=75)
        s = r.summary()
        expect(s["steps"] == 16 and s["checkpoint"].endswith("step-00000016"), s)  # the first eval: end of epoch 1
        expect(not [m for m in r.metrics() if m.get("event") == "eval"], "an interrupted evaluation was reported")
        train(TINY, r.path)
        evals = [m["step"] for m in r.metrics() if m.get("event") == "eval"]
        expect(evals == [16, 32, 48], f"the interrupted evaluation was not done after the resume: {evals}")
        train(TINY, ref.path)
        expect(r.summary()["params_sha256"] == ref.summary()["params_sha256"], "resume after an eval stop differs")


def test_a_signal_during_a_save_exits_after_it_without_saving_twice():
    with RunDir() as r:
        train(TINY, r.path, env={"DLRUN_FAULT": "signal_during:save"}, check=75)
        s = r.summary()
        saves = [m for m in r.metrics() if m.get("event") == "checkpoint"]
        expect(s["steps"] == 5 and len(saves) == 1 and saves[0]["reason"] == "every_steps", saves)
        expect(s["checkpoint"].endswith("step-00000005"), s)
        expect(open(r.file("checkpoints", "LATEST")).read().strip() == "step-00000005", "LATEST")


class NoticeServer:
    """GCP- and AWS-style metadata answers on 127.0.0.1; `fire()` turns the notice on."""

    def __init__(self):
        self.noticed = threading.Event()
        self.requests = []
        self.action_in_s = 120  # the AWS instance-action's time: when the VM is taken
        self.action_time = None
        self.served_at = None   # when the notice was first answered
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):  # AWS IMDSv2 token
                outer.requests.append(("PUT", self.path))
                self._send(200, b"token123")

            def do_GET(self):
                outer.requests.append(("GET", self.path, dict(self.headers)))
                if self.path.endswith("/instance/preempted"):
                    ok = self.headers.get("Metadata-Flavor") == "Google"
                    self._send(200 if ok else 403, b"TRUE" if outer.noticed.is_set() else b"FALSE")
                elif self.path.endswith("/spot/instance-action"):
                    if outer.noticed.is_set():
                        if outer.action_time is None:  # named when the notice is first read
                            outer.action_time = int(time.time()) + outer.action_in_s
                        if outer.served_at is None:
                            outer.served_at = time.time()
                        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(outer.action_time))
                        self._send(200, json.dumps({"action": "terminate", "time": when}).encode())
                    else:
                        self._send(404, b"")
                else:
                    self._send(404, b"")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_gcp_and_aws_notices_from_local_server():
    for watch in ("gcp", "aws"):
        with NoticeServer() as srv, RunDir() as r:
            endpoint = (f"http://127.0.0.1:{srv.port}/computeMetadata/v1/instance/preempted" if watch == "gcp"
                        else f"http://127.0.0.1:{srv.port}")
            p = start(r, f"preemption.watch={watch}", f"preemption.endpoint={endpoint}", "preemption.poll_s=0.05")
            wait_for_step(r, p, 3)
            expect(srv.requests, f"{watch}: the watcher never polled")
            srv.noticed.set()
            s, _ = check_interrupted(r, p)
            expect(watch in s["preemption"]["reason"], s["preemption"])


if __name__ == "__main__":
    main([test_sigterm_at_step_then_exact_resume, test_external_signals, test_file_notice,
          test_gcp_and_aws_notices_from_local_server, test_a_signal_during_evaluation_ends_it_and_saves,
          test_a_signal_during_a_save_exits_after_it_without_saving_twice])
