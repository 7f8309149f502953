#!/usr/bin/env python3
"""Training throughput of dlrun vs PyTorch in Python on the same work, side by side.

Both train the quickstart convnet (width 32) on 28x28 gray images, batch 128, SGD with
momentum, on the CPU with the same number of threads. dlrun reads the synthetic dataset
through its loader (worker threads, augmentation off); Python feeds pre-made tensors (no data
pipeline at all, which favours Python). Images/s are taken after a warm-up, from dlrun's
metrics.jsonl and from a timed Python loop. The ratio is what to compare across machines.

    bench/compare_throughput.py --dlrun build/dlrun [--steps 200] [--threads 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
from parity import convnet  # noqa: E402  (the same architecture as dlrun's convnet)


def dlrun_ips(dlrun, steps, threads, batch, warm, workers):
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-") as tmp:
        cfg = os.path.join(ROOT, "configs", "synthetic", "convnet.yaml")
        cmd = [dlrun, "train", cfg, "--run-dir", tmp, f"train.max_steps={steps}", f"run.threads={threads}",
               f"data.batch_size={batch}", "data.synthetic_train_size=60000", "model.width=32",
               "log.every_steps=10", "log.progress=none", "train.eval_at_end=false", "train.eval_every_epochs=0",
               "checkpoint.at_end=false", "run.device=cpu", f"data.workers={workers}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        recs = [json.loads(x) for x in open(os.path.join(tmp, "metrics.jsonl")) if '"samples_per_s"' in x]
        recs = [r for r in recs if r["step"] > warm]
        t = [r["time"] for r in recs]
        return (recs[-1]["step"] - recs[0]["step"]) * batch / (t[-1] - t[0])


def python_ips(steps, threads, batch, warm):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = convnet(32)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    for i in range(steps):
        if i == warm:
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return (steps - warm) * batch / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2, help="dlrun loader threads (0: load inline)")
    a = ap.parse_args()
    d = dlrun_ips(a.dlrun, a.steps, a.threads, a.batch, a.warmup, a.workers)
    p = python_ips(a.steps, a.threads, a.batch, a.warmup)
    print(json.dumps({"dlrun_img_per_s": round(d, 1), "pytorch_img_per_s": round(p, 1), "ratio": round(d / p, 3),
                      "threads": a.threads, "workers": a.workers, "batch": a.batch, "steps": a.steps, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
