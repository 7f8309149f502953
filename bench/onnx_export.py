"""ONNX export of ResNet-50: time and file size, dlrun against PyTorch's own exporter.

    python bench/onnx_export.py --dlrun build/dlrun [--repeat 3] [--json OUT]

Trains a ResNet-50 (1000 classes, synthetic 3x32x32 images) for one step on the CPU, then
times, each `--repeat` times, side by side:
  - `dlrun export --format onnx` (BatchNorm kept, and --fold-batchnorm),
  - `dlrun export --format safetensors` (the weights alone, for scale),
  - `dlrun --version` (the process start every dlrun figure includes),
  - torch.onnx.export (the TorchScript-based exporter, opset 17, dynamic batch) of torchvision's
    resnet50 holding the same weights, in this Python process (its import time excluded).
Every dlrun ONNX file is run once by onnxruntime on a random batch against torchvision's
logits. Reports the median time and the size of each file (docs/benchmarks.md, "ONNX export").
"""
import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CONFIG = """run: {name: onnx-bench, device: cpu, seed: 1, threads: 2}
model: {name: resnet50, in_channels: 3, num_classes: 1000}
data: {name: synthetic, synthetic_shape: [3, 32, 32], synthetic_train_size: 8, synthetic_eval_size: 8,
       batch_size: 8, eval_batch_size: 8, workers: 1}
optim: {name: sgd, lr: 0.01, momentum: 0.9}
train: {max_steps: 1, eval_at_end: false}
log: {progress: none}
"""


def timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    import onnxruntime as ort
    import torch
    import torchvision
    from safetensors.torch import load_file

    work = tempfile.mkdtemp(prefix="dlrun-onnx-bench-")
    try:
        cfg = os.path.join(work, "resnet50.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        run = os.path.join(work, "run")
        subprocess.run([a.dlrun, "train", cfg, "--run-dir", run], check=True, stdout=subprocess.DEVNULL)
        rows = {}
        variants = {"dlrun onnx": ["--format", "onnx"], "dlrun onnx --fold-batchnorm": ["--format", "onnx",
                                                                                       "--fold-batchnorm"],
                    "dlrun safetensors": ["--format", "safetensors"]}
        for name, flags in variants.items():
            out = os.path.join(work, name.replace(" ", "_").replace("-", "") + (".onnx" if "onnx" in name else ".st"))
            times = [timed([a.dlrun, "export", "--checkpoint", run, *flags, "--output", out]) for _ in range(a.repeat)]
            rows[name] = {"median_s": statistics.median(times), "runs_s": times, "bytes": os.path.getsize(out),
                          "file": out}
        times = [timed([a.dlrun, "--version"]) for _ in range(a.repeat)]
        rows["dlrun --version"] = {"median_s": statistics.median(times), "runs_s": times, "bytes": None}

        model = torchvision.models.resnet50()
        model.load_state_dict(load_file(rows["dlrun safetensors"]["file"]))
        model.eval()
        x = torch.randn(4, 3, 32, 32)
        times, size = [], 0
        for _ in range(a.repeat):
            buf = io.BytesIO()
            start = time.perf_counter()
            torch.onnx.export(model, x[:1], buf, dynamo=False, opset_version=17, input_names=["images"],
                              output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
            times.append(time.perf_counter() - start)
            size = len(buf.getvalue())
        rows["torch.onnx.export (TorchScript)"] = {"median_s": statistics.median(times), "runs_s": times,
                                                   "bytes": size}
        with torch.no_grad():
            want = model(x).numpy()
        for name in ("dlrun onnx", "dlrun onnx --fold-batchnorm"):
            got = ort.InferenceSession(rows[name]["file"], providers=["CPUExecutionProvider"]).run(
                ["logits"], {"images": x.numpy()})[0]
            rows[name]["max_relative_error_vs_torchvision"] = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"ResNet-50, 1000 classes, median of {a.repeat}; {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs, torch {torch.__version__}, onnxruntime {ort.__version__}")
        for name, r in rows.items():
            size = f"{r['bytes'] / 1e6:8.1f} MB" if r["bytes"] else " " * 11
            err = r.get("max_relative_error_vs_torchvision")
            print(f"  {name:34s} {r['median_s']:7.2f} s  {size}" + (f"   vs torchvision {err:.1e}" if err else ""))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({k: {kk: vv for kk, vv in v.items() if kk != "file"} for k, v in rows.items()}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
