"""A peer lost without notice on one machine (docs/distributed.md, "When a host is lost"): the
survivors save the last step they completed and exit 75, with checkpoint.every_steps far above
the step at which the peer goes, so that only that save can keep the work.

- a worker killed (abort(), as kill -9 or the OOM killer) under the launcher: the others save, the
  launcher restarts the group (--max-restarts), it resumes from that save and ends with the
  uninterrupted run's parameters, bit for bit (float64, BatchNorm, dropout);
- the same under real torchrun (its agent SIGTERMs the survivors mid-save; torchrun restarts);
- a peer that goes silent without closing anything (SIGSTOP: no FIN, no error, as a host whose
  link went down): the others notice within dist.peer_timeout_s, save and exit 75.

Two real hosts, one of them taken, are tests/e2e/test_two_hosts.py."""
import os
import re
import signal
import subprocess
import sys
import time

from common import DLRUN, RunDir, expect, main
from test_dist import F64, LAUNCH, TINY, Ranks, free_port

# 3 ranks of 16 samples (48 a step), BatchNorm and dropout, float64: bitwise comparable.
RUN = ("data.batch_size=48", "train.max_steps=24", "run.threads=1", "log.progress=none", "checkpoint.every_steps=1000",
       *F64)


def launch(run_dir, *overrides, env=None, restarts=1):
    e = dict(os.environ)
    e.pop("DLRUN_FAULT", None)
    e.update(env or {})
    cmd = [sys.executable, LAUNCH, "--nproc-per-node", "3", "--master-port", str(free_port()), "--max-restarts",
           str(restarts), "--", DLRUN, "train", TINY, *RUN, *overrides, "--run-dir", run_dir]
    return subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)


def test_a_killed_worker_costs_no_step():
    with RunDir() as ref, RunDir() as r:
        p = launch(ref.path)
        expect(p.returncode == 0, p.stdout[-3000:])
        # Rank 1 dies right after step 9 in the first start only; the others are at step 9's
        # boundary or inside step 10 when they learn of it.
        p = launch(r.path, env={"DLRUN_FAULT": "abort_at_step:9", "DLRUN_FAULT_RANK": "1", "DLRUN_FAULT_RESTART": "0"})
        out = p.stdout
        expect(p.returncode == 0, out[-4000:])
        expect("rank 1 failed (killed by SIGABRT)" in out, out[-4000:])
        expect("frame #" not in out and "Exception raised from" not in out, "c10d's C++ backtraces in the log")
        expect("the checkpoint of step 9 after" in out and "is committed" in out, out[-4000:])
        expect("exiting with code 75" in out, out[-4000:])
        events = {m.get("event"): m for m in r.metrics() if m.get("event")}
        lost = events.get("peer_lost")
        expect(lost is not None and lost["step"] == 9, events.keys())
        expect(lost["writer"] == 0 and lost["exact"] and sorted(lost["survivors"]) == [0, 2], lost)
        expect(lost["lost_ranks"] == [1], lost)  # named, though its connections closed before its beat stopped
        expect(events["resume"]["steps_replayed"] == 0, events["resume"])
        expect(sum(m.get("event") == "resume" for m in r.metrics()) == 1, "the resume recorded more than once")
        s, s_ref = r.summary(), ref.summary()
        expect(s["status"] == "completed" and s["steps"] == 24, (s.get("status"), s.get("steps")))
        expect(s["params_sha256"] == s_ref["params_sha256"],
               "resumed after a lost worker vs uninterrupted: the parameters differ")
        wc = s["wall_clock"]
        expect(wc["peer_losses"] == 1 and wc["peer_lost_s"] > 0 and wc["interruptions"] == 1, wc)
        print(f"  a worker lost at step 9: saved by rank 0, {lost['latency_s']:.2f} s from the loss to the commit; "
              f"the interruption cost {wc['peer_lost_s']:.1f} s of wall clock")


def test_real_torchrun_restarts_from_the_survivors_save():
    """torchrun's agent sees the worker die and sends the others SIGTERM: they finish the save
    they started (the loss came first), and torchrun's own restart resumes from it."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with RunDir() as r:
        e = dict(os.environ, DLRUN_FAULT="abort_at_step:9", DLRUN_FAULT_RANK="1", DLRUN_FAULT_RESTART="0")
        p = subprocess.run([torchrun, "--no-python", "--nproc-per-node", "3", "--max-restarts", "1", "--master-port",
                            str(free_port()), DLRUN, "train", TINY, *RUN, "--run-dir", r.path],
                           env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        expect(p.returncode == 0, p.stdout[-4000:])
        lost = [m for m in r.metrics() if m.get("event") == "peer_lost"]
        expect(len(lost) == 1 and lost[0]["step"] == 9, lost)
        resume = [m for m in r.metrics() if m.get("event") == "resume"]
        expect(len(resume) == 1 and resume[0]["steps_replayed"] == 0, resume)
        expect(r.summary()["status"] == "completed", r.summary().get("status"))


def test_a_silent_peer_is_lost_within_peer_timeout():
    port = free_port()
    with RunDir() as r:
        args = ["train", TINY, *RUN, "train.max_steps=400", "dist.peer_timeout_s=3", "dist.timeout_s=300",
                "--run-dir", r.path]
        env = {"DLRUN_FAULT": "slow_batch:50"}  # 0.05 s a step: time to stop rank 2 in the middle
        with Ranks(3, args, env, port=port) as rs:
            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    if max(r.step_losses(), default=0) >= 6:
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            silent = rs.procs[2]
            silent.send_signal(signal.SIGSTOP)  # alive, its sockets open: no error reaches the others
            stopped = time.time()
            codes, outs = [], []
            for p in rs.procs[:2]:
                out, _ = p.communicate(timeout=120)
                codes.append(p.returncode)
                outs.append(out)
            took = time.time() - stopped
            silent.kill()
            silent.wait()
        expect(codes == [75, 75], f"exit {codes}:\n{outs[0][-3000:]}\n{outs[1][-2000:]}")
        expect("rank 2" in outs[1] and "went silent" in outs[0] + outs[1], outs[1][-3000:])
        expect(took < 60, f"the survivors took {took:.0f} s to save (dist.peer_timeout_s=3, dist.timeout_s=300)")
        lost = [m for m in r.metrics() if m.get("event") == "peer_lost"]
        expect(len(lost) == 1, lost)
        latest = open(r.file("checkpoints", "LATEST")).read().strip()
        expect(latest == f"step-{lost[0]['step']:08d}" or latest.endswith(str(lost[0]["step"])), latest)
        furthest = max(r.step_losses())
        expect(furthest - lost[0]["step"] <= 1, f"logged up to step {furthest}, saved step {lost[0]['step']}")
        print(f"  rank 2 stopped: the others saved step {lost[0]['step']} and exited 75 {took:.1f} s later")


def test_a_frozen_store_host_does_not_hold_the_survivor():
    """Rank 0, which hosts the rendezvous store, stopped with SIGSTOP: its store's socket still
    accepts connections and never answers. Every store call of the survivors' rescue has a
    deadline of dist.peer_timeout_s's scale, so rank 1 treats the store as gone, meets in a store
    of its own, writes the checkpoint of its last step and exits 75 -- in seconds, not after
    dist.timeout_s (300 here) or never."""
    with RunDir() as r:
        args = ["train", TINY, *RUN, "train.max_steps=400", "dist.peer_timeout_s=3", "dist.timeout_s=300",
                "--run-dir", r.path]
        with Ranks(2, args, {"DLRUN_FAULT": "slow_batch:50"}, port=free_port()) as rs:
            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    if max(r.step_losses(), default=0) >= 6:
                        break
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            frozen = rs.procs[0]
            frozen.send_signal(signal.SIGSTOP)
            stopped = time.time()
            try:
                out, _ = rs.procs[1].communicate(timeout=120)
            finally:
                frozen.kill()  # (SIGKILL ends a stopped process too)
                frozen.wait()
            took = time.time() - stopped
        code = rs.procs[1].returncode
        expect(code == 75, f"rank 1 exited {code}:\n{out[-4000:]}")
        expect("the survivors meet without it" in out, out[-4000:])
        # One line says the store is gone; c10d's warnings with their C++ backtraces (30-110 lines each,
        # before) are not shown (TORCH_CPP_LOG_LEVEL brings them back).
        expect("frame #" not in out and "Exception raised from" not in out, out[-4000:])
        expect(took < 60, f"rank 1 took {took:.0f} s to save (dist.peer_timeout_s=3, dist.timeout_s=300)")
        saving = re.search(r"saving the checkpoint of step (\d+) with the other survivors", out)
        expect(saving, out[-4000:])
        latest = open(r.file("checkpoints", "LATEST")).read().strip()
        expect(latest == f"step-{int(saving.group(1)):08d}", (latest, saving.group(0)))
        print(f"  rank 0 (the store's host) stopped: rank 1 committed {latest} and exited 75 {took:.1f} s later")


if __name__ == "__main__":
    main([test_a_killed_worker_costs_no_step, test_real_torchrun_restarts_from_the_survivors_save,
          test_a_silent_peer_is_lost_within_peer_timeout, test_a_frozen_store_host_does_not_hold_the_survivor])
