#!/usr/bin/env python3
"""Mixed precision, channels_last and CUDA graphs on one GPU: dlrun next to the same model in
PyTorch eager Python, in the same run (docs/benchmarks.md, "GPU fast paths").

Two workloads, synthetic data resident on the GPU (no loader in either measurement):
  resnet50, 224x224 RGB, batch 256        (compute-bound)
  resnet18, 28x28 gray, batch 512, ImageNet stem   (launch-bound: where CUDA graphs pay)
Variants: fp32 / bf16 / fp16 x NCHW / channels_last, and for dlrun also x cuda_graphs. dlrun's
images/s is the mean of its metrics records after a warm-up; Python's is a timed loop (SGD with
momentum, fused=True as dlrun's; autocast and GradScaler for fp16; cuDNN autotuning and TF32
on as dlrun's defaults). Prints a TSV (and writes it with --out).

  bench/gpu_amp.py --dlrun build-gpu/dlrun [--steps 60] [--out results.tsv] [--only resnet18]
"""
import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

from runlog import mean_samples_per_s  # bench/, next to this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKLOADS = {
    "resnet50": {"name": "resnet50", "channels": 3, "side": 224, "batch": 256},
    "resnet18": {"name": "resnet18", "channels": 1, "side": 28, "batch": 512},
}


# ---- the same networks in PyTorch (torchvision's ResNet v1.5 layout; torchvision itself may
# be absent on the GPU machine) -----------------------------------------------------------

class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or cin != planes:
            self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + idt)


class Bottle(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.down = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        return torch.relu(self.bn3(self.conv3(out)) + idt)


def resnet(name, in_channels, num_classes=10):
    block, counts = {"resnet18": (Basic, [2, 2, 2, 2]), "resnet50": (Bottle, [3, 4, 6, 3])}[name]
    layers = [nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, (planes, n) in enumerate(zip([64, 128, 256, 512], counts)):
        for b in range(n):
            layers.append(block(cin, planes, 2 if (i > 0 and b == 0) else 1))
            cin = planes * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def python_ips(w, precision, channels_last, steps, warm):
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    dev = torch.device("cuda")
    model = resnet(w["name"], w["channels"]).to(dev)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    x = torch.randn(w["batch"], w["channels"], w["side"], w["side"], device=dev).to(memory_format=fmt)
    y = torch.randint(0, 10, (w["batch"],), device=dev)
    for i in range(steps):
        if i == warm:
            torch.cuda.synchronize()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    torch.cuda.synchronize()
    return (steps - warm) * w["batch"] / (time.perf_counter() - start)


def dlrun_ips(dlrun, w, precision, channels_last, graphs, steps, warm, log_dir):
    cfg = os.path.join(ROOT, "configs", "synthetic", "resnet50.yaml")
    c, s = w["channels"], w["side"]
    amp = ["amp.enabled=false"] if precision == "fp32" else ["amp.enabled=true", f"amp.dtype={precision}"]
    with tempfile.TemporaryDirectory(prefix="dlrun-gpu-amp-") as tmp:
        cmd = [dlrun, "train", cfg, "--run-dir", os.path.join(tmp, "run"), "run.device=cuda",
               f"model.name={w['name']}", f"model.in_channels={c}", f"data.synthetic_shape=[{c},{s},{s}]",
               f"data.batch_size={w['batch']}", f"data.synthetic_train_size={w['batch'] * 8}",
               "data.device_resident=true", f"train.max_steps={steps}", "log.every_steps=10", "log.progress=none",
               "log.tensorboard=false",
               # The PyTorch side's optimizer: SGD lr 0.01, momentum 0.9, no weight decay, constant.
               "optim.name=sgd", "optim.lr=0.01", "optim.momentum=0.9", "optim.nesterov=false",
               "optim.weight_decay=0", "sched.name=constant",
               f"model.channels_last={'true' if channels_last else 'false'}",
               f"train.cuda_graphs={'true' if graphs else 'false'}", "checkpoint.every_minutes=0", *amp]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        name = f"{w['name']}-{precision}-{'nhwc' if channels_last else 'nchw'}-{'graphs' if graphs else 'eager'}"
        with open(os.path.join(log_dir, f"dlrun-{name}.log"), "w") as f:
            f.write(p.stdout)
        if p.returncode != 0:
            return float("nan"), p.stdout.strip().splitlines()[-1:] or ["?"]
        captured = "is replayed from now on" in p.stdout
        return mean_samples_per_s(os.path.join(tmp, "run"), warm), ["captured" if captured else "eager"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="", help="one workload (resnet50 or resnet18)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_amp.py needs a CUDA device")
    log_dir = os.path.dirname(os.path.abspath(a.out)) if a.out else tempfile.mkdtemp()
    warm = a.steps // 3
    lines = ["workload\tprecision\tlayout\tpytorch_eager_img_s\tdlrun_eager_img_s\tdlrun_graphs_img_s\t"
             "eager_ratio\tgraphs_ratio\tgraphs_state"]
    for wname, w in WORKLOADS.items():
        if a.only and wname != a.only:
            continue
        for precision in ("fp32", "bf16", "fp16"):
            for cl in (False, True):
                py = python_ips(w, precision, cl, a.steps, warm)
                # Give back what PyTorch's caching allocator still holds (tens of GB for resnet50
                # fp32), or dlrun's runs would start with that much less free memory.
                gc.collect()
                torch.cuda.empty_cache()
                eager, _ = dlrun_ips(a.dlrun, w, precision, cl, False, a.steps, warm, log_dir)
                graphs, state = dlrun_ips(a.dlrun, w, precision, cl, True, a.steps, warm, log_dir)
                lines.append(f"{wname}\t{precision}\t{'nhwc' if cl else 'nchw'}\t{py:.0f}\t{eager:.0f}\t{graphs:.0f}\t"
                             f"{eager / py:.2f}\t{graphs / py:.2f}\t{state[0]}")
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
