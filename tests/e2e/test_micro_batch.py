"""train.micro_batch: auto: out-of-memory recovery, driven on the CPU by fault injection
(DLRUN_FAULT=oom_at_step:K, the first attempt of step K runs out of memory after its first
forward; oom_above:N, every micro-batch piece of more than N samples does).

- A step split in two is train.grad_accum: 2, bitwise in float64 (BatchNorm and dropout: the
  failed attempt's buffer updates and random draws are put back), and differs from the unsplit
  run (BatchNorm normalises each piece by its own statistics).
- The search halves until a step fits, is recorded in the checkpoint and kept on resume (the
  resumed run equals the uninterrupted one); resumed with train.micro_batch: off, a warning.
- Nothing fits even at one sample: exit 1 naming the splits tried. With micro_batch off, an
  out-of-memory step ends the run with exit 1. With dist.sync_bn, auto is refused (exit 2).
- Two ranks (the launcher, gloo): one rank runs out, both take its split; gradients averaged
  after the backward under auto equal DDP's within rounding.
"""
import json
import os
import socket
import subprocess
import sys

from common import DLRUN, SRC, RunDir, cfg, expect, main, train

TINY = cfg("tiny.yaml")
F64 = ["model.dtype=float64", "data.workers=0", "train.eval_every_epochs=0", "train.eval_at_end=false",
       "sched.name=constant", "sched.warmup_steps=0", "checkpoint.every_steps=2"]
AUTO = "train.micro_batch=auto"


def state(run, step=None):
    d = os.path.join(run.path, "checkpoints")
    steps = sorted(int(n[5:]) for n in os.listdir(d) if n.startswith("step-") and n[5:].isdigit())
    with open(os.path.join(d, f"step-{(step or steps[-1]):08d}", "state.json")) as f:
        return json.load(f)


def test_a_step_split_in_two_is_grad_accum_two():
    with RunDir() as split, RunDir() as accum, RunDir() as whole:
        p = train(TINY, split.path, *F64, "train.max_steps=6", AUTO, env={"DLRUN_FAULT": "oom_at_step:1"})
        out = p.stdout
        expect("step 1 ran out of device memory" in out and "split into 2" in out, out[-2000:])
        expect("fits with each micro-batch split into 2" in out, out[-2000:])
        train(TINY, accum.path, *F64, "train.max_steps=6", "train.grad_accum=2")
        train(TINY, whole.path, *F64, "train.max_steps=6", AUTO)
        s, a, w = split.summary(), accum.summary(), whole.summary()
        expect(s["params_sha256"] == a["params_sha256"], "the split run is not train.grad_accum: 2")
        expect(split.step_losses() == accum.step_losses(), (split.step_losses(), accum.step_losses()))
        expect(w["params_sha256"] != s["params_sha256"], "splitting changed nothing: the test cannot tell")
        expect(state(split)["micro_batch"] == {"split": 2}, state(split).get("micro_batch"))
        expect(state(whole)["micro_batch"] == {"split": 1}, state(whole).get("micro_batch"))
        expect("micro_batch" not in state(accum), "micro_batch written with train.micro_batch off")


def test_the_search_halves_until_it_fits_and_resume_keeps_it():
    steps = ["train.max_steps=8"]
    with RunDir() as whole:
        p = train(TINY, whole.path, *F64, *steps, AUTO, env={"DLRUN_FAULT": "oom_above:8"})
        out = p.stdout
        for k in (2, 4):
            expect(f"micro-batch of 32 split into {k}" in out, out[-3000:])
        expect("split into 8" not in out, out[-3000:])
        expect(state(whole)["micro_batch"] == {"split": 4}, state(whole)["micro_batch"])
        want = whole.summary()["params_sha256"]
    with RunDir() as r:
        train(TINY, r.path, *F64, "train.max_steps=4", AUTO, env={"DLRUN_FAULT": "oom_above:8"})
        p = train(TINY, r.path, *F64, *steps, AUTO)  # no fault: the split comes from the checkpoint
        expect("split into 4 pieces, as when the checkpoint was written" in p.stdout, p.stdout[-2000:])
        expect(r.summary()["resumed_from_step"] == 4, r.summary().get("resumed_from_step"))
        expect(r.summary()["params_sha256"] == want, "the resumed run differs from the uninterrupted one")
    with RunDir() as r:
        train(TINY, r.path, *F64, "train.max_steps=4", AUTO, env={"DLRUN_FAULT": "oom_above:8"})
        p = train(TINY, r.path, *F64, *steps)
        expect("train.micro_batch is off now" in p.stdout, p.stdout[-2000:])
        expect(r.summary()["params_sha256"] != want, "resumed whole, the run cannot equal the split one")


def test_what_does_not_fit_is_exit_1_naming_the_splits_tried():
    with RunDir() as r:
        p = train(TINY, r.path, *F64, "train.max_steps=3", AUTO, env={"DLRUN_FAULT": "oom_above:0"}, check=1)
        expect("step 1 runs out of device memory" in p.stdout, p.stdout[-2000:])
        expect("each micro-batch of 32 samples into 1, 2, 4, 8, 16, 32" in p.stdout, p.stdout[-2000:])
    with RunDir() as r:  # synchronised BatchNorm's collectives inside the step: refused up front
        p = train(TINY, r.path, AUTO, "dist.sync_bn=true", check=2)
        expect("train.micro_batch" in p.stdout and "dist.sync_bn" in p.stdout, p.stdout[-2000:])
        p = train(TINY, r.path, "train.micro_batch=sometimes", check=2)
        expect("invalid value 'sometimes' (valid: off, auto)" in p.stdout, p.stdout[-2000:])
    with RunDir() as r:  # micro_batch off: the error ends the run, after the committed checkpoint
        p = train(TINY, r.path, *F64, "train.max_steps=6", "checkpoint.async=false", env={"DLRUN_FAULT": "oom_at_step:3"},
                  check=1)
        expect("ran out of memory" in p.stdout, p.stdout[-2000:])
        expect(state(r, 2)["step"] == 2, "the checkpoint of step 2 is gone")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(run_dir, *overrides, env=None):
    e = dict(os.environ)
    e.pop("DLRUN_FAULT", None)
    e.update(env or {})
    cmd = [sys.executable, os.path.join(SRC, "scripts", "dlrun-launch"), "--nproc-per-node", "2", "--master-port",
           str(free_port()), "--", DLRUN, "train", TINY, "model.name=mlp", "model.hidden=[32]", "model.dropout=0",
           "run.threads=1", "train.max_steps=6", "log.progress=none", *F64, *overrides, "--run-dir", run_dir]
    p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    expect(p.returncode == 0, p.stdout[-3000:])
    return p.stdout


def test_two_ranks_take_the_finest_split():
    with RunDir() as ddp, RunDir() as auto, RunDir() as hit:
        launch(ddp.path)
        launch(auto.path, AUTO)
        out = launch(hit.path, AUTO, env={"DLRUN_FAULT": "oom_at_step:3", "DLRUN_FAULT_RANK": "1"})
        # Rank 0 logs, and it did not run out itself: it split because rank 1 did.
        expect("step 3 ran out of device memory (another rank ran out of memory)" in out, out[-3000:])
        expect(state(hit)["micro_batch"] == {"split": 2}, state(hit)["micro_batch"])
        base, a, h = ddp.step_losses(), auto.step_losses(), hit.step_losses()
        expect(sorted(base) == sorted(a) == sorted(h) == list(range(1, 7)), (base, a, h))
        for k in base:  # an MLP without BatchNorm: splitting changes only the rounding
            expect(abs(a[k] - base[k]) <= 1e-9 * abs(base[k]), f"step {k}: {a[k]} vs DDP's {base[k]}")
            expect(abs(h[k] - base[k]) <= 1e-9 * abs(base[k]), f"step {k}: {h[k]} vs DDP's {base[k]}")


if __name__ == "__main__":
    main([test_a_step_split_in_two_is_grad_accum_two, test_the_search_halves_until_it_fits_and_resume_keeps_it,
          test_what_does_not_fit_is_exit_1_naming_the_splits_tried, test_two_ranks_take_the_finest_split])
