"""Two hosts for real, one of them taken: two network namespaces on this machine joined by a veth
pair, each with its own address, examples/two-hosts.sh run in each as a user would (one launcher
per host, gloo between them). Host B then vanishes as a reclaimed Spot VM does: its link goes
down first (no FIN, no RST reaches host A), then every process in it is killed. Host A's rank
must not hang: the collective times out within dist.timeout_s naming the lost rank, every
process exits, and the job started again on both hosts resumes at the last committed step and
ends where the uninterrupted run does. docs/distributed.md, "When a host is lost"."""
import os
import signal
import subprocess
import time

from common import DLRUN, SRC, RunDir, environment, expect, main, train
from test_dist import MLP, SAME, TINY, final_params, free_port, max_rel_diff

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

    def start(self, host, node_rank, run_dir, *overrides, env=None):
        e = environment(dict({"DLRUN": DLRUN, "NPROC_PER_NODE": "1", "MASTER_ADDR": ADDR["a"], "CONFIG": TINY,
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


def test_a_lost_host_does_not_hang_the_other_and_the_job_resumes():
    args = (*SAME, *MLP, "dist.timeout_s=15")
    with RunDir() as ref, RunDir() as r, TwoHosts() as hosts:
        train(TINY, ref.path, *SAME, *MLP)
        port = str(free_port())
        env = {"MASTER_PORT": port, "DLRUN_FAULT": "slow_batch:100"}  # 0.1 s a step: time to take host B
        a = hosts.start("a", 0, r.path, *args, env=env)
        b = hosts.start("b", 1, r.path + "-b", *args, env=env)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and a.poll() is None:
                try:
                    if max(r.step_losses(), default=0) >= 12:
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            expect(a.poll() is None, "host A's launcher ended before host B was taken")
            taken = time.time()
            hosts.take("b")
            out_a, _ = a.communicate(timeout=120)
            waited = time.time() - taken
            b.wait(timeout=30)
        finally:
            for p in (a, b):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        expect(a.returncode == 1, f"host A's launcher exited {a.returncode}:\n{out_a[-3000:]}")
        expect(waited < 60, f"host A took {waited:.0f} s to give up on host B (dist.timeout_s=15)")
        expect("rank 1 on " in out_a and "went silent" in out_a, out_a[-3000:])
        print("  host A, after host B was taken:", [l for l in out_a.splitlines() if "silent" in l or "fatal" in l])
        print(f"  host A gave up {waited:.1f} s after host B was taken")
        expect(not hosts.pids("a"), f"processes left on host A: {hosts.pids('a')}")
        latest = open(r.file("checkpoints", "LATEST")).read().strip()
        committed = int(latest.split("-")[1])
        expect(committed >= 10, latest)
        # The job again on both hosts (a new VM in B's place): it resumes at the last commit.
        hosts.bring_back("b")
        env = {"MASTER_PORT": str(free_port())}
        a = hosts.start("a", 0, r.path, *args, env=env)
        b = hosts.start("b", 1, r.path + "-b", *args, env=env)
        try:
            out_a, _ = a.communicate(timeout=300)
            out_b, _ = b.communicate(timeout=60)
        finally:
            for p in (a, b):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        expect(a.returncode == 0 and b.returncode == 0, f"{a.returncode} {b.returncode}:\n{out_a[-3000:]}")
        expect(f"resumed from {r.file('checkpoints', latest)} at step {committed}" in out_a, out_a[-3000:])
        d = max_rel_diff(final_params(ref), final_params(r))
        expect(d < 1e-5, f"a host lost, the job resumed on 2 hosts vs 1 uninterrupted process: {d:.3g}")
        resume = [m for m in r.metrics() if m.get("event") == "resume"]
        expect(len(resume) == 1 and resume[0]["previous"] == "failed" and resume[0]["steps_replayed"] >= 0, resume)


if __name__ == "__main__":
    main([test_a_lost_host_does_not_hang_the_other_and_the_job_resumes])
