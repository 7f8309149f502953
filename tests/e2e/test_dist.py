"""Multi-process training on the CPU (gloo, every process on 127.0.0.1): the same result as
one process on the same global batch, rank 0 alone writing, agreed preemption, failures,
the launcher (scripts/dlrun-launch) and real torchrun. docs/distributed.md is the contract."""
import os
import signal
import socket
import subprocess
import sys
import time

import torch

from common import DLRUN, SRC, RunDir, cfg, expect, main, train

sys.path.insert(0, os.path.join(SRC, "bench"))
from soak import descendants  # noqa: E402 - the soak's /proc walk

TINY = cfg("tiny.yaml")
LAUNCH = os.path.join(SRC, "scripts", "dlrun-launch")
# Deterministic and comparable: no dropout (its draws differ with the per-rank batch),
# one thread per process, 50 steps.
SAME = ("model.dropout=0", "run.threads=1", "train.epochs=4", "train.max_steps=50", "log.progress=none")
MLP = ("model.name=mlp", "model.hidden=[32]")
# The BatchNorm models run in float64: in float32 their gradients move by up to a few
# percent when the input moves by one rounding step (activations crossing ReLU kinks), so two
# float32 runs that differ only in rounding — 2 processes vs 1, but also 1 thread vs 2 in one
# process — part within a few steps and no implementation could meet 1e-5 after 50. In
# float64 rounding is ~1e-16 and what is left to differ is the distributed arithmetic.
# See docs/distributed.md, "Checking a distributed run against one process".
F64 = ("model.dtype=float64",)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, world, port, extra=None):
    e = dict(os.environ)
    e.pop("DLRUN_FAULT", None)
    e.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    e.update(extra or {})
    return e


class Ranks:
    """`world` dlrun processes started by hand with torchrun's variables; all stopped on exit."""

    def __init__(self, world, args, extra_env=None, ranks=None, port=None):
        port = port or free_port()
        self.procs = [subprocess.Popen([DLRUN, *args], env=rank_env(r, world, port, extra_env),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                      for r in (ranks if ranks is not None else range(world))]

    def __enter__(self):
        return self

    def wait(self, timeout=300):
        outs, codes = [], []
        for p in self.procs:
            out, _ = p.communicate(timeout=timeout)
            outs.append(out)
            codes.append(p.returncode)
        return codes, outs

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def run_ranks(world, config, run_dir, *overrides, env=None, expect_codes=None):
    args = ["train", config, *overrides, "--run-dir", run_dir]
    with Ranks(world, args, env) as rs:
        codes, outs = rs.wait()
    want = expect_codes if expect_codes is not None else [0] * world
    if codes != want:
        print("\n".join(outs))
        raise AssertionError(f"ranks exited {codes}, expected {want}")
    return outs


def final_params(run):
    latest = open(run.file("checkpoints", "LATEST")).read().strip()
    return torch.load(run.file("checkpoints", latest, "model.pt"))


def max_rel_diff(a, b):
    worst = 0.0
    for k, v in a.items():
        if v.is_floating_point():
            d = (v.double() - b[k].double()).abs().max().item() / max(v.double().abs().max().item(), 1e-12)
            worst = max(worst, d)
    return worst


def compare_world_sizes(*overrides, tol=1e-5):
    with RunDir() as one, RunDir() as two:
        train(TINY, one.path, *SAME, *overrides)
        run_ranks(2, TINY, two.path, *SAME, *overrides)
        d = max_rel_diff(final_params(one), final_params(two))
        expect(d < tol, f"{overrides}: 2 processes vs 1: max relative difference {d:.3g} >= {tol}")
        print(f"  {' '.join(overrides)}: 2 processes vs 1, max relative difference {d:.3g}")
        return one, two, d


def test_two_processes_match_one_mlp():
    with RunDir() as one, RunDir() as two:
        train(TINY, one.path, *SAME, *MLP)
        outs = run_ranks(2, TINY, two.path, *SAME, *MLP)
        d = max_rel_diff(final_params(one), final_params(two))
        expect(d < 1e-5, f"mlp: 2 processes vs 1: max relative difference {d:.3g}")
        s = two.summary()
        expect(s["world_size"] == 2 and s["steps"] == 50, s)
        expect(abs(s["eval"]["accuracy"] - one.summary()["eval"]["accuracy"]) < 0.02, "eval differs")
        expect(s["eval"]["samples"] == 128, f"the evaluation covered {s['eval']['samples']} samples, not all 128")
        expect("distributed: gloo, world size 2" in outs[0], "rank 0 does not log the backend and world layout")
        expect("gloo process group shut down" in outs[0], outs[0][-2000:])  # a clean run's close
        # As DDP, the Reducer re-buckets once after the first step (until then it records the
        # gradients' arrival order every step: a record that would grow for the whole run).
        expect(outs[0].count("gradient buckets rebuilt") == 1, outs[0][-3000:])
        # Rank 1 logs warnings only (none here), with its rank in the prefix.
        expect(all(line.startswith("dlrun[r1]: warning") or line.startswith("dlrun[r1]: error") or not
                   line.startswith("dlrun") for line in outs[1].splitlines()), outs[1][:2000])


def test_two_processes_match_one_convnet_with_sync_bn():
    compare_world_sizes("dist.sync_bn=true", *F64, tol=1e-9)  # with tiny.yaml's crop and flip


def test_two_processes_match_one_resnet18_with_sync_bn():
    # 8x8 images (float64 convolutions are slow on the CPU; layer4 then normalises over the
    # batch alone) and one checkpoint, the final one. 50 steps amplify float64 rounding to a
    # few 1e-9 here.
    compare_world_sizes("model.name=resnet18", "model.stem=cifar", "data.synthetic_shape=[1,8,8]", "dist.sync_bn=true",
                        "checkpoint.every_steps=50", *F64, tol=1e-7)


def test_two_processes_match_one_with_accumulation():
    compare_world_sizes("dist.sync_bn=true", "train.grad_accum=2", *F64, tol=1e-9)
    compare_world_sizes("train.grad_accum=2", *MLP)


def test_activation_checkpointing_with_ddp_and_sync_bn_changes_nothing():
    # Recomputed segments re-run synchronised BatchNorm (its collectives) during backward,
    # between the Reducer's bucket all-reduces: the same parameters, bit for bit.
    with RunDir() as plain, RunDir() as blocks:
        run_ranks(2, TINY, plain.path, *SAME, "dist.sync_bn=true", "train.max_steps=20")
        run_ranks(2, TINY, blocks.path, *SAME, "dist.sync_bn=true", "train.max_steps=20",
                  "model.activation_checkpointing=blocks")
        d = max_rel_diff(final_params(plain), final_params(blocks))
        expect(d == 0, f"2 ranks with activation checkpointing differ from 2 without ({d:.3g})")


def test_without_sync_bn_the_statistics_are_per_rank():
    # Per-rank BatchNorm statistics differ from the global batch's by design: the runs differ.
    with RunDir() as one, RunDir() as two:
        train(TINY, one.path, *SAME, *F64)
        run_ranks(2, TINY, two.path, *SAME, *F64)
        d = max_rel_diff(final_params(one), final_params(two))
        expect(d > 1e-4, f"without sync_bn the 2-process run equals the 1-process one ({d:.3g}): statistics not per rank?")


def test_fused_conv_bn_relu_under_ddp_matches_the_modules():
    # The fused operators (dlrun's CPU kernels with `true`) under the Reducer, per-rank
    # statistics (no sync_bn), channels_last: the same parameters as the modules' 2-rank run
    # within float64 rounding (the kernels sum in another order), and the ranks stay in step.
    with RunDir() as plain, RunDir() as fused:
        run_ranks(2, TINY, plain.path, *SAME, *F64, "model.channels_last=true", "model.fused_conv_bn_relu=false")
        outs = run_ranks(2, TINY, fused.path, *SAME, *F64, "model.channels_last=true", "model.fused_conv_bn_relu=true")
        expect("conv-BN-ReLU path dlrun" in outs[0], outs[0][-3000:])
        d = max_rel_diff(final_params(plain), final_params(fused))
        expect(d < 1e-10, f"2 ranks fused vs 2 ranks unfused: max relative difference {d:.3g}")
        expect(d > 0, "the fused run equals the unfused one bit for bit: were the fused operators used?")
        print(f"  2 ranks, fused vs unfused: max relative difference {d:.3g}")


def test_a_world_of_one_with_a_named_backend_runs_the_distributed_path():
    # Launched (RANK... set), world size 1: no process group with dist.backend auto, one with
    # gloo named — the Reducer and the collectives on one rank — and the same parameters.
    with RunDir() as plain, RunDir() as auto, RunDir() as gloo:
        train(TINY, plain.path, *SAME, "train.max_steps=10")
        out_auto = run_ranks(1, TINY, auto.path, *SAME, "train.max_steps=10")[0]
        out_gloo = run_ranks(1, TINY, gloo.path, *SAME, "train.max_steps=10", "dist.backend=gloo")[0]
        expect("distributed:" not in out_auto, out_auto[-2000:])
        expect("distributed: gloo, world size 1" in out_gloo, out_gloo[-2000:])
        for run in (auto, gloo):
            d = max_rel_diff(final_params(plain), final_params(run))
            expect(d == 0, f"{run.path}: a world of one differs from the plain run ({d:.3g})")


def test_only_rank_0_writes_and_metrics_aggregate():
    with RunDir() as two:
        # Rank 1's batches arrive 40 ms late: the logged data wait is the slowest rank's.
        run_ranks(2, TINY, two.path, *SAME, *MLP, "train.max_steps=8",
                  env={"DLRUN_FAULT": "slow_batch:40", "DLRUN_FAULT_RANK": "1"})
        names = sorted(os.listdir(two.path))
        expect("summary.json" in names and "metrics.jsonl" in names and "config.yaml" in names, names)
        rows = [m for m in two.metrics() if "loss" in m and "event" not in m]
        expect([m["step"] for m in rows] == list(range(1, 9)), "one train record per step, not one per rank")
        waits = [m["data_wait_s"] for m in rows]
        expect(min(waits) >= 0.039, f"data_wait_s is not the slowest rank's (rank 1 waits 40 ms a batch): {waits}")
        expect(all(0 < m["data_wait_frac"] <= 1.0 for m in rows), [m["data_wait_frac"] for m in rows])
        ck = sorted(os.listdir(two.file("checkpoints", "step-00000008")))
        expect("rng-rank00000.pt" in ck and "rng-rank00001.pt" in ck, f"every rank's RNG state: {ck}")


def test_a_signal_on_one_rank_stops_both_at_the_same_step_and_resume_continues():
    with RunDir() as ref, RunDir() as r:
        train(TINY, ref.path, *SAME, *MLP)
        env = {"DLRUN_FAULT": "signal_at_step:13", "DLRUN_FAULT_RANK": "1"}
        run_ranks(2, TINY, r.path, *SAME, *MLP, env=env, expect_codes=[75, 75])
        pre = [m for m in r.metrics() if m.get("event") == "preempt"]
        expect(len(pre) == 1 and pre[0]["step"] == 13, f"preempt events {pre}")
        expect(open(r.file("checkpoints", "LATEST")).read().strip() == "step-00000013", "not saved at step 13")
        run_ranks(2, TINY, r.path, *SAME, *MLP)
        d = max_rel_diff(final_params(ref), final_params(r))
        expect(d < 1e-5, f"interrupted + resumed on 2 ranks vs 1 uninterrupted: {d:.3g}")


def test_resume_on_another_world_size_keeps_the_cursor():
    with RunDir() as ref, RunDir() as r:
        train(TINY, ref.path, *SAME, *MLP)
        run_ranks(2, TINY, r.path, *SAME, *MLP, env={"DLRUN_FAULT": "signal_at_step:21"}, expect_codes=[75, 75])
        state = open(r.file("checkpoints", "step-00000021", "state.json")).read()
        expect('"world_size": 2' in state or '"world_size":2' in state, state[:300])
        p = train(TINY, r.path, *SAME, *MLP)  # one process resumes the 2-process run
        expect("resuming on world size 1 from world size 2" in p.stdout, p.stdout[-2000:])
        d = max_rel_diff(final_params(ref), final_params(r))
        expect(d < 1e-5, f"2 -> 1 process resume vs uninterrupted: {d:.3g}")


def test_a_killed_rank_makes_the_other_save_and_exit_75_promptly():
    """Rank 1 dies (abort(), as kill -9) after step 5: rank 0 learns of it from its closed
    connection, saves step 5 (checkpoint.every_steps is 10) and exits 75 (docs/distributed.md,
    "When a host is lost"). With the watch off (dist.peer_timeout_s=0) it fails as before:
    exit 1, its process group aborted rather than shut down on a dead peer."""
    for watch in (True, False):
        with RunDir() as r:
            start = time.time()
            env = {"DLRUN_FAULT": "abort_at_step:5", "DLRUN_FAULT_RANK": "1"}
            args = ["train", TINY, *SAME, *MLP, "--run-dir", r.path, "dist.timeout_s=120", "checkpoint.every_steps=10"]
            with Ranks(2, args + ([] if watch else ["dist.peer_timeout_s=0"]), env) as rs:
                codes, outs = rs.wait(timeout=100)
            expect(codes[1] not in (0, 75), f"rank 1 exited {codes[1]}")
            expect(time.time() - start < 60, f"took {time.time() - start:.0f} s: waited for the timeout")
            expect("gloo process group aborted" in outs[0] and "shut down" not in outs[0], outs[0][-2000:])
            if watch:
                expect(codes[0] == 75, f"rank 0 exited {codes[0]}:\n{outs[0][-2000:]}")
                expect(open(r.file("checkpoints", "LATEST")).read().strip().endswith("5"), "step 5 is not saved")
                expect(r.summary()["status"] == "interrupted", r.summary()["status"])
                expect([m["step"] for m in r.metrics() if m.get("event") == "peer_lost"] == [5], "no peer_lost event")
            else:
                expect(codes[0] == 1, f"rank 0 exited {codes[0]}:\n{outs[0][-2000:]}")
                expect(r.summary()["status"] == "failed", "summary.json does not record the failure")
                expect(not os.path.exists(r.file("checkpoints", "LATEST")), "saved with the watch off")


def test_a_rank_that_never_arrives_is_named():
    with RunDir() as r:
        start = time.time()
        with Ranks(4, ["train", TINY, "--run-dir", r.path, "dist.timeout_s=3"], ranks=[0, 2]) as rs:
            codes, outs = rs.wait(timeout=60)
        expect(codes == [1, 1], f"exit codes {codes}")
        expect("rank(s) 1, 3 of 4 did not arrive within dist.timeout_s=3" in outs[0], outs[0][-2000:])
        expect(time.time() - start < 30, "the timeout was not applied")
        expect(not os.path.exists(r.file("metrics.jsonl")), "a run that never started wrote metrics")


def test_a_stop_request_during_the_rendezvous_exits_75_promptly():
    """SIGTERM while a rank waits for its peers (rank 0 hosting the store, the others for rank 0
    and for each other): they would never arrive if the same request stopped them first, so the
    rank exits 75 at once (nothing trained) instead of waiting out dist.timeout_s."""
    for ranks, what in (([0], "received during the rendezvous"), ([1], "while connecting to the rendezvous store")):
        with RunDir() as r:
            with Ranks(2, ["train", TINY, "--run-dir", r.path, "dist.timeout_s=120", "log.progress=none"],
                       ranks=ranks) as rs:
                p = rs.procs[0]
                time.sleep(5)  # LibTorch and the config load in about a second; then it waits
                expect(p.poll() is None, f"rank {ranks[0]} exited early ({p.returncode})")
                start = time.time()
                p.send_signal(signal.SIGTERM)
                codes, outs = rs.wait(timeout=60)
                took = time.time() - start
            text = outs[0]
            expect(codes == [75], f"rank {ranks[0]}: exit {codes}:\n{text[-2000:]}")
            expect(what in text and "SIGTERM" in text, text[-2000:])
            expect(took < 10, f"rank {ranks[0]} took {took:.1f} s to stop")
            expect(not os.path.exists(r.file("metrics.jsonl")), "a run that never started wrote metrics")


def test_a_rank_that_reaches_another_programs_store_exits_2_at_once():
    """A store that holds keys but names no dlrun job (another program's, an older dlrun's) on the
    port: a rank other than 0 says so and exits 2 without writing into it, instead of waiting there
    for a rendezvous that never comes (or joining one that is not its job's)."""
    from torch.distributed import TCPStore
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    store.set("their/key", "1")
    with RunDir() as r:
        start = time.time()
        with Ranks(2, ["train", TINY, *SAME, *MLP, "--run-dir", r.path, "dist.timeout_s=60"], ranks=[1],
                   port=store.port) as rs:
            codes, outs = rs.wait(timeout=45)
        took = time.time() - start
    expect(codes == [2], f"exit {codes}:\n{outs[0][-2000:]}")
    expect(f"the rendezvous store at 127.0.0.1:{store.port} is not a dlrun job's" in outs[0], outs[0][-2000:])
    expect("--master-port" in outs[0] and "--standalone" in outs[0], outs[0][-2000:])
    expect(took < 30, f"took {took:.0f} s")
    expect(store.num_keys() == 1, f"the rank wrote into the other program's store ({store.num_keys()} keys)")


def launch(run_dir, *launcher_args, overrides=(), env=None, timeout=300):
    e = dict(os.environ)
    e.pop("DLRUN_FAULT", None)
    e.update(env or {})
    cmd = [sys.executable, LAUNCH, "--nproc-per-node", "2", "--master-port", str(free_port()), *launcher_args,
           "--", DLRUN, "train", TINY, *SAME, *MLP, *overrides, "--run-dir", run_dir]
    return subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def test_launcher_two_workers_finish():
    with RunDir() as r:
        p = launch(r.path)
        expect(p.returncode == 0, p.stdout[-3000:])
        expect("[rank 0] " in p.stdout, "no rank prefixes")
        expect(r.summary()["world_size"] == 2, r.summary())


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_launcher_takes_its_workers_with_it():
    """kill -9 of the launcher (its workers run in sessions of their own): the dlrun workers die
    with it (PR_SET_PDEATHSIG via DLRUN_LAUNCHER_PID) instead of training on orphaned, holding the
    run directory's lock against the requeued job; and a worker whose launcher is already gone
    when it starts ends at once."""
    with RunDir() as r:
        e = dict(os.environ)
        e.pop("DLRUN_FAULT", None)
        cmd = [sys.executable, LAUNCH, "--nproc-per-node", "2", "--master-port", str(free_port()), "--", DLRUN,
               "train", TINY, *SAME, *MLP, "train.max_steps=100000", "train.epochs=100000", "--run-dir", r.path]
        p = subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        workers = []
        try:
            deadline = time.time() + 120
            while time.time() < deadline and not os.path.exists(r.file("metrics.jsonl")):
                time.sleep(0.2)
            workers = descendants(p.pid)
            expect(len(workers) == 2, f"launcher children: {workers}")
            p.kill()
            p.wait()
            deadline = time.time() + 20
            while time.time() < deadline and any(alive(w) for w in workers):
                time.sleep(0.1)
            expect(not any(alive(w) for w in workers), f"workers {workers} outlived their launcher")
        finally:
            for w in workers:
                try:
                    os.kill(w, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    orphan = subprocess.run([DLRUN, "--version"], env=dict(e, DLRUN_LAUNCHER_PID=str(2 ** 22 + 7)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    expect(orphan.returncode == -signal.SIGKILL, f"a worker of a launcher that is gone exited {orphan.returncode}")
    ok = subprocess.run([DLRUN, "--version"], env=dict(e, DLRUN_LAUNCHER_PID="not-a-pid"), stdout=subprocess.PIPE,
                        timeout=60)
    expect(ok.returncode == 0, f"a malformed DLRUN_LAUNCHER_PID is ignored: exit {ok.returncode}")


def test_launcher_sigterm_saves_one_step_exits_75_and_relaunch_finishes():
    with RunDir() as ref, RunDir() as r:
        train(TINY, ref.path, *SAME, *MLP)
        e = dict(os.environ)
        e.pop("DLRUN_FAULT", None)
        cmd = [sys.executable, LAUNCH, "--nproc-per-node", "2", "--master-port", str(free_port()), "--", DLRUN,
               "train", TINY, *SAME, *MLP, "train.max_steps=2000", "train.epochs=200", "--run-dir", r.path]
        p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and not os.path.exists(r.file("metrics.jsonl")):
                time.sleep(0.2)
            time.sleep(1.5)
            p.send_signal(signal.SIGTERM)
            out, _ = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        expect(p.returncode == 75, f"launcher exited {p.returncode}:\n{out[-3000:]}")
        pre = [m for m in r.metrics() if m.get("event") == "preempt"]
        expect(len(pre) == 1, f"one preempt record expected: {pre}")
        # The relaunch with the reference's schedule length finishes from the saved step.
        q = launch(r.path, overrides=("train.max_steps=50",))
        expect(q.returncode == 0, q.stdout[-3000:])


def test_launcher_restarts_a_killed_group_and_it_resumes():
    with RunDir() as ref, RunDir() as r:
        train(TINY, ref.path, *SAME, *MLP)
        # Rank 1 dies (abort, as kill -9) after step 12 on the first attempt only.
        p = launch(r.path, "--max-restarts", "1",
                   env={"DLRUN_FAULT": "abort_at_step:12", "DLRUN_FAULT_RANK": "1", "DLRUN_FAULT_RESTART": "0"})
        expect(p.returncode == 0, p.stdout[-3000:])
        starts = [m for m in r.metrics() if m.get("event") == "start"]
        # (every 5 steps; the survivor saved step 12 itself when rank 1 went: docs/distributed.md)
        expect(len(starts) == 2 and starts[1]["step"] == 12, f"the restart did not resume from step 12: {starts}")
        d = max_rel_diff(final_params(ref), final_params(r))
        expect(d < 1e-5, f"restarted run vs uninterrupted: {d:.3g}")


def test_launcher_gives_up_after_max_restarts():
    with RunDir() as r:
        # Fails at step 3 on every attempt: no checkpoint before it, so every restart fails again.
        p = launch(r.path, "--max-restarts", "2", overrides=("checkpoint.every_steps=5",),
                   env={"DLRUN_FAULT": "abort_at_step:3"})
        expect(p.returncode == 1, f"exit {p.returncode}:\n{p.stdout[-3000:]}")
        starts = [m for m in r.metrics() if m.get("event") == "start"]
        expect(len(starts) == 3, f"{len(starts)} attempts, expected 3")


def test_two_hosts_on_one_machine():
    with RunDir() as ref, RunDir() as r:
        train(TINY, ref.path, *SAME, *MLP)
        port = str(free_port())
        e = dict(os.environ)
        e.pop("DLRUN_FAULT", None)
        procs = []
        try:
            for node in (0, 1):
                procs.append(subprocess.Popen(
                    [sys.executable, LAUNCH, "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", str(node),
                     "--master-addr", "127.0.0.1", "--master-port", port, "--", DLRUN, "train", TINY, *SAME, *MLP,
                     "--run-dir", r.path if node == 0 else r.path + "-node1"],
                    env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outs = [p.communicate(timeout=300)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        expect([p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs))
        expect(not os.path.exists(r.path + "-node1"), "node rank 1 wrote a run directory")
        d = max_rel_diff(final_params(ref), final_params(r))
        expect(d < 1e-5, f"2 hosts vs 1 process: {d:.3g}")


def test_real_torchrun():
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    with RunDir() as ref, RunDir() as r:
        train(TINY, ref.path, *SAME, *MLP)
        e = dict(os.environ)
        e.pop("DLRUN_FAULT", None)
        p = subprocess.run([torchrun, "--no-python", "--nproc-per-node", "2", "--master-port", str(free_port()),
                            DLRUN, "train", TINY, *SAME, *MLP, "--run-dir", r.path],
                           env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        expect(p.returncode == 0, p.stdout[-3000:])
        d = max_rel_diff(final_params(ref), final_params(r))
        expect(d < 1e-5, f"torchrun 2 processes vs 1: {d:.3g}")


if __name__ == "__main__":
    main([test_two_processes_match_one_mlp, test_two_processes_match_one_convnet_with_sync_bn,
          test_two_processes_match_one_resnet18_with_sync_bn,
          test_two_processes_match_one_with_accumulation, test_activation_checkpointing_with_ddp_and_sync_bn_changes_nothing,
          test_without_sync_bn_the_statistics_are_per_rank, test_fused_conv_bn_relu_under_ddp_matches_the_modules,
          test_a_world_of_one_with_a_named_backend_runs_the_distributed_path, test_only_rank_0_writes_and_metrics_aggregate,
          test_a_signal_on_one_rank_stops_both_at_the_same_step_and_resume_continues,
          test_resume_on_another_world_size_keeps_the_cursor, test_a_killed_rank_makes_the_other_save_and_exit_75_promptly,
          test_a_rank_that_never_arrives_is_named, test_a_stop_request_during_the_rendezvous_exits_75_promptly,
          test_a_rank_that_reaches_another_programs_store_exits_2_at_once,
          test_launcher_two_workers_finish,
          test_a_killed_launcher_takes_its_workers_with_it,
          test_launcher_sigterm_saves_one_step_exits_75_and_relaunch_finishes,
          test_launcher_restarts_a_killed_group_and_it_resumes, test_launcher_gives_up_after_max_restarts,
          test_two_hosts_on_one_machine, test_real_torchrun])
