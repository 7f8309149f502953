"""The elastic launcher on two hosts for real (two network namespaces joined by a veth pair, as
test_two_hosts.py builds them): `dlrun-launch --nnodes 1:2`, the same command on both hosts,
host A (10.231.77.1) hosting the rendezvous. docs/distributed.md ("The elastic launcher").

- host B taken (link down, processes killed) at step 12 or later: host A's worker saves the last
  step it completed, its launcher starts it again alone within 30 s of the loss (world size 1);
  host B's launcher started again (a new VM) -> the running worker saves at an agreed step and
  both hosts go on (world size 2). The final parameters equal, bit for bit, a run on one machine
  that followed the same world sizes at the same steps (2 ranks, then 1, then 2);
- host A taken (the rendezvous and rank 0 with it): host B's worker saves into its run directory,
  and its launcher, finding no rendezvous, exits 75 for the scheduler to restart the job;
- real `torchrun --nnodes 1:2` launching dlrun, host B taken: dlrun saves, torchrun's own
  rendezvous re-forms the group on host A alone and the run completes."""
import os
import subprocess
import sys
import time

from common import DLRUN, RunDir, environment, expect, main
from test_dist import F64, LAUNCH, TINY
from test_two_hosts import ADDR, TwoHosts, wait_for_step

# Deterministic (float64, BatchNorm, dropout), 150 steps; 0.1 s a step leaves time for the changes.
ARGS = ("run.threads=1", "train.epochs=20", "train.max_steps=150", "checkpoint.every_steps=1000", "log.progress=none",
        "data.batch_size=32", "optim.lr=0.05", *F64)
SLOW = {"DLRUN_FAULT": "slow_batch:100"}
PORT = "29500"  # each namespace has its ports to itself


def launcher(hosts, host, run_dir, logs, env=None):
    """The launcher's output goes to a file in `logs`: nothing blocks on a pipe nobody reads yet."""
    e = environment(dict({"GLOO_SOCKET_IFNAME": hosts.dev[host]}, **(env or {})))
    cmd = ["ip", "netns", "exec", hosts.ns[host], sys.executable, LAUNCH, "--nnodes", "1:2", "--nproc-per-node", "1",
           "--master-addr", ADDR["a"], "--master-port", PORT, "--rdzv-id", "elastic-test",
           "--", DLRUN, "train", TINY, *ARGS, "--run-dir", run_dir]
    path = os.path.join(logs, f"{host}-{len(os.listdir(logs))}.log")
    with open(path, "w") as log:
        p = subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT, text=True)
    p.log = path
    return p


def output(p):
    with open(p.log) as f:
        return f.read()


def finish(*procs, timeout=300):
    """Each launcher's output once it exits; one still running after `timeout` fails the test."""
    deadline = time.time() + timeout
    try:
        for p in procs:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                expect(False, f"a launcher ran on {timeout} s after it should have ended:\n{output(p)[-4000:]}\n"
                              f"--- the others:\n" + "\n".join(output(q)[-3000:] for q in procs if q is not p))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [output(p) for p in procs]


def events(run, kind):
    return [m for m in run.metrics() if m.get("event") == kind]


def wait_until(what, cond, proc, timeout=120):
    deadline = time.time() + timeout
    while True:
        value = cond()
        if value:
            return value
        expect(proc.poll() is None, f"the launcher exited ({proc.returncode}) waiting for {what}:\n{output(proc)[-3000:]}")
        expect(time.time() < deadline, f"{what}: not within {timeout} s")
        time.sleep(0.05)


def steps_after(run, t):
    """The steps logged after wall time t."""
    return [m["step"] for m in run.metrics() if "event" not in m and "loss" in m and m["time"] > t]


def reference(run_dir, first, second):
    """One machine, the same world sizes at the same steps: 2 ranks to step `first` (a stop there:
    exit 75, checkpoint), 1 rank to `second`, 2 ranks to the end."""
    for nproc, stop in (("2", first), ("1", second), ("2", None)):
        e = environment(dict({"GLOO_SOCKET_IFNAME": None},
                             **({"DLRUN_FAULT": f"signal_at_step:{stop}", "DLRUN_FAULT_RANK": "0"} if stop else {})))
        p = subprocess.run([sys.executable, LAUNCH, "--standalone", "--nproc-per-node", nproc, "--", DLRUN, "train",
                            TINY, *ARGS, "--run-dir", run_dir], env=e, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        expect(p.returncode == (75 if stop else 0), f"reference on {nproc} rank(s): exit {p.returncode}\n{p.stdout[-3000:]}")
        if stop:
            latest = open(os.path.join(run_dir, "checkpoints", "LATEST")).read().strip()
            expect(latest == f"step-{stop:08d}", f"the reference stopped at {latest}, not step {stop}")


def test_host_b_taken_the_job_goes_on_alone_and_grows_back():
    with RunDir() as r, RunDir() as ref, RunDir() as scratch, TwoHosts() as hosts:
        a = launcher(hosts, "a", r.path, scratch.path, SLOW)
        b = launcher(hosts, "b", os.path.join(scratch.path, "b"), scratch.path, SLOW)
        wait_for_step(r, 12, a)
        expect(a.poll() is None, "host A's launcher ended before host B was taken")
        taken = time.time()
        hosts.take("b")
        finish(b, timeout=30)
        # Host A alone: a start on world size 1, then steps.
        alone = wait_until("host A's worker alone",
                           lambda: [m for m in events(r, "start") if m["world_size"] == 1], a)[0]
        first_alone = wait_until("a step on world size 1", lambda: steps_after(r, alone["time"]), a)
        went_on = r.metrics()
        went_on_s = min(m["time"] for m in went_on if "event" not in m and "loss" in m and m["time"] > alone["time"]) - taken
        expect(went_on_s <= 30, f"host A went on alone {went_on_s:.1f} s after host B was taken")
        lost = events(r, "peer_lost")
        expect(len(lost) == 1 and lost[0]["exact"], lost)
        s1 = lost[0]["step"]
        expect(alone["step"] == s1 and first_alone[0] == s1 + 1, f"saved {s1}, went on from {alone['step']}")
        wait_until("3 steps alone", lambda: len(steps_after(r, alone["time"])) >= 3, a)
        # A new VM in host B's place runs the same command.
        hosts.bring_back("b")
        joined = time.time()
        b = launcher(hosts, "b", os.path.join(scratch.path, "b2"), scratch.path, SLOW)
        out_a, out_b = finish(a, b)
        expect(a.returncode == 0 and b.returncode == 0, f"exit {a.returncode} {b.returncode}:\n{out_a[-3000:]}\n"
                                                        f"--- host B:\n{out_b[-2000:]}")
        starts = events(r, "start")
        expect([m["world_size"] for m in starts] == [2, 1, 2], [(m["step"], m["world_size"]) for m in starts])
        s2 = starts[2]["step"]
        grown_s = min(m["time"] for m in r.metrics() if "event" not in m and "loss" in m and m["time"] > starts[2]["time"]) - joined
        expect("a node waits to join the job" in out_a and "round 2: 2 node(s)" in out_a, out_a[-3000:])
        # The workers name their launcher, and the launcher's "[rank N]" is the only rank in a line.
        expect("launched by dlrun-launch" in out_a and "dlrun[r" not in out_a + out_b, out_a[-3000:])
        wc = r.summary()["wall_clock"]
        print(f"  host B taken: step {s1} saved, host A went on alone {went_on_s:.1f} s after the loss; host B back: "
              f"step {s2} saved, world size 2 again {grown_s:.1f} s after its launcher started; "
              f"peer_lost_s {wc['peer_lost_s']:.1f}")
        reference(ref.path, s1, s2)
        got, want = r.summary()["params_sha256"], ref.summary()["params_sha256"]
        expect(got == want, f"world sizes 2/1/2 changing at steps {s1} and {s2}: parameters {got}, "
                            f"the same sizes on one machine {want}")
        print(f"  final parameters equal, bit for bit, the run with the same world sizes (2 -> {s1} -> 1 -> {s2} -> 2)")


def test_host_a_taken_host_b_saves_and_hands_the_job_to_the_scheduler():
    with RunDir() as r, RunDir() as rb, RunDir() as scratch, TwoHosts() as hosts:
        a = launcher(hosts, "a", r.path, scratch.path, SLOW)
        b = launcher(hosts, "b", rb.path, scratch.path, SLOW)
        wait_for_step(r, 12, a)
        taken = time.time()
        hosts.take("a")
        out_b, = finish(b, timeout=120)
        finish(a, timeout=30)
        expect(b.returncode == 75, f"host B's launcher exited {b.returncode}:\n{out_b[-3000:]}")
        expect("does not answer" in out_b and "requeue the job" in out_b, out_b[-3000:])
        latest = open(rb.file("checkpoints", "LATEST")).read().strip()
        print(f"  host A taken: host B saved {latest} and its launcher exited 75 {time.time() - taken:.1f} s later")


def torchrun(hosts, host, run_dir, logs):
    """Real `torchrun --nnodes 1:2` (its c10d rendezvous on host A) launching dlrun. is_host is said
    outright: torchrun recognises the endpoint's host by its name, and both namespaces share this
    machine's."""
    e = environment(dict(SLOW, GLOO_SOCKET_IFNAME=hosts.dev[host]))
    cmd = ["ip", "netns", "exec", hosts.ns[host], os.path.join(os.path.dirname(sys.executable), "torchrun"),
           "--no-python", "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"{ADDR['a']}:{PORT}", "--rdzv-id", "torchrun-test", "--max-restarts", "3",
           "--local-addr", ADDR[host], "--rdzv-conf", f"last_call_timeout=2,is_host={int(host == 'a')}",
           DLRUN, "train", TINY, *ARGS, "--run-dir", run_dir]
    path = os.path.join(logs, f"torchrun-{host}.log")
    with open(path, "w") as log:
        p = subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT, text=True)
    p.log = path
    return p


def test_real_torchrun_elastic_goes_on_without_host_b():
    """dlrun under torchrun's own elastic agent: dlrun notices and saves, torchrun re-forms the group."""
    with RunDir() as r, RunDir() as scratch, TwoHosts() as hosts:
        a = torchrun(hosts, "a", r.path, scratch.path)
        b = torchrun(hosts, "b", os.path.join(scratch.path, "b"), scratch.path)
        wait_for_step(r, 12, a)
        expect(a.poll() is None, f"host A's torchrun ended before host B was taken:\n{output(a)[-3000:]}")
        taken = time.time()
        hosts.take("b")
        finish(b, timeout=30)
        out_a, = finish(a)
        expect(a.returncode == 0, f"torchrun on host A exited {a.returncode}:\n{out_a[-3000:]}")
        lost = events(r, "peer_lost")
        expect(len(lost) == 1 and lost[0]["exact"], lost)
        starts = events(r, "start")
        expect([(m["world_size"], m["step"]) for m in starts] == [(2, 0), (1, lost[0]["step"])], starts)
        expect(r.summary()["status"] == "completed", r.summary().get("status"))
        went_on = min(m["time"] for m in r.metrics() if "event" not in m and "loss" in m and m["time"] > starts[1]["time"])
        print(f"  torchrun --nnodes 1:2, host B taken: step {lost[0]['step']} saved {lost[0]['time'] - taken:.1f} s "
              f"after the loss, host A went on alone {went_on - taken:.1f} s after it (torchrun's rendezvous)")


if __name__ == "__main__":
    main([test_host_b_taken_the_job_goes_on_alone_and_grows_back,
          test_host_a_taken_host_b_saves_and_hands_the_job_to_the_scheduler,
          test_real_torchrun_elastic_goes_on_without_host_b])
