"""optim.swa_start_epoch: stochastic weight averaging, against PyTorch's torch.optim.swa_utils.

- The average: swa.pt's parameters equal, in float64 to 1e-12, AveragedModel (its default
  average) fed the weights dlrun checkpointed at the end of each epoch from the start epoch.
- The learning rate: every step's rate in metrics.jsonl equals PyTorch's CosineAnnealingLR
  until the start epoch, then SWALR (cos, anneal_epochs) stepped once per epoch.
- BatchNorm: swa.pt's running statistics equal update_bn's over the training set (Fashion-MNIST's
  first 256 images, in order, the evaluation batch size) on the averaged weights.
- Resumed exactly: `dlrun check-resume` with interruptions inside the SWA epochs finds the run
  identical (swa.pt and its state are among what it compares), and names SWA when the resume
  leaves the average out; a stop at the very last step still averages that epoch.
- Evaluated and exported: summary.json, the "swa" event and `dlrun eval` carry the average's
  results, `export --weights swa` writes swa.pt's tensors; exporting an average whose BatchNorm
  statistics are not yet recomputed, --weights swa without SWA, and SWA without swa_lr are exit 2.
"""
import gzip
import json
import os
import warnings

import numpy as np
import torch
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from common import RunDir, dlrun, expect, main, train

warnings.filterwarnings("ignore", message="Detected call of")
FMNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530
CONFIG = """run: {name: swa, device: cpu, seed: 5, deterministic: true, threads: 1}
model: {name: convnet, in_channels: 1, num_classes: 10, width: 4, dtype: float64, fused_conv_bn_relu: false}
data: {name: fashion_mnist, batch_size: 32, eval_batch_size: 64, limit_train: 256, limit_eval: 64, augment: [],
       workers: 0}
optim: {name: sgd, lr: 0.1, momentum: 0.9, swa: {start_epoch: 2, lr: 0.02, anneal_epochs: 2}}
sched: {name: cosine}
train: {epochs: 5, eval_every_epochs: 0, eval_at_end: true}
checkpoint: {every_steps: 0, at_epoch_end: true, keep_last: 0}
log: {every_steps: 1, progress: none, tensorboard: false}
"""
SPE, EPOCHS, START, ANNEAL, SWA_LR = 8, 5, 2, 2, 0.02


def convnet(width):
    """src/models/convnet.cpp's module names, so state dicts match (as tools/reference/parity.py)."""
    def cbr(i, o):
        return [torch.nn.Conv2d(i, o, 3, padding=1, bias=False), torch.nn.BatchNorm2d(o), torch.nn.ReLU()]
    m = torch.nn.Module()
    m.features = torch.nn.Sequential(*cbr(1, width), *cbr(width, width), torch.nn.MaxPool2d(2),
                                     *cbr(width, 2 * width), *cbr(2 * width, 2 * width), torch.nn.MaxPool2d(2),
                                     torch.nn.AdaptiveAvgPool2d(3))
    m.classifier = torch.nn.Sequential(torch.nn.Linear(2 * width * 9, 10))
    m.forward = lambda x: m.classifier(m.features(x).flatten(1))
    return m


def images(n):
    with gzip.open(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"), "rb") as f:
        raw = f.read()
    x = np.frombuffer(raw, dtype=np.uint8, offset=16)[:n * 784].reshape(n, 1, 28, 28)
    return x


def load(path):
    return torch.load(path, weights_only=True)


def write_config(run):
    path = run.file("swa.yaml")
    with open(path, "w") as f:
        f.write(CONFIG)
    return path


def close(a, b, tol=1e-12):
    return (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def test_average_lr_and_batchnorm_are_pytorchs():
    with RunDir() as run:
        cfg = write_config(run)
        train(cfg, run.file("r"))
        r = lambda *p: os.path.join(run.file("r"), *p)  # noqa: E731
        steps = sorted(int(n[5:]) for n in os.listdir(r("checkpoints")) if n.startswith("step-") and n[5:].isdigit())
        expect(steps == [SPE * (e + 1) for e in range(EPOCHS)], steps)
        # The average: AveragedModel's default over the epoch ends from START on.
        final = load(os.path.join(r("checkpoints"), f"step-{SPE * EPOCHS:08d}", "swa.pt"))
        model = convnet(4).double()
        avg = AveragedModel(model)
        for e in range(START, EPOCHS):
            model.load_state_dict(load(os.path.join(r("checkpoints"), f"step-{SPE * (e + 1):08d}", "model.pt")))
            avg.update_parameters(model)
        for name, p in avg.module.named_parameters():
            expect(close(final[name], p.detach()), f"swa.pt {name} differs from AveragedModel's")
        # BatchNorm: update_bn over the training set, as the evaluation reads it.
        x = torch.from_numpy(images(256).copy()).float().div(255.0)  # float32, normalized, then the model's float64
        batches = [((x - MEAN) / STD)[i:i + 64].double() for i in range(0, 256, 64)]
        ref = convnet(4).double()
        ref.load_state_dict(final)
        update_bn(batches, ref)
        ok = all(close(final[k], v) for k, v in ref.state_dict().items() if "running" in k or "num_batches" in k)
        expect(ok, "swa.pt's BatchNorm statistics are not update_bn's over the training set")
        # The learning rate of every step.
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=SPE * EPOCHS)
        want = []
        swalr = None
        for e in range(EPOCHS):
            if e == START:
                swalr = SWALR(opt, swa_lr=SWA_LR, anneal_epochs=ANNEAL, anneal_strategy="cos")
            for _ in range(SPE):
                want.append(opt.param_groups[0]["lr"])
                if swalr is None:
                    cos.step()
            if swalr is not None:
                swalr.step()
        got = {m["step"]: m["lr"] for m in run_metrics(r("metrics.jsonl")) if "event" not in m and "lr" in m}
        for s, w in enumerate(want, start=1):
            expect(abs(got[s] - w) <= 1e-12 * w, f"step {s}: lr {got[s]!r}, PyTorch {w!r}")
        # Reported: the event, summary.json, `dlrun eval`, the export.
        events = [m for m in run_metrics(r("metrics.jsonl")) if m.get("event") == "swa"]
        expect(len(events) == 1 and events[0]["step"] == SPE * EPOCHS, events)
        s = json.load(open(r("summary.json")))
        expect(s["swa"]["updates"] == EPOCHS - START and s["swa"]["bn_updates"] == EPOCHS - START, s["swa"])
        expect(s["eval"]["swa"]["accuracy"] == events[0]["accuracy"], (s["eval"], events))
        p = dlrun("eval", cfg, "--checkpoint", r(), "--json", check=0)
        j = json.loads(p.stdout.strip().splitlines()[-1])
        expect(abs(j["swa"]["accuracy"] - s["eval"]["swa"]["accuracy"]) < 1e-12, (j, s["eval"]))
        from safetensors.torch import load_file
        out = run.file("swa.safetensors")
        dlrun("export", "--checkpoint", r(), "--weights", "swa", "--output", out, check=0)
        got_t = load_file(out)
        expect(set(got_t) == set(final) and all(torch.equal(got_t[k], v) for k, v in final.items()), "export --weights swa")
        p = dlrun("export", "--checkpoint", os.path.join(r("checkpoints"), f"step-{SPE * 3:08d}"),
                  "--weights", "swa", "--output", run.file("early.safetensors"))
        expect(p.returncode == 2 and "BatchNorm statistics" in p.stdout, p.stdout)


def run_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_resumed_average_is_the_uninterrupted_one():
    with RunDir() as run:
        cfg = write_config(run)
        p = dlrun("check-resume", cfg, "--steps", str(SPE * EPOCHS), "--interruptions", "3", "--seed", "7",
                  "--work-dir", run.file("w"), "train.eval_at_end=false", timeout=900)
        expect(p.returncode == 0 and "identical" in p.stdout, p.stdout[-3000:])
        # The same interruptions with the average left out of the resume (seed 7 interrupts at steps
        # 5, 30 and 38; averaging starts at step 17): check-resume must name it.
        p = dlrun("check-resume", cfg, "--steps", str(SPE * EPOCHS), "--interruptions", "3", "--seed", "7",
                  "--work-dir", run.file("f"), "train.eval_at_end=false", "--json",
                  env={"DLRUN_FAULT": "forget_on_resume:swa"}, timeout=900)
        r = json.loads(p.stdout.strip().splitlines()[-1])
        expect(p.returncode == 1 and "SWA" in r["differing_state"] and r["first_difference_step"] is None, r)


def test_a_stop_at_the_last_step_still_averages_that_epoch():
    """A SIGTERM during the last step saves it before the epoch end's update; the resumed run (its
    loop already done) must still average that epoch before update_bn."""
    with RunDir() as run:
        cfg = write_config(run)
        quick = ["train.eval_at_end=false", "checkpoint.at_epoch_end=false"]
        train(cfg, run.file("a"), *quick)
        train(cfg, run.file("b"), *quick, env={"DLRUN_FAULT": f"signal_at_step:{SPE * EPOCHS}"}, check=75)
        train(cfg, run.file("b"), *quick)
        a = json.load(open(run.file("a", "summary.json")))["swa"]
        b = json.load(open(run.file("b", "summary.json")))["swa"]
        expect(a["updates"] == EPOCHS - START and a == b, f"uninterrupted {a}, stopped at the last step {b}")


def test_refusals():
    with RunDir() as run:
        cfg = write_config(run)
        p = dlrun("train", cfg, "--run-dir", run.file("a"), "optim.swa_lr=0")
        expect(p.returncode == 2 and "optim.swa_lr" in p.stdout, p.stdout)
        p = dlrun("train", cfg, "--run-dir", run.file("b"), "optim.swa.start_epoch=5")
        expect(p.returncode == 2 and "optim.swa_start_epoch" in p.stdout, p.stdout)
        train(cfg, run.file("c"), "optim.swa_start_epoch=0", "train.epochs=1")
        p = dlrun("export", "--checkpoint", run.file("c"), "--weights", "swa", "--output", run.file("x.safetensors"))
        expect(p.returncode == 2 and "optim.swa_start_epoch" in p.stdout, p.stdout)


if __name__ == "__main__":
    main([test_average_lr_and_batchnorm_are_pytorchs, test_resumed_average_is_the_uninterrupted_one,
          test_a_stop_at_the_last_step_still_averages_that_epoch, test_refusals])
