"""train.ema_decay: the weights' exponential moving average.

- Numerically PyTorch's: the average dlrun checkpoints after every step equals, in float64 to
  1e-12, PyTorch's AveragedModel(get_ema_multi_avg_fn(decay), use_buffers=True) fed the same
  raw weights (the model.pt of every step); with warm-up, a start step and updates every other
  step, get_ema_multi_avg_fn at timm's decay for each due step. Integer buffers follow the model.
- Resumed exactly: killed (abort, SIGTERM) and resumed, the run ends with the uninterrupted
  run's average, bitwise (summary.json ema.params_sha256, ema.pt's tensors), and its counter.
- Evaluated and exported: eval events and summary.json carry the average's results beside the
  weights', `dlrun eval` reports both, `dlrun export --weights ema` writes ema.pt's tensors;
  --weights ema of a run without an average, and ema_decay 1, are exit 2.
"""
import json
import os

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from common import RunDir, cfg, dlrun, expect, main, train

TINY = cfg("tiny.yaml")
F64 = ["model.dtype=float64", "train.max_steps=12", "checkpoint.every_steps=1", "checkpoint.keep_last=0",
       "train.eval_every_epochs=0", "train.eval_at_end=false", "data.workers=0"]


def checkpoints(run):
    d = os.path.join(run.path, "checkpoints")
    out = {}
    for name in sorted(os.listdir(d)):
        if name.startswith("step-") and name[5:].isdigit():
            out[int(name[5:])] = os.path.join(d, name)
    return out


def load(path):
    return torch.load(path, weights_only=True)


class Holder(torch.nn.Module):
    """A module holding a state dict's tensors as buffers (AveragedModel averages buffers too)."""

    def __init__(self, tensors):
        super().__init__()
        self.names = list(tensors)
        for i, name in enumerate(self.names):
            self.register_buffer(f"t{i}", tensors[name].clone())

    def tensors(self):
        return {name: getattr(self, f"t{i}") for i, name in enumerate(self.names)}


def timm_decay(step, decay, start, warmup):
    k = max(0, step - start - 1)
    if k <= 0:
        return 0.0
    return max(min(1 - (1 + k) ** (-2 / 3), decay), 0.0) if warmup else decay


def compare(got, want, what):
    for name, w in want.items():
        g = got[name]
        if w.is_floating_point():
            err = (g - w).abs().max().item()
            expect(g.dtype == torch.float64 and err <= 1e-12, f"{what}: {name} differs by {err}")


def test_average_is_pytorchs_averaged_model():
    with RunDir() as run:
        train(TINY, run.path, *F64, "train.ema_decay=0.9")
        cks = checkpoints(run)
        expect(sorted(cks) == list(range(1, 13)), sorted(cks))
        averaged = None
        for step, ck in cks.items():
            raw = load(os.path.join(ck, "model.pt"))
            if averaged is None:
                averaged = AveragedModel(Holder(raw), multi_avg_fn=get_ema_multi_avg_fn(0.9), use_buffers=True)
            averaged.update_parameters(Holder(raw))
            ema = load(os.path.join(ck, "ema.pt"))
            compare(ema, averaged.module.tensors(), f"step {step}")
            # (model.dtype=float64 converts every buffer, num_batches_tracked too: it is averaged as a float)
            state = json.load(open(os.path.join(ck, "state.json")))["ema"]
            expect(state["updates"] == step and state["last_step"] == step, state)
        s = run.summary()
        expect(s["ema"]["updates"] == 12 and len(s["ema"]["params_sha256"]) == 64, s["ema"])
        expect(s["ema"]["params_sha256"] != s["params_sha256"], "the average is not the weights")


def test_warmup_start_step_and_every_steps_follow_timm():
    decay, start, every = 0.95, 3, 2
    with RunDir() as run:
        train(TINY, run.path, *F64, f"train.ema_decay={decay}", "train.ema_warmup=true",
              f"train.ema_start_step={start}", f"train.ema_every_steps={every}")
        average = None
        for step, ck in checkpoints(run).items():
            raw = load(os.path.join(ck, "model.pt"))
            if average is None:
                average = {k: v.clone() for k, v in raw.items()}  # overwritten: step 2's decay is 0 (a copy)
            if step % every == 0:
                d = timm_decay(step, decay, start, True)
                floats = [k for k, v in raw.items() if v.is_floating_point()]
                get_ema_multi_avg_fn(d)([average[k] for k in floats], [raw[k] for k in floats], None)
            ema = load(os.path.join(ck, "ema.pt"))
            if step >= every:
                compare(ema, average, f"step {step}")
            state = json.load(open(os.path.join(ck, "state.json")))["ema"]
            expect(state["updates"] == step // every, state)
            if step % every == 0:
                expect(abs(state["last_decay"] - timm_decay(step, decay, start, True)) < 1e-15, state)


def test_resumed_average_is_the_uninterrupted_one():
    common = ["train.ema_decay=0.8", "train.ema_warmup=true", "train.ema_every_steps=3", "data.workers=0"]
    with RunDir() as base:
        train(TINY, base.path, *common)
        want = base.summary()["ema"]
        want_ema = load(os.path.join(checkpoints(base)[max(checkpoints(base))], "ema.pt"))
    for how in ("abort_at_step:11", "signal_at_step:25"):
        with RunDir() as r:
            p = train(TINY, r.path, *common, env={"DLRUN_FAULT": how}, check=None)
            expect(p.returncode != 0, f"{how}: exited {p.returncode}")
            train(TINY, r.path, *common)
            got = r.summary()
            expect(got["resumed_from_step"] > 0, got.get("resumed_from_step"))
            expect(got["ema"] == want, f"{how}: the resumed average differs: {got['ema']} vs {want}")
            ema = load(os.path.join(checkpoints(r)[max(checkpoints(r))], "ema.pt"))
            expect(all(torch.equal(ema[k], v) for k, v in want_ema.items()), f"{how}: ema.pt differs")


def test_evaluated_and_exported():
    with RunDir() as run:
        train(TINY, run.path, "train.ema_decay=0.9", "train.max_steps=16", "data.workers=0")
        evals = [m for m in run.metrics() if m.get("event") == "eval"]
        expect(evals and all("ema_accuracy" in m and "ema_loss" in m for m in evals), evals)
        s = run.summary()
        expect("ema" in s["eval"] and s["eval"]["ema"]["samples"] == s["eval"]["samples"], s["eval"])
        p = dlrun("eval", TINY, "--checkpoint", run.path, "--json", check=0)
        j = json.loads(p.stdout.strip().splitlines()[-1])
        expect(abs(j["ema"]["accuracy"] - s["eval"]["ema"]["accuracy"]) < 1e-12, (j, s["eval"]))
        expect(abs(j["accuracy"] - s["eval"]["accuracy"]) < 1e-12, (j, s["eval"]))
        from safetensors.torch import load_file
        out = run.file("ema.safetensors")
        dlrun("export", "--checkpoint", run.path, "--weights", "ema", "--output", out, check=0)
        ck = checkpoints(run)[max(checkpoints(run))]
        ema = load(os.path.join(ck, "ema.pt"))
        got = load_file(out)
        expect(set(got) == set(ema) and all(torch.equal(got[k], v) for k, v in ema.items()), "export --weights ema")
        raw = load(os.path.join(ck, "model.pt"))
        expect(ema["features.1.num_batches_tracked"].dtype == torch.int64 and
               torch.equal(ema["features.1.num_batches_tracked"], raw["features.1.num_batches_tracked"]),
               "integer buffers are copied from the model")
        expect(not torch.equal(ema["features.0.weight"], raw["features.0.weight"]), "the average is not the weights")
    with RunDir() as plain:
        train(TINY, plain.path, "train.max_steps=4", "data.workers=0")
        p = dlrun("export", "--checkpoint", plain.path, "--weights", "ema", "--output", plain.file("x.safetensors"))
        expect(p.returncode == 2 and "train.ema_decay" in p.stdout, p.stdout)
        p = dlrun("train", TINY, "--run-dir", plain.file("other"), "train.ema_decay=1")
        expect(p.returncode == 2 and "train.ema_decay" in p.stdout, p.stdout)


if __name__ == "__main__":
    main([test_average_is_pytorchs_averaged_model, test_warmup_start_step_and_every_steps_follow_timm,
          test_resumed_average_is_the_uninterrupted_one, test_evaluated_and_exported])
