"""Exit 75 that every scheduler can trust (docs/checkpoints.md, "Exit codes a scheduler reads";
docs/distributed.md, "What every rank exits with"): every rank exits 75 only when rank 0 has
committed the stop's checkpoint, 1 together otherwise; one signal delivered twice is one
request; after the commit a further signal changes nothing; a notice's deadline counts from the
notice's own time; a launcher's shutdown timeout bounds its workers' stop; the non-finite skip
is agreed across ranks; ranks a larger world adds get RNG streams of their own."""
import json
import os
import signal
import subprocess
import sys
import time

import torch

from common import DLRUN, RunDir, environment, expect, main, train
from test_dist import LAUNCH, MLP, SAME, TINY, Ranks, final_params, free_port, max_rel_diff, run_ranks
from test_preemption import NoticeServer
from test_remote import S3Server, events, stepping, training, wait_for

LONG = ("train.max_steps=100000", "train.epochs=100000", "log.every_steps=1", "checkpoint.every_steps=0")


def stopped_while_training(cmd, r, env, stop):
    """Start `cmd`, call stop(p) once it trains (a step in r's metrics.jsonl), wait for its end;
    (exit code, output). Killed at the end if still running."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        expect(wait_for(stepping(r), p), "never trained")
        stop(p)
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out


def test_rank_0_failing_its_stop_save_makes_every_rank_exit_1():
    """Rank 0's preemption save fails (a full disk): no rank exits 75, so srun (the highest code)
    and the launcher both report 1, and no scheduler requeues a job that would not resume."""
    with RunDir() as r:
        args = ["train", TINY, *SAME, *MLP, *LONG, "--run-dir", r.path]
        with Ranks(2, args, {"DLRUN_FAULT": "disk_error:ENOSPC"}) as rs:
            expect(wait_for(stepping(r), rs.procs[0]), "the ranks never trained")
            for p in rs.procs:  # as Slurm signals every task of the step
                p.send_signal(signal.SIGUSR1)
            codes, outs = rs.wait(timeout=120)
        expect(codes == [1, 1], f"exit codes {codes}:\n" + "\n".join(o[-1500:] for o in outs))
        expect("rank 0 did not commit the checkpoint of step" in outs[1], outs[1][-2000:])
        expect("No space left on device" in outs[1] or "ENOSPC" in outs[1], outs[1][-2000:])
        expect(not os.path.exists(r.file("checkpoints", "LATEST")), "a LATEST without a committed checkpoint")
        expect(r.summary()["status"] == "failed", r.summary())


def test_a_stop_seen_by_one_rank_exits_75_on_every_rank_with_the_checkpoint_committed():
    with RunDir() as r:
        args = ["train", TINY, *SAME, *MLP, *LONG, "--run-dir", r.path]
        with Ranks(2, args) as rs:
            expect(wait_for(stepping(r), rs.procs[0]), "the ranks never trained")
            rs.procs[1].send_signal(signal.SIGTERM)  # one rank's signal stops both
            codes, outs = rs.wait(timeout=120)
        expect(codes == [75, 75], f"exit codes {codes}:\n" + "\n".join(o[-1500:] for o in outs))
        latest = open(r.file("checkpoints", "LATEST")).read().strip()
        expect(os.path.isdir(r.file("checkpoints", latest)), latest)
        expect("did not read" not in outs[0], outs[0][-1500:])


def test_one_sigterm_delivered_twice_is_one_request():
    """systemd (KillMode=control-group), Slurm and a forwarding launcher deliver the same SIGTERM
    twice, milliseconds apart: the save goes on and the exit is 75 with the checkpoint committed."""
    def twice(p):
        # Two different signals at once (two SIGTERMs may merge in the kernel while the first is
        # pending: then the process sees one), then the same one again 20 ms later.
        os.kill(p.pid, signal.SIGTERM)
        os.kill(p.pid, signal.SIGUSR1)
        time.sleep(0.02)
        os.kill(p.pid, signal.SIGTERM)

    with RunDir() as r:
        code, out = stopped_while_training([DLRUN, "train", TINY, *LONG, "log.progress=none", "--run-dir", r.path],
                                           r, environment(), twice)
        expect(code == 75, f"exit {code}:\n{out[-2000:]}")
        latest = open(r.file("checkpoints", "LATEST")).read().strip()
        expect(os.path.isdir(r.file("checkpoints", latest)), latest)
        expect("further signal(s) ignored" in out, out[-1500:])
        expect(r.summary()["status"] == "interrupted", r.summary())


def test_a_signal_after_the_commit_changes_nothing():
    """The checkpoint is committed and its upload hangs: a later SIGTERM (the scheduler's kill
    after its grace period would be SIGKILL; this is someone's second Ctrl-C) still exits 75."""
    with S3Server() as s3, RunDir() as r:
        with training(s3, r, *LONG, *s3.overrides("exp1", "preemption.deadline_s=8")) as p:
            expect(wait_for(stepping(r), p), "never trained")
            s3.stall()
            p.send_signal(signal.SIGTERM)
            expect(wait_for(lambda: os.path.exists(r.file("checkpoints", "LATEST")), p, timeout=60),
                   "the local checkpoint was never committed")
            time.sleep(1.5)  # well after the first: not the same request
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=120)
        expect(p.returncode == 75, f"exit {p.returncode}:\n{out[-2000:]}")
        expect("further signal(s) ignored" in out, out[-1500:])


def test_the_deadline_counts_from_the_aws_notices_own_time():
    """AWS publishes the instance-action when it gives notice, naming the time the VM is taken,
    120 s on; dlrun polls every 4 s here and the notice appears right after a poll, so dlrun
    sees it ~4 s late. The stop is dated back to the notice (that time less 120 s), not to the
    poll that saw it: preemption.deadline_s (10 s, the upload hanging) runs from there."""
    with NoticeServer() as srv, S3Server() as s3, RunDir() as r:
        with training(s3, r, *LONG, "preemption.watch=aws", f"preemption.endpoint=http://127.0.0.1:{srv.port}",
                      "preemption.poll_s=4", "preemption.deadline_s=10", *s3.overrides("exp2")) as p:
            expect(wait_for(stepping(r), p), "never trained")
            s3.stall()
            polls = len([q for q in srv.requests if q[0] == "GET"])
            expect(wait_for(lambda: len([q for q in srv.requests if q[0] == "GET"]) > polls, p, timeout=30),
                   "no poll")
            fired = time.time()  # just after a poll: the next one is ~4 s away
            srv.action_time = int(fired) + 120
            srv.noticed.set()
            out, _ = p.communicate(timeout=200)
            took = time.time() - fired
        expect(p.returncode == 75, f"exit {p.returncode}:\n{out[-2000:]}")
        seen = srv.served_at - fired
        ev = events(r, "preempt")[0]
        print(f"  notice published, seen {seen:.1f} s later; stop dated {ev['signal_time'] - fired:+.2f} s from "
              f"the notice; exit 75 {took:.1f} s after it")
        expect(seen >= 2, f"the notice was seen {seen:.1f} s after it appeared: the test cannot tell")
        expect(ev["signal_time"] <= fired + 0.05, (ev["signal_time"], fired))
        expect(ev["remote_commit_time"] is None and "deadline" in ev["remote_note"], ev)
        expect(took < 25, f"exit 75 came {took:.1f} s after the notice with a 10 s deadline")
        expect("it was given" in out, out[-1500:])


def test_the_launchers_shutdown_timeout_bounds_the_workers_stop():
    """An upload that hangs: without a deadline the workers would wait for it, the launcher would
    SIGKILL them at --shutdown-timeout and fail the job (1); told the timeout, rank 0 gives up on
    the upload in time (18 s after the signal of a 20 s timeout) and the launcher exits 75."""
    with S3Server() as s3, RunDir() as r:
        cmd = [sys.executable, LAUNCH, "--nproc-per-node", "2", "--master-port", str(free_port()),
               "--shutdown-timeout", "20", "--", DLRUN, "train", TINY, *SAME, *MLP, *LONG, "--run-dir", r.path,
               *s3.overrides("exp3")]
        def stop(p):
            s3.stall()
            p.send_signal(signal.SIGTERM)

        code, out = stopped_while_training(cmd, r, environment(s3.env), stop)
        expect(code == 75, f"launcher exited {code}:\n{out[-3000:]}")
        expect("SIGKILL" not in out, out[-3000:])
        expect("the launcher's --shutdown-timeout 20 s" in out, out[-3000:])


def test_a_non_finite_loss_on_one_rank_is_skipped_on_every_rank():
    """Rank 1's loss overflows at step 7 while the (averaged) gradients stay finite: both ranks
    skip step 7, as one process skipping it would -- not rank 1 alone, which would leave the
    replicas different from then on without a word."""
    with RunDir() as one, RunDir() as two:
        skip = ("train.nonfinite=skip",)
        train(TINY, one.path, *SAME, *MLP, *skip, env={"DLRUN_FAULT": "nonfinite_loss_at_step:7"})
        run_ranks(2, TINY, two.path, *SAME, *MLP, *skip,
                  env={"DLRUN_FAULT": "nonfinite_loss_at_step:7", "DLRUN_FAULT_RANK": "1"})
        expect(one.summary()["skipped_steps"] == 1, one.summary())
        expect(two.summary()["skipped_steps"] == 1, two.summary())
        d = max_rel_diff(final_params(one), final_params(two))
        expect(d < 1e-5, f"2 processes (rank 1's loss non-finite) vs 1: {d:.3g}")


def test_ranks_added_by_a_larger_world_get_streams_of_their_own():
    """1 process -> 4: ranks 1-3 had no RNG state in the checkpoint; each starts its own stream
    (before, they all kept run.seed and drew the same dropout masks)."""
    with RunDir() as r:
        train(TINY, r.path, *MLP, "run.threads=1", "train.max_steps=50", env={"DLRUN_FAULT": "signal_at_step:10"},
              check=75)
        run_ranks(4, TINY, r.path, *MLP, "run.threads=1", "train.max_steps=50",
                  env={"DLRUN_FAULT": "signal_at_step:15"}, expect_codes=[75] * 4)
        ck = r.file("checkpoints", "step-00000015")
        states = [torch.load(os.path.join(ck, f"rng-rank0000{i}.pt")) for i in range(4)]
        for a in range(4):
            for b in range(a + 1, 4):
                same = all(torch.equal(states[a][k], states[b][k]) for k in states[a])
                expect(not same, f"ranks {a} and {b} share one RNG stream")


def test_what_the_interruptions_cost_in_the_run_record():
    """Killed after step 12 (checkpoint at 10), stopped by a signal at step 20, then finished:
    summary.json accounts for the wall clock of the three processes, the two steps computed
    twice, and with a price what the run and its interruptions cost; each resume says what the
    interruption before it cost."""
    with RunDir() as r:
        price = {"DLRUN_PRICE_PER_HOUR": "3.6"}
        # The step-10 save must be committed before the abort at 12: written in the loop, not
        # by a background thread that a busy machine may not have finished by then.
        sync = "checkpoint.async=false"
        train(TINY, r.path, sync, env={"DLRUN_FAULT": "abort_at_step:12", **price}, check=None)
        train(TINY, r.path, sync, env={"DLRUN_FAULT": "signal_at_step:20", **price}, check=75)
        pre = [m for m in r.metrics() if m.get("event") == "preempt"][0]
        expect(pre["wall_clock"]["interruptions"] == 2 and pre["cost"]["price_per_hour"] == 3.6, pre)
        train(TINY, r.path, sync, env=price)
        s = r.summary()
        w, c = s["wall_clock"], s["cost"]
        print("  wall_clock:", json.dumps(w), "\n  cost:", json.dumps(c))
        expect(w["segments"] == 3 and w["interruptions"] == 2 and w["replayed_steps"] == 2, w)
        parts = w["startup_s"] + w["replayed_s"] + w["stop_s"] + w["save_stall_s"] + w["useful_s"]
        expect(abs(parts - w["paid_s"]) < 1e-6 and 0 < w["goodput"] < 1, w)
        expect(w["replayed_s"] > 0 and w["startup_s"] > 0 and w["stop_s"] > 0, w)
        expect(abs(c["total"] - 3.6 * w["paid_s"] / 3600) < 1e-9, (c, w))
        expect(abs(c["interruptions"] - 3.6 * w["interruptions_s"] / 3600) < 1e-9, (c, w))
        res = [m for m in r.metrics() if m.get("event") == "resume"]
        expect([m["previous"] for m in res] == ["killed", "interrupted"], res)
        expect([m["steps_replayed"] for m in res] == [2, 0] and [m["step"] for m in res] == [11, 21], res)
        expect(all(m["startup_s"] > 0 and m["lost_cost"] > 0 for m in res), res)
        starts = [m for m in r.metrics() if m.get("event") == "start"]
        expect(all(m["process_start_time"] <= m["time"] for m in starts), starts)
        # No price: no cost; a malformed one is bad input before anything is written.
        p = train(TINY, r.path, "--force", "--resume", "never", env={"DLRUN_PRICE_PER_HOUR": "three"}, check=2)
        expect("DLRUN_PRICE_PER_HOUR=three" in p.stdout, p.stdout[-1000:])


if __name__ == "__main__":
    main([test_rank_0_failing_its_stop_save_makes_every_rank_exit_1,
          test_a_stop_seen_by_one_rank_exits_75_on_every_rank_with_the_checkpoint_committed, test_one_sigterm_delivered_twice_is_one_request,
          test_a_signal_after_the_commit_changes_nothing, test_the_deadline_counts_from_the_aws_notices_own_time,
          test_the_launchers_shutdown_timeout_bounds_the_workers_stop,
          test_a_non_finite_loss_on_one_rank_is_skipped_on_every_rank,
          test_ranks_added_by_a_larger_world_get_streams_of_their_own,
          test_what_the_interruptions_cost_in_the_run_record])
