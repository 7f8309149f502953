"""Two hosts for real, one of them taken: two network namespaces on this machine joined by a veth
pair, each with its own address, examples/two-hosts.sh run in each as a user would (one launcher
per host, gloo between them). A host then vanishes as a reclaimed Spot VM does: its link goes
down first (no FIN, no RST reaches the other host), then every process in it is killed.
checkpoint.every_steps is far above the step at which it goes: only the survivors' save keeps
the work (docs/distributed.md, "When a host is lost").

- host B taken: host A's rank notices within dist.peer_timeout_s, commits the last step it
  completed within 10 s of the loss and exits 75; the job started again on both hosts ends with
  the uninterrupted two-rank run's parameters, bit for bit (float64, BatchNorm, dropout);
- host A taken (rank 0 and the rendezvous store with it): host B's rank meets no store, opens
  one of its own, writes the checkpoint into its run directory and exits 75; a fresh job with
  host B as node 0 resumes from it."""
import json
import os
import signal
import subprocess
import sys
import time

from common import DLRUN, SRC, RunDir, environment, expect, main
from test_dist import F64, LAUNCH, TINY, free_port

SCRIPT = os.path.join(SRC, "examples", "two-hosts.sh")
ADDR = {"a": "10.231.77.1", "b": "10.231.77.2"}


class TwoHosts:
    """Namespaces dlrun-a-PID and dlrun-b-PID, a veth pair between them (va-PID, vb-PID)."""

    def __enter__(self):
        tag = str(os.getpid() % 100000)
        self.ns = {h: f"dlrun-{h}-{tag}" for h in "ab"}
        self.dev = {h: f"v{h}{tag}" for h in "ab"}
        try:
            for h in "ab":
                self.ip("netns", "add", self.ns[h])
            self.ip("link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"])
            for h in "ab":
                self.ip("link", "set", self.dev[h], "netns", self.ns[h])
                self.ip("-n", self.ns[h], "addr", "add", ADDR[h] + "/24", "dev", self.dev[h])
                self.ip("-n", self.ns[h], "link", "set", "lo", "up")
                self.ip("-n", self.ns[h], "link", "set", self.dev[h], "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @staticmethod
    def ip(*args, check=True):
        p = subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        if check and p.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {p.stdout}")
        return p.stdout

    def start(self, host, node_rank, run_dir, *overrides, env=None, master="a"):
        e = environment(dict({"DLRUN": DLRUN, "NPROC_PER_NODE": "1", "MASTER_ADDR": ADDR[master], "CONFIG": TINY,
                              "RUN_DIR": run_dir, "GLOBAL_BATCH": "32", "LR": "0.05",
                              "GLOO_SOCKET_IFNAME": self.dev[host]}, **(env or {})))
        return subprocess.Popen(["ip", "netns", "exec", self.ns[host], "bash", SCRIPT, str(node_rank), *overrides],
                                env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def pids(self, host):
        out = self.ip("netns", "pids", self.ns[host], check=False)
        return [int(p) for p in out.split() if p.isdigit()]

    def take(self, host):
        """The VM is gone: its link down first (nothing more reaches the other host), then every
        process in it killed."""
        self.ip("-n", self.ns[host], "link", "set", self.dev[host], "down")
        for pid in self.pids(host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def bring_back(self, host):
        self.ip("-n", self.ns[host], "link", "set", self.dev[host], "up")

    def __exit__(self, *exc):
        for h in "ab":
            for pid in self.pids(h):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.ip("netns", "del", self.ns[h], check=False)  # takes its end of the veth pair with it



# Deterministic, BatchNorm and dropout, in float64; 0.1 s a step (a slow loader) leaves time to take
# a host in the middle of the run.
ARGS = ("run.threads=1", "train.max_steps=40", "checkpoint.every_steps=1000", "log.progress=none", *F64)
SLOW = {"DLRUN_FAULT": "slow_batch:100"}


def wait_for_step(run_dir, step, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            if max(run_dir.step_losses(), default=0) >= step:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)


def finish(*procs, timeout=300):
    """Each launcher's output once it exits; one still running after `timeout` fails the test with
    what it printed."""
    outs = []
    try:
        for p in procs:
            try:
                outs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                expect(False, f"a launcher ran on {timeout} s after it should have ended:\n{p.communicate()[0][-4000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def reference(run_dir):
    """The uninterrupted run: two ranks on this host (the same gloo algorithm as across the veth)."""
    e = environment({"GLOO_SOCKET_IFNAME": None})
    cmd = [sys.executable, LAUNCH, "--nproc-per-node", "2", "--master-port", str(free_port()), "--", DLRUN, "train",
           TINY, "data.batch_size=32", "optim.lr=0.05", *ARGS, "--run-dir", run_dir]
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    expect(p.returncode == 0, p.stdout[-3000:])


def test_host_b_taken_host_a_saves_the_last_step():
    with RunDir() as ref, RunDir() as r, TwoHosts() as hosts:
        reference(ref.path)
        env = dict(SLOW, MASTER_PORT=str(free_port()))
        a = hosts.start("a", 0, r.path, *ARGS, env=env)
        b = hosts.start("b", 1, r.path + "-b", *ARGS, env=env)
        wait_for_step(r, 12, a)
        expect(a.poll() is None, "host A's launcher ended before host B was taken")
        taken = time.time()
        hosts.take("b")
        out_a, _ = finish(a, b, timeout=120)
        waited = time.time() - taken
        expect(a.returncode == 75, f"host A's launcher exited {a.returncode}:\n{out_a[-3000:]}")
        expect("rank 1 on " in out_a and "went silent" in out_a, out_a[-3000:])
        expect(not hosts.pids("a"), f"processes left on host A: {hosts.pids('a')}")
        lost = [m for m in r.metrics() if m.get("event") == "peer_lost"]
        expect(len(lost) == 1 and lost[0]["writer"] == 0 and lost[0]["exact"], lost)
        saved = lost[0]["step"]
        commit = lost[0]["time"]
        expect(commit - taken <= 10, f"host A committed step {saved} {commit - taken:.1f} s after host B was taken")
        latest = open(r.file("checkpoints", "LATEST")).read().strip()
        expect(int(latest.split("-")[1]) == saved, latest)
        furthest = max(r.step_losses())
        expect(furthest - saved <= 1, f"host A logged step {furthest}, saved step {saved}")
        print(f"  host B taken: host A committed step {saved} {commit - taken:.1f} s later (logged up to {furthest}); "
              f"its launcher exited 75 after {waited:.1f} s")
        # The job again on both hosts (a new VM in B's place): it resumes at that step.
        hosts.bring_back("b")
        env = {"MASTER_PORT": str(free_port())}
        a = hosts.start("a", 0, r.path, *ARGS, env=env)
        b = hosts.start("b", 1, r.path + "-b", *ARGS, env=env)
        out_a, out_b = finish(a, b)
        expect(a.returncode == 0 and b.returncode == 0, f"{a.returncode} {b.returncode}:\n{out_a[-3000:]}")
        expect(f"at step {saved}" in out_a and "resumed from" in out_a, out_a[-3000:])
        got, want = r.summary()["params_sha256"], ref.summary()["params_sha256"]
        expect(got == want, f"host B lost at step {saved}, the job resumed: parameters {got} vs uninterrupted {want}")
        wc = r.summary()["wall_clock"]
        expect(wc["peer_losses"] == 1, wc)
        print(f"  resumed on two hosts: bitwise the uninterrupted run; the loss cost {wc['peer_lost_s']:.1f} s")


def test_host_a_taken_host_b_saves_and_a_fresh_job_resumes():
    with RunDir() as r, RunDir() as rb, TwoHosts() as hosts:
        env = dict(SLOW, MASTER_PORT=str(free_port()))
        a = hosts.start("a", 0, r.path, *ARGS, env=env)
        b = hosts.start("b", 1, rb.path, *ARGS, env=env)
        wait_for_step(r, 12, a)
        expect(b.poll() is None, "host B's launcher ended before host A was taken")
        furthest = max(r.step_losses())
        taken = time.time()
        hosts.take("a")
        out_b, = finish(b, timeout=120)
        finish(a, timeout=30)
        waited = time.time() - taken
        expect(b.returncode == 75, f"host B's launcher exited {b.returncode}:\n{out_b[-3000:]}")
        expect("rendezvous store" in out_b and "survivors" in out_b, out_b[-3000:])
        latest = open(rb.file("checkpoints", "LATEST")).read().strip()
        saved = int(latest.split("-")[1])
        expect(saved >= furthest - 1, f"host B saved step {saved}; host A had logged step {furthest}")
        with open(rb.file("checkpoints", latest, "state.json")) as f:
            expect(json.load(f)["step"] == saved, latest)
        print(f"  host A taken: host B saved step {saved} into its run directory; exit 75 after {waited:.1f} s")
        # A fresh job: host B is node 0 now (its run directory holds the checkpoint), a new VM is node 1.
        hosts.bring_back("a")
        env = {"MASTER_PORT": str(free_port())}
        b = hosts.start("b", 0, rb.path, *ARGS, env=env, master="b")
        a = hosts.start("a", 1, r.path, *ARGS, env=env, master="b")
        out_b, out_a = finish(b, a)
        expect(a.returncode == 0 and b.returncode == 0, f"{b.returncode} {a.returncode}:\n{out_b[-3000:]}")
        expect(f"at step {saved}" in out_b and "resumed from" in out_b, out_b[-3000:])
        expect(rb.summary()["status"] == "completed", rb.summary().get("status"))


if __name__ == "__main__":
    main([test_host_b_taken_host_a_saves_the_last_step, test_host_a_taken_host_b_saves_and_a_fresh_job_resumes])
