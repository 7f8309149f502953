"""log.metrics_port: the live metrics endpoint, scraped by a real Prometheus server.

- Debian's `prometheus` runs on 127.0.0.1 with a scrape config pointing at dlrun (every second).
  After a run stretched to ~10 s, its query API returns, for every scrape, the step and the
  loss, learning rate, samples/s and data-wait fraction that metrics.jsonl recorded for that
  step (exactly: both sides print shortest round-trip decimals). The checkpoint, work-at-risk
  and cost gauges were scraped too, within what the run's clock allows.
- log.metrics_every_rank through the launcher: each of two ranks serves on its own port (port +
  local rank) with its rank label; the run-level gauges (cost) come from rank 0 only.
- A port in use and an address that is not IPv4 are exit 2 at their keys, before the run
  directory is touched.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from common import SRC, RunDir, cfg, dlrun, expect, main, train

TINY = cfg("tiny.yaml")
LAUNCH = os.path.join(SRC, "scripts", "dlrun-launch")
SLOW = {"DLRUN_FAULT": "slow_batch:250"}  # ~10 s of steps: about ten scrapes


def free_port(pair=False):
    """A free port on 127.0.0.1 (with `pair`, one whose successor is free too)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if not pair or p >= 65535:
            return p
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue


class Prometheus:
    """Debian's Prometheus on 127.0.0.1, scraping `targets` every second; stopped on exit."""

    def __init__(self, targets):
        exe = shutil.which("prometheus") or "/usr/bin/prometheus"
        expect(os.access(exe, os.X_OK), "no prometheus binary: scripts/setup.sh installs Debian's `prometheus`")
        self.dir = tempfile.mkdtemp(prefix="dlrun-prom-")
        self.port = free_port()
        conf = os.path.join(self.dir, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
                    "scrape_configs:\n"
                    "  - job_name: dlrun\n"
                    f"    static_configs: [{{targets: {json.dumps([f'127.0.0.1:{t}' for t in targets])}}}]\n")
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [exe, f"--config.file={conf}", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 120  # a busy machine starts it slowly
        while True:
            expect(self.proc.poll() is None, f"prometheus exited {self.proc.returncode}: {self.logs()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            expect(time.time() < deadline, f"prometheus not ready in 120 s: {self.logs()}")
            time.sleep(0.5)

    def logs(self):
        self.log.flush()
        with open(os.path.join(self.dir, "prometheus.log")) as f:
            return f.read()[-2000:]

    def series(self, selector):
        """The raw samples of `selector` over the last 30 minutes: {labels: [(time, value)]}."""
        q = urllib.parse.urlencode({"query": f"{selector}[30m]"})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/query?{q}", timeout=30) as r:
            j = json.load(r)
        expect(j["status"] == "success", j)
        return {json.dumps(s["metric"], sort_keys=True): [(float(t), float(v)) for t, v in s["values"]]
                for s in j["data"]["result"]}

    def one(self, selector):
        got = self.series(selector)
        expect(len(got) == 1, f"{selector}: {len(got)} series: {list(got)}")
        return next(iter(got.values()))

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


ONE = free_port()        # the single-process run's endpoint
TWO = free_port(True)    # the two ranks': TWO and TWO + 1
PROM = None


def prometheus():
    global PROM
    if PROM is None:
        PROM = Prometheus([ONE, TWO, TWO + 1])
    return PROM


def records(run):
    """step -> metrics.jsonl's train record of that step."""
    return {m["step"]: m for m in run.metrics() if "event" not in m and "loss" in m}


def test_prometheus_scrapes_what_metrics_jsonl_records():
    prom = prometheus()
    with RunDir() as run:
        begin = time.time()
        train(TINY, run.path, "train.max_steps=40", f"log.metrics_port={ONE}", "run.price_per_hour=2.5",
              "checkpoint.every_steps=5", env=SLOW)
        took = time.time() - begin
        inst = f'{{instance="127.0.0.1:{ONE}"}}'
        up = prom.one(f"up{inst}")
        expect(any(v == 1 for _, v in up), f"prometheus never scraped dlrun successfully: {up}\n{prom.logs()}")
        steps = dict(prom.one(f"dlrun_step{inst}"))
        want = records(run)
        matched = set()
        for gauge, key in [("dlrun_loss", "loss"), ("dlrun_learning_rate", "lr"),
                           ("dlrun_samples_per_second", "samples_per_s"),
                           ("dlrun_data_wait_fraction", "data_wait_frac")]:
            samples = prom.one(f"{gauge}{inst}")
            expect(len(samples) == len(steps), f"{gauge}: {len(samples)} samples, dlrun_step {len(steps)}")
            for t, v in samples:
                expect(t in steps, f"{gauge} at {t} has no dlrun_step from the same scrape")
                step = int(steps[t])
                expect(v == want[step][key], f"{gauge} at step {step}: scraped {v!r}, metrics.jsonl {want[step][key]!r}")
                matched.add(step)
        expect(len(matched) >= 3, f"only {len(matched)} distinct steps scraped ({sorted(matched)}): too few to compare")
        expect(all(s in want for s in matched), "a scraped step metrics.jsonl does not have")
        epochs = {t: v for t, v in prom.one(f"dlrun_epoch{inst}")}
        expect(all(epochs[t] == want[int(s)]["epoch"] for t, s in steps.items()), "dlrun_epoch")
        since = [v for _, v in prom.one(f"dlrun_seconds_since_checkpoint{inst}")]
        expect(since and all(0 <= v <= took for v in since), f"seconds since checkpoint: {since}")
        risk = [v for _, v in prom.one(f"dlrun_work_at_risk_seconds{inst}")]
        expect(risk and all(0 <= v <= took for v in risk), f"work at risk: {risk}")
        cost = [v for _, v in prom.one(f"dlrun_cost{inst}")]
        expect(cost and cost == sorted(cost) and 0 < cost[-1] <= 2.5 * (took + 1) / 3600,
               f"cost {cost} for a {took:.1f} s run at 2.5 an hour")
        expect(not prom.series(f"dlrun_seconds_since_upload{inst}"), "an upload gauge without checkpoint.remote")


def test_every_rank_serves_its_own_port():
    prom = prometheus()
    with RunDir() as run:
        cmd = [sys.executable, LAUNCH, "--nproc-per-node", "2", "--master-port", str(free_port()), "--", os.environ["DLRUN"],
               "train", TINY, "--run-dir", run.path, "log.progress=none", "train.max_steps=30", "data.workers=0",
               f"log.metrics_port={TWO}", "log.metrics_every_rank=true", "run.price_per_hour=1"]
        e = dict(os.environ)
        e.update(SLOW)
        p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        expect(p.returncode == 0, p.stdout[-3000:])
        want = records(run)
        for rank, port in [(0, TWO), (1, TWO + 1)]:
            inst = f'{{instance="127.0.0.1:{port}"}}'
            labels = list(prom.series(f"dlrun_loss{inst}"))
            expect(len(labels) == 1 and json.loads(labels[0])["rank"] == str(rank), f"port {port}: {labels}")
            steps = dict(prom.one(f"dlrun_step{inst}"))
            losses = prom.one(f"dlrun_loss{inst}")
            expect(len(losses) >= 2, f"rank {rank}: {len(losses)} scrapes")
            for t, v in losses:  # the loss is the mean over ranks: the same line on both
                expect(v == want[int(steps[t])]["loss"], f"rank {rank} step {steps[t]}: {v} vs metrics.jsonl")
            cost = prom.series(f"dlrun_cost{inst}")
            expect(bool(cost) == (rank == 0), f"rank {rank}: the cost gauge is rank 0's alone ({list(cost)})")


def test_a_port_in_use_or_a_bad_address_is_refused_before_the_run_starts():
    with socket.socket() as s, RunDir() as run:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = train(TINY, run.file("r"), "train.max_steps=2", f"log.metrics_port={port}", check=2)
        expect("log.metrics_port" in p.stdout and f"127.0.0.1:{port}" in p.stdout, p.stdout[-2000:])
        expect(not os.path.exists(run.file("r", "metrics.jsonl")), "the run directory was written")
        p = train(TINY, run.file("q"), "train.max_steps=2", "log.metrics_port=9", "log.metrics_address=localhost",
                  check=2)
        expect("log.metrics_address" in p.stdout and "not an IPv4 address" in p.stdout, p.stdout[-2000:])
        p = dlrun("config", "validate", TINY, "log.metrics_port=9", "log.metrics_address=1.2.3", check=2)
        expect("log.metrics_address" in p.stdout, p.stdout)


if __name__ == "__main__":
    try:
        main([test_prometheus_scrapes_what_metrics_jsonl_records, test_every_rank_serves_its_own_port,
              test_a_port_in_use_or_a_bad_address_is_refused_before_the_run_starts])
    finally:
        if PROM is not None:
            PROM.stop()
