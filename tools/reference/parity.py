#!/usr/bin/env python3
"""Parity of dlrun with PyTorch in Python on the same work.

For each case (convnet: SGD with Nesterov momentum; convnet_adamw: AdamW, cosine;
convnet_rmsprop: RMSprop as torchvision's recipes set it, warm-up; resnet18: SGD; in float64
against timm's optimizers: convnet_rmsprop_tf, convnet_lamb with layer decay, convnet_lars) this
runs `dlrun train configs/parity/<case>.yaml --save-init init.pt`, then builds the
same model in PyTorch, loads dlrun's initial weights, feeds the same Fashion-MNIST batches (in
file order, normalized the same way) with the same optimizer — `fused=True`, the ATen kernels
dlrun's optimizers run (RMSprop, which has none: `foreach=True`, the multi-tensor kernels dlrun's
runs) — and learning-rate schedule (PyTorch's own LinearLR /
CosineAnnealingLR), and compares the first 100 training losses: convnet must agree within 1e-4
relative at every step, convnet_adamw, convnet_rmsprop and resnet18 bit for bit (same ATen
kernels, same order of operations). The float64 cases (model.dtype: float64) take timm's
optimizer over the parameter groups `dlrun info CONFIG --json` lists (each group's weight decay,
its rate scaled as timm's layer decay scales it) and run the config's own steps (20): every loss
within 1e-12 relative, and every parameter of dlrun's last checkpoint within 1e-12 (relative to the
tensor's largest value) of timm's.

    tools/reference/parity.py --dlrun build/dlrun [--models convnet ... convnet_lars] [--tol 1e-4]
"""
import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FMNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # dlrun's Fashion-MNIST normalization defaults


def read_idx(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def convnet(width, in_channels=1, num_classes=10):
    """Mirror of src/models/convnet.cpp (same module names, so state dicts match)."""
    def cbr(i, o):
        return [torch.nn.Conv2d(i, o, 3, padding=1, bias=False), torch.nn.BatchNorm2d(o), torch.nn.ReLU(inplace=True)]
    w = width
    m = torch.nn.Module()
    m.features = torch.nn.Sequential(*cbr(in_channels, w), *cbr(w, w), torch.nn.MaxPool2d(2),
                                     *cbr(w, 2 * w), *cbr(2 * w, 2 * w), torch.nn.MaxPool2d(2),
                                     torch.nn.AdaptiveAvgPool2d(3))
    m.classifier = torch.nn.Sequential(torch.nn.Linear(2 * w * 9, num_classes))
    m.forward = lambda x: m.classifier(m.features(x).flatten(1))
    return m


def resnet18(in_channels=1, num_classes=10):
    m = torchvision.models.resnet18(num_classes=num_classes)
    m.conv1 = torch.nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    return m


# Models whose losses must equal PyTorch's exactly (tolerance 0), not within --tol.
BITWISE = {"resnet18", "convnet_adamw", "convnet_rmsprop"}
F64_TOL = 1e-12  # the float64 cases against timm: losses and final parameters
ALL = ["convnet", "convnet_adamw", "convnet_rmsprop", "resnet18", "convnet_rmsprop_tf", "convnet_lamb", "convnet_lars"]


def scheduler(cfg, opt, steps):
    """The PyTorch scheduler that dlrun's sched section describes (warmup = LinearLR)."""
    s, lrs = cfg["sched"], torch.optim.lr_scheduler
    warm = s.get("warmup_steps", 0)
    if s["name"] == "constant" and warm > 0:
        return lrs.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0, total_iters=warm - 1)
    if s["name"] == "cosine" and warm == 0:
        return lrs.CosineAnnealingLR(opt, T_max=steps, eta_min=s.get("min_lr", 0.0))
    raise SystemExit(f"parity.py: no PyTorch scheduler mapped for sched {s}")


def timm_optimizer(o, model, groups):
    """timm's optimizer for dlrun's optim section, over the groups dlrun lists (names, weight decay,
    rate scale) — timm's foreach paths, as dlrun's multi-tensor kernels."""
    import timm.optim
    params = dict(model.named_parameters())
    pg = [{"params": [params[n] for n in g["params"]], "weight_decay": g["weight_decay"],
           "lr": o["lr"] * g["lr_scale"]} for g in groups]
    if sorted(n for g in groups for n in g["params"]) != sorted(params):
        raise SystemExit("parity.py: dlrun's parameter groups do not cover the model's parameters")
    if o["name"] == "rmsprop_tf":
        return timm.optim.RMSpropTF(pg, lr=o["lr"], alpha=o["alpha"], eps=o["eps"], momentum=o["momentum"],
                                    centered=o.get("centered", False), foreach=True)
    if o["name"] == "lamb":
        return timm.optim.Lamb(pg, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                               max_grad_norm=o.get("max_grad_norm", 1.0) or None,
                               trust_clip=o.get("trust_clip", False), always_adapt=o.get("always_adapt", False),
                               foreach=True)
    if o["name"] == "lars":
        return timm.optim.Lars(pg, lr=o["lr"], momentum=o["momentum"], nesterov=o.get("nesterov", False),
                               trust_coeff=o.get("trust_coeff", 0.001), eps=o["eps"],
                               trust_clip=o.get("trust_clip", False), always_adapt=o.get("always_adapt", False),
                               foreach=True)
    raise SystemExit(f"parity.py: no timm optimizer mapped for {o['name']}")


def run_model(name, dlrun, tol, steps):
    cfg_path = os.path.join(ROOT, "configs", "parity", f"{name}.yaml")
    with open(cfg_path) as f:
        cfg = yaml.safe_load(f)
    f64 = cfg["model"].get("dtype") == "float64"
    if f64:
        steps = cfg["train"]["max_steps"]
    with tempfile.TemporaryDirectory(prefix=f"dlrun-parity-{name}-") as tmp:
        init = os.path.join(tmp, "init.pt")
        p = subprocess.run([dlrun, "train", cfg_path, "--run-dir", tmp, "--save-init", init, f"train.max_steps={steps}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            print(p.stdout)
            raise SystemExit(f"{name}: dlrun exited {p.returncode}")
        dl_losses = {}
        with open(os.path.join(tmp, "metrics.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if "loss" in r and "event" not in r:
                    dl_losses[r["step"]] = r["loss"]
        state = torch.load(init)
        final = None
        if f64:
            with open(os.path.join(tmp, "checkpoints", "LATEST")) as f:
                final = torch.load(os.path.join(tmp, "checkpoints", f.read().strip(), "model.pt"))
            info = subprocess.run([dlrun, "info", cfg_path, "--json"], stdout=subprocess.PIPE, check=True, text=True)
            groups = json.loads(info.stdout)["optimizer"]["groups"]

    torch.manual_seed(0)
    model = convnet(cfg["model"]["width"]) if cfg["model"]["name"] == "convnet" else resnet18()
    if f64:
        model = model.double()
    model.load_state_dict(state, strict=True)
    model.train()
    o = cfg["optim"]
    if f64:
        opt = timm_optimizer(o, model, groups)
    elif o["name"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"], nesterov=o.get("nesterov", False),
                              weight_decay=o["weight_decay"], fused=True)
    elif o["name"] == "rmsprop":
        opt = torch.optim.RMSprop(model.parameters(), lr=o["lr"], alpha=o["alpha"], eps=o["eps"],
                                  momentum=o["momentum"], weight_decay=o["weight_decay"],
                                  centered=o.get("centered", False), foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                weight_decay=o["weight_decay"], fused=True)
    sched = scheduler(cfg, opt, steps)
    tol = 0.0 if name in BITWISE else F64_TOL if f64 else tol

    images = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"))
    b = cfg["data"]["batch_size"]
    worst = 0.0
    for step in range(steps):
        x = torch.from_numpy(images[step * b:(step + 1) * b].copy()).float().div(255.0).unsqueeze(1)
        x = (x - MEAN) / STD
        if f64:
            x = x.double()  # dlrun's loader gives float32; the float64 model converts it
        y = torch.from_numpy(labels[step * b:(step + 1) * b].astype(np.int64))
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        ref = loss.item()
        got = dl_losses.get(step + 1)
        if got is None:
            raise SystemExit(f"{name}: dlrun logged no loss for step {step + 1}")
        rel = abs(got - ref) / max(abs(ref), 1e-12)
        if os.environ.get("DLRUN_PARITY_VERBOSE"):
            print(f"{name} step {step + 1}: dlrun {got!r} pytorch {ref!r} rel {rel:.2e}")
        worst = max(worst, rel)
        if rel > tol:
            raise SystemExit(f"{name}: step {step + 1}: dlrun loss {got!r} vs PyTorch {ref!r} (relative {rel:.2e} > {tol})")
    if final is not None:
        py = model.state_dict()
        for k, v in final.items():
            scale = max(py[k].abs().max().item(), 1e-300) if py[k].numel() else 1.0
            diff = (v.double() - py[k].double()).abs().max().item() / scale if v.numel() else 0.0
            if not diff <= F64_TOL:
                raise SystemExit(f"{name}: after {steps} steps {k} differs from timm's by {diff:.2e} relative (> {F64_TOL})")
        print(f"{name}: after {steps} steps all {len(final)} tensors within {F64_TOL:g} of timm's")
    agree = "are bitwise equal" if tol == 0 else f"agree within {tol:g}, worst relative difference {worst:.2e}"
    print(f"{name}: {steps} losses {agree} (first {dl_losses[1]:.5f}, last {dl_losses[steps]:.5f})")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--models", nargs="+", default=ALL)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    if not os.path.isdir(FMNIST):
        print(f"FAIL: {FMNIST} missing: install Debian's dataset-fashion-mnist (scripts/setup.sh does)")
        return 1
    torch.set_num_threads(max(1, torch.get_num_threads()))
    for m in a.models:
        run_model(m, a.dlrun, a.tol, a.steps)
    print("parity: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
