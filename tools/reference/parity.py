#!/usr/bin/env python3
"""Parity of dlrun with PyTorch in Python on the same work.

For each case (convnet: SGD with Nesterov momentum; convnet_adamw: AdamW, cosine;
convnet_rmsprop: RMSprop as torchvision's recipes set it, warm-up; resnet18: SGD) this runs `dlrun train configs/parity/<case>.yaml --save-init init.pt`, then builds the
same model in PyTorch, loads dlrun's initial weights, feeds the same Fashion-MNIST batches (in
file order, normalized the same way) with the same optimizer — `fused=True`, the ATen kernels
dlrun's optimizers run (RMSprop, which has none: `foreach=True`, the multi-tensor kernels dlrun's
runs) — and learning-rate schedule (PyTorch's own LinearLR /
CosineAnnealingLR), and compares the first 100 training losses: convnet must agree within 1e-4
relative at every step, convnet_adamw, convnet_rmsprop and resnet18 bit for bit (same ATen
kernels, same order of operations).

    tools/reference/parity.py --dlrun build/dlrun [--models convnet convnet_adamw convnet_rmsprop resnet18] [--tol 1e-4]
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


def scheduler(cfg, opt, steps):
    """The PyTorch scheduler that dlrun's sched section describes (warmup = LinearLR)."""
    s, lrs = cfg["sched"], torch.optim.lr_scheduler
    warm = s.get("warmup_steps", 0)
    if s["name"] == "constant" and warm > 0:
        return lrs.LinearLR(opt, start_factor=1.0 / warm, end_factor=1.0, total_iters=warm - 1)
    if s["name"] == "cosine" and warm == 0:
        return lrs.CosineAnnealingLR(opt, T_max=steps, eta_min=s.get("min_lr", 0.0))
    raise SystemExit(f"parity.py: no PyTorch scheduler mapped for sched {s}")


def run_model(name, dlrun, tol, steps):
    cfg_path = os.path.join(ROOT, "configs", "parity", f"{name}.yaml")
    with open(cfg_path) as f:
        cfg = yaml.safe_load(f)
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

    torch.manual_seed(0)
    model = convnet(cfg["model"]["width"]) if cfg["model"]["name"] == "convnet" else resnet18()
    model.load_state_dict(state, strict=True)
    model.train()
    o = cfg["optim"]
    if o["name"] == "sgd":
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
    tol = 0.0 if name in BITWISE else tol

    images = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"))
    b = cfg["data"]["batch_size"]
    worst = 0.0
    for step in range(steps):
        x = torch.from_numpy(images[step * b:(step + 1) * b].copy()).float().div(255.0).unsqueeze(1)
        x = (x - MEAN) / STD
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
    agree = "are bitwise equal" if tol == 0 else f"agree within {tol:g}, worst relative difference {worst:.2e}"
    print(f"{name}: {steps} losses {agree} (first {dl_losses[1]:.5f}, last {dl_losses[steps]:.5f})")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--models", nargs="+", default=["convnet", "convnet_adamw", "convnet_rmsprop", "resnet18"])
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
