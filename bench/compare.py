#!/usr/bin/env python3
"""dlrun next to the same training in PyTorch (Python, eager), on identical work, side by side.

Each workload is trained by `dlrun train` and by a PyTorch program (this file, --side torch:
the same network, batch, optimizer, dtype, memory format and thread count; torch's DataLoader
over the same files where dlrun uses its loader). Runs alternate (dlrun, PyTorch, dlrun, ...),
each in a fresh process; the table gives the median images/s of the repetitions, the ratio,
where a step's time goes (data wait, forward, backward, optimizer: ms per step, medians) and
the peak memory (resident set on the CPU; the CUDA caching allocator's peak on a GPU).

Workloads (--workloads, comma-separated; `cpu` and `gpu` name the groups):
  cpu-quickstart     the quickstart's convnet as it ships (width 16, channels_last), Fashion-MNIST
                     files, batch 128, flip, loaders on
  cpu-quickstart-step  the same with the data resident in memory on both sides (the step alone)
  cpu-convnet        the convnet at width 32, NCHW (the quickstart before 2026-11-24), loaders on
  cpu-convnet-step   the same with the data resident in memory on both sides (the step alone)
  cpu-resnet18       torchvision's resnet18 (1 channel), 28x28 Fashion-MNIST, batch 128, loaders on
  cpu-resnet18-step  the same, data resident
  cpu-quickstart-ddp1  cpu-quickstart-step as a DDP world of one (gloo): dlrun through
                     scripts/dlrun-launch, PyTorch in DistributedDataParallel; the cost of the
                     gradient all-reduce machinery over the plain step (not in the `cpu` group)
  pipeline           the input pipeline alone on generated JPEGs (random-resized crop 224, flip):
                     `dlrun bench data` vs torchvision ImageFolder + DataLoader (PIL), 1..N workers
  pipeline-recipe    the same with the augmentation of torchvision's ImageNet recipes: random-resized
                     crop 224, flip, TrivialAugmentWide (bilinear), normalize, random erasing (p 0.1),
                     as references/classification/presets.py builds it (v1 transforms on PIL images)
  gpu-resnet18       resnet18 28x28 batch 512, bf16, channels_last, data on the GPU (+ CUDA graphs)
  gpu-resnet50       resnet50 224x224 synthetic batch 256, bf16, channels_last, data on the GPU
  gpu-resnet50-jpeg  resnet50 on the generated JPEG folder, loaders on (input pipeline included)
  gpu-resnet50-ddp1  gpu-resnet50 as a DDP world of one (NCCL), as cpu-quickstart-ddp1
  zoo-NAME           the smallest member of each family of the zoo (group `zoo`: resnet18,
                     mobilenet_v3_small, efficientnet_b0, regnet_x_400mf, convnext_tiny, vit_b_32,
                     swin_t): torchvision's model, 3x64x64 synthetic images resident in memory,
                     batch 32, on the CPU, against PyTorch eager and torch.compile (mode "default",
                     the optimizer step eager; its compile falls in the warm-up, which is not counted)

The step-time breakdown counts the gradient all-reduce of DDP in the backward on both sides
(both overlap it with the backward, bucket by bucket). With CUDA graphs dlrun replays the whole
step as one graph and has no per-phase times ("n/a").

A workload that fails on one side is reported as failed and the others still run; the exit code
is then 1.

  bench/compare.py --dlrun build/dlrun --workloads cpu [--reps 3] [--steps 150]
                   [--fmnist DIR] [--append docs/benchmarks.md]
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FMNIST = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist; --fmnist for another place
MEAN, STD = 0.2860, 0.3530  # dlrun's Fashion-MNIST normalisation

# name: what both sides train. data: fmnist (the idx files), fmnist-resident (all of it in
# memory, batches gathered by index), synthetic (random, on the device), jpeg (an image folder).
WORKLOADS = {
    "cpu-quickstart": dict(model="convnet", width=16, channels_last=True, batch=128, data="fmnist", device="cpu",
                           augment=["flip"]),
    "cpu-quickstart-step": dict(model="convnet", width=16, channels_last=True, batch=128, data="fmnist-resident",
                                device="cpu", augment=[]),
    "cpu-convnet": dict(model="convnet", batch=128, data="fmnist", device="cpu", augment=["flip"]),
    "cpu-convnet-step": dict(model="convnet", batch=128, data="fmnist-resident", device="cpu", augment=[]),
    "cpu-resnet18": dict(model="resnet18", batch=128, data="fmnist", device="cpu", augment=["flip"]),
    "cpu-resnet18-step": dict(model="resnet18", batch=128, data="fmnist-resident", device="cpu", augment=[]),
    "cpu-quickstart-ddp1": dict(model="convnet", width=16, channels_last=True, batch=128, data="fmnist-resident",
                                device="cpu", augment=[], ddp=True),
    "gpu-resnet18": dict(model="resnet18", batch=512, data="fmnist-resident", device="cuda", augment=[],
                         amp="bf16", channels_last=True, graphs=True),
    "gpu-resnet50": dict(model="resnet50", batch=256, data="synthetic", side=224, channels=3, device="cuda",
                         augment=[], amp="bf16", channels_last=True),
    "gpu-resnet50-jpeg": dict(model="resnet50", batch=256, data="jpeg", side=224, channels=3, device="cuda",
                              augment=["resized_crop", "flip"], amp="bf16", channels_last=True),
    "gpu-resnet50-ddp1": dict(model="resnet50", batch=256, data="synthetic", side=224, channels=3, device="cuda",
                              augment=[], amp="bf16", channels_last=True, ddp=True),
}
# Each family's smallest member (issue 50's table): torchvision's defaults for dropout (0.2 in the
# mobile families' classifiers) and stochastic depth on both sides.
ZOO = {"resnet18": {}, "mobilenet_v3_small": {"dropout": 0.2}, "efficientnet_b0": {"dropout": 0.2},
       "regnet_x_400mf": {}, "convnext_tiny": {}, "vit_b_32": {"image_size": 64}, "swin_t": {}}
for _name, _extra in ZOO.items():
    WORKLOADS["zoo-" + _name] = dict(model=_name, batch=32, data="synthetic", side=64, channels=3, device="cpu",
                                     augment=[], zoo=_extra)
PIPELINES = ("pipeline", "pipeline-recipe")
GROUPS = {"cpu": [k for k in WORKLOADS if k.startswith("cpu-") and not k.endswith("-ddp1")] + ["pipeline"],
          "gpu": [k for k in WORKLOADS if k.startswith("gpu-")],
          "zoo": [k for k in WORKLOADS if k.startswith("zoo-")]}


# ---------------------------------------------------------------- the dlrun side

def dlrun_cmd(a, w, run_dir, steps, jpeg_root):
    model = ["model.name=" + w["model"], "model.num_classes=10",
             f"model.in_channels={w.get('channels', 1)}", "model.stem=imagenet"]
    if w["model"] == "convnet":
        model = ["model.name=convnet", f"model.width={w.get('width', 32)}", "model.in_channels=1",
                 "model.num_classes=10"]
    if "zoo" in w:  # torchvision's model as it is built
        model = ["model.name=" + w["model"], "model.num_classes=10", f"model.in_channels={w['channels']}",
                 *[f"model.{k}={v}" for k, v in w["zoo"].items()]]
    if w["data"] in ("fmnist", "fmnist-resident"):
        data = ["data.name=fashion_mnist", f"data.root={a.fmnist}", f"data.workers={a.workers}",
                f"data.device_resident={'true' if w['data'] == 'fmnist-resident' else 'false'}"]
    elif w["data"] == "synthetic":
        c, s = w["channels"], w["side"]
        data = ["data.name=synthetic", f"data.synthetic_shape=[{c},{s},{s}]",
                f"data.synthetic_train_size={w['batch'] * 8}", "data.device_resident=true"]
    else:
        data = ["data.name=image_folder", f"data.root={jpeg_root}", f"data.image_size={w['side']}",
                f"data.workers={a.gpu_workers}", "data.normalize=true"]
    aug = "[" + ",".join(w["augment"]) + "]"
    amp = ["amp.enabled=false"] if not w.get("amp") else ["amp.enabled=true", f"amp.dtype={w['amp']}"]
    launch, dist = [], []
    if w.get("ddp"):  # a world of one through the launcher, as torchrun would start it
        launch = [sys.executable, os.path.join(ROOT, "scripts", "dlrun-launch"), "--nproc-per-node", "1", "--"]
        dist = ["dist.backend=" + ("nccl" if w["device"] == "cuda" else "gloo")]
    return [*launch, a.dlrun, "train", os.path.join(ROOT, "configs", "quickstart.yaml"), "--run-dir", run_dir,
            f"run.device={w['device']}", f"run.threads={a.threads}", *model, *data, f"data.augment={aug}",
            f"data.batch_size={w['batch']}", "optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9",
            "optim.nesterov=false", "optim.weight_decay=0", "sched.name=constant", f"train.max_steps={steps}",
            "train.eval_every_epochs=0", "train.eval_at_end=false", "checkpoint.every_minutes=0",
            "checkpoint.at_end=false", "log.every_steps=10", "log.progress=none", "log.tensorboard=false",
            f"model.channels_last={'true' if w.get('channels_last') else 'false'}",
            f"train.cuda_graphs={'true' if w.get('graphs') else 'false'}", *amp, *dist]


def run_measured(cmd, log_path, env=None):
    """Run `cmd`; return (exit code, peak resident set in MiB) -- the child's own, from wait4."""
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss / 1024.0


def dlrun_side(a, w, steps, warm, jpeg_root, log_path):
    with tempfile.TemporaryDirectory(prefix="dlrun-compare-") as tmp:
        run_dir = os.path.join(tmp, "run")
        rc, rss = run_measured(dlrun_cmd(a, w, run_dir, steps, jpeg_root), log_path)
        if rc != 0:
            raise SystemExit(f"dlrun failed ({rc}); see {log_path}")
        recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"samples_per_s"' in l]
        recs = [r for r in recs if "event" not in r and r["step"] > warm]
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        n = recs[-1]["step"] - warm
        # A phase no record has (forward/backward/optimizer under CUDA graphs) is None: not measured.
        ms = {k: 1000 * sum(r.get(k + "_s", 0.0) for r in recs) / n if any(k + "_s" in r for r in recs) else None
              for k in ("data_wait", "forward", "backward", "optimizer")}
        t = [r["time"] for r in recs]
        ips = (recs[-1]["step"] - recs[0]["step"]) * w["batch"] / (t[-1] - t[0])
        peak = summary["peak_cuda_memory_mb"]["allocated"] if summary.get("peak_cuda_memory_mb") else rss
        return {"ips": ips, "ms": ms, "peak_mb": peak}


# ---------------------------------------------------------------- the PyTorch side

def torch_side_main(args):
    """The PyTorch program: train `w` for `steps` steps and print one JSON line."""
    import numpy as np
    import torch
    w = json.loads(args.workload)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device("cuda" if w["device"] == "cuda" else "cpu")
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
    if "zoo" in w:
        import torchvision
        model = getattr(torchvision.models, w["model"])(num_classes=10, **w["zoo"])
    elif w["model"] == "convnet":
        from parity import convnet
        model = convnet(w.get("width", 32))
    elif w["model"] == "resnet18" and w.get("channels", 1) == 1:
        from parity import resnet18
        model = resnet18()
    else:
        sys.path.insert(0, HERE)
        from gpu_amp import resnet
        model = resnet(w["model"], w.get("channels", 1))
    fmt = torch.channels_last if w.get("channels_last") else torch.contiguous_format
    model = model.to(dev).to(memory_format=fmt).train()
    if w.get("ddp"):  # a world of one: DistributedDataParallel's defaults (25 MiB buckets), as dlrun's
        import socket
        import torch.distributed as tdist
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tdist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                 world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, **({"fused": True} if cuda else {}))
    if args.compile:  # the model compiled (forward and backward); the optimizer step stays eager
        model = torch.compile(model)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(w.get("amp") or "")
    batch = w["batch"]

    def batches():
        if w["data"] in ("fmnist", "fmnist-resident"):
            from parity import read_idx
            x = torch.from_numpy(read_idx(os.path.join(args.fmnist, "train-images-idx3-ubyte.gz")).copy())
            y = torch.from_numpy(read_idx(os.path.join(args.fmnist, "train-labels-idx1-ubyte.gz")).astype(np.int64))
            if w["data"] == "fmnist-resident":  # the whole set normalised in memory, gathered by index
                xs = ((x.float() / 255 - MEAN) / STD).unsqueeze(1).to(dev)
                ys = y.to(dev)
                while True:
                    perm = torch.randperm(len(ys), device=dev)
                    for i in range(0, len(ys) - batch + 1, batch):
                        idx = perm[i:i + batch]
                        yield xs[idx], ys[idx]

            class FmnistSet(torch.utils.data.Dataset):
                def __len__(self):
                    return len(y)

                def __getitem__(self, i):
                    img = (x[i].float() / 255 - MEAN) / STD
                    if "flip" in w["augment"] and torch.rand(()) < 0.5:
                        img = img.flip(-1)
                    return img.unsqueeze(0), y[i]
            ds = FmnistSet()
        elif w["data"] == "synthetic":
            xb = torch.randn(batch, w["channels"], w["side"], w["side"], device=dev)
            yb = torch.randint(0, 10, (batch,), device=dev)
            while True:
                yield xb, yb
        else:
            import torchvision.transforms as T
            from torchvision.datasets import ImageFolder
            ds = ImageFolder(os.path.join(args.jpeg_root, "train"), T.Compose([
                T.RandomResizedCrop(w["side"]), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
        workers = args.workers if w["device"] == "cpu" else args.gpu_workers
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True, num_workers=workers,
                                         pin_memory=cuda, persistent_workers=workers > 0,
                                         prefetch_factor=2 if workers > 0 else None)
        while True:
            for xb, yb in dl:
                yield xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)

    def clock():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def elapsed(a0, b0):
        return a0.elapsed_time(b0) / 1000 if cuda else b0 - a0

    it = batches()
    phases = {"data_wait": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    marks = []
    for i in range(args.steps):
        if i == args.warm:
            if cuda:  # the peak stays the whole run's, as dlrun's summary.json reports it
                torch.cuda.synchronize()
            start = time.perf_counter()
            marks = []
        t0 = time.perf_counter()
        xb, yb = next(it)
        wait = time.perf_counter() - t0
        xb = xb.to(memory_format=fmt)
        c0 = clock()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(xb).float(), yb)
        c1 = clock()
        loss.backward()
        c2 = clock()
        opt.step()
        c3 = clock()
        marks.append((wait, c0, c1, c2, c3))
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    for wait, c0, c1, c2, c3 in marks:
        phases["data_wait"] += wait
        phases["forward"] += elapsed(c0, c1)
        phases["backward"] += elapsed(c1, c2)
        phases["optimizer"] += elapsed(c2, c3)
    n = len(marks)
    out = {"ips": n * batch / seconds, "ms": {k: 1000 * v / n for k, v in phases.items()},
           "peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}
    if w.get("ddp"):
        torch.distributed.destroy_process_group()
    print(json.dumps(out))


def compile_error(log_path):
    """The first line of a failed torch.compile's log that names the error (its exception's)."""
    lines = open(log_path, errors="replace").read().splitlines()
    named = [line for line in lines if "Error:" in line and "warning" not in line]
    return (named[0] if named else (lines[-1] if lines else "no output")).strip()[:160]


def torch_side(a, w, steps, warm, jpeg_root, log_path, compiled=False):
    cmd = [sys.executable, os.path.abspath(__file__), "--side", "torch", "--workload", json.dumps(w),
           *(["--compile"] if compiled else []),
           "--steps", str(steps), "--warm", str(warm), "--threads", str(a.threads), "--workers", str(a.workers),
           "--gpu-workers", str(a.gpu_workers), "--jpeg-root", jpeg_root or "", "--fmnist", a.fmnist]
    rc, rss = run_measured(cmd, log_path)
    lines = open(log_path).read().strip().splitlines()
    if rc != 0 or not lines:
        raise SystemExit(f"the PyTorch side failed ({rc}); see {log_path}")
    r = json.loads(lines[-1])
    if r["peak_mb"] is None:
        r["peak_mb"] = rss
    return r


# ---------------------------------------------------------------- the input pipeline alone

def make_jpegs(root, n, side=320):
    """`n` random-content JPEGs of side x side in 10 class folders (kept between runs)."""
    import numpy as np
    from PIL import Image
    done = os.path.join(root, f".made-{n}-{side}")
    if os.path.exists(done):
        return root
    rng = np.random.default_rng(0)
    for i in range(n):
        d = os.path.join(root, "train", f"class{i % 10}")
        os.makedirs(d, exist_ok=True)
        # Smooth gradients plus noise: compresses like a photograph rather than like noise.
        yy, xx = np.mgrid[0:side, 0:side]
        base = np.stack([(xx * (c + 1) + yy * (3 - c) + i * 7) % 256 for c in range(3)], -1)
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, f"{i:05d}.jpg"), quality=90)
    for split in ("val",):  # an eval split, which dlrun opens too
        d = os.path.join(root, split, "class0")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(np.zeros((side, side, 3), np.uint8)).save(os.path.join(d, "0.jpg"))
    open(done, "w").close()
    return root


def pipeline_rows(a, jpeg_root, log_dir, recipe=False):
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    rows = []
    bilinear = T.InterpolationMode.BILINEAR
    norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    if recipe:  # references/classification/presets.py, ClassificationPresetTrain(auto_augment_policy="ta_wide")
        augment = ["data.augment=[resized_crop,flip,trivial_augment,erase]", "data.erase_p=0.1",
                   "data.policy_interpolation=bilinear"]
        theirs_tf = T.Compose([T.RandomResizedCrop(224, interpolation=bilinear), T.RandomHorizontalFlip(),
                               T.TrivialAugmentWide(interpolation=bilinear), T.PILToTensor(),
                               T.ConvertImageDtype(torch.float), norm, T.RandomErasing(p=0.1)])
    else:
        augment = ["data.augment=[resized_crop,flip]"]
        theirs_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    for workers in sorted({1, a.workers, os.cpu_count() or 1}):
        cmd = [a.dlrun, "bench", "data", os.path.join(ROOT, "configs", "quickstart.yaml"), "data.name=image_folder",
               f"data.root={jpeg_root}", "data.image_size=224", *augment,
               f"data.workers={workers}", "data.batch_size=64", "model.in_channels=3", "--batches", "30",
               "--warmup", "3", "--json"]
        ours_runs, theirs_runs = [], []
        for _ in range(a.reps):  # alternating
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                raise SystemExit(f"dlrun bench data failed:\n{p.stdout}")
            ours_runs.append(json.loads(p.stdout.strip().splitlines()[-1])["images_per_s"])
            ds = ImageFolder(os.path.join(jpeg_root, "train"), theirs_tf)
            dl = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers,
                                             persistent_workers=True, drop_last=True)
            def endless():  # epochs back to back, as dlrun's loader runs them
                while True:
                    yield from dl
            it = endless()
            for _ in range(3):
                next(it)
            start, n = time.perf_counter(), 0
            for _ in range(30):
                n += next(it)[0].shape[0]
            theirs_runs.append(n / (time.perf_counter() - start))
            del it, dl
        ours, theirs = statistics.median(ours_runs), statistics.median(theirs_runs)
        rows.append((workers, ours, theirs))
        print(f"pipeline{'-recipe' if recipe else ''}, {workers} worker(s): dlrun {ours:.0f} img/s, "
              f"torchvision {theirs:.0f} img/s", flush=True)
    return rows


# ---------------------------------------------------------------- the report

def machine(gpu):
    """The CPU, and with `gpu` the GPU, its driver and the CUDA runtime torch was built with."""
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}"
    if gpu:
        import torch
        driver = "?"
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    timeout=30).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            pass
        if torch.cuda.is_available():
            text += f"; GPU {torch.cuda.get_device_name(0)}, driver {driver}, CUDA {torch.version.cuda}"
    return text


def versions():
    import torch
    text = f"torch {torch.__version__}"
    try:
        import torchvision
        text += f", torchvision {torchvision.__version__}"
    except ImportError:
        pass
    return text


def fmt_ms(ms):
    return " / ".join("n/a" if ms[k] is None else f"{ms[k]:.1f}" for k in ("data_wait", "forward", "backward", "optimizer"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", default="", help=argparse.SUPPRESS)
    ap.add_argument("--workload", default="", help=argparse.SUPPRESS)
    ap.add_argument("--warm", type=int, default=20, help=argparse.SUPPRESS)
    ap.add_argument("--jpeg-root", default="", help=argparse.SUPPRESS)
    ap.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--workloads", default="cpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150, help="steps per run (the first 20 are warm-up)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads, both sides")
    ap.add_argument("--workers", type=int, default=2, help="loader workers on the CPU workloads, both sides")
    ap.add_argument("--gpu-workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--jpegs", type=int, default=2560, help="images in the generated JPEG folder")
    ap.add_argument("--out", default="", help="directory for the logs (default: a temporary one)")
    ap.add_argument("--append", default="", help="append the report to this Markdown file")
    ap.add_argument("--fmnist", default=FMNIST, help="directory of the Fashion-MNIST idx files (both sides)")
    a = ap.parse_args()
    if a.side == "torch":
        return torch_side_main(a)

    names = []
    for n in a.workloads.split(","):
        names += GROUPS.get(n, [n])
    for n in names:
        if n not in WORKLOADS and n not in PIPELINES:
            raise SystemExit(f"unknown workload {n}; known: {', '.join(list(WORKLOADS) + list(PIPELINES))}")
    warm = 20
    if a.steps < warm + 20:
        raise SystemExit(f"--steps {a.steps}: at least {warm + 20} (the first {warm} are warm-up; the rate needs two "
                         "records after them, one every 10 steps)")
    log_dir = a.out or tempfile.mkdtemp(prefix="dlrun-compare-logs-")
    os.makedirs(log_dir, exist_ok=True)
    jpeg_root = ""
    if any(n in PIPELINES or WORKLOADS[n]["data"] == "jpeg" for n in names):
        jpeg_root = make_jpegs(os.path.join(tempfile.gettempdir(), "dlrun-compare-jpegs"), a.jpegs)
    rows, zoo_rows, pipeline, recipe, failed = [], [], [], [], []

    def med(runs):
        return {"ips": statistics.median(x["ips"] for x in runs),
                "ms": {k: None if runs[0]["ms"][k] is None else statistics.median(x["ms"][k] for x in runs)
                       for k in runs[0]["ms"]},
                "peak_mb": statistics.median(x["peak_mb"] for x in runs)}

    for n in names:
        try:  # one workload failing (a missing data set, a side that cannot start) leaves the others
            if n in PIPELINES:
                if n == "pipeline":
                    pipeline = pipeline_rows(a, jpeg_root, log_dir)
                else:
                    recipe = pipeline_rows(a, jpeg_root, log_dir, recipe=True)
                continue
            w = WORKLOADS[n]
            root = jpeg_root if w["data"] == "jpeg" else ""
            ours, theirs, compiled = [], [], []
            if "zoo" in w:  # dlrun, PyTorch eager, torch.compile, alternating
                for r in range(a.reps):
                    ours.append(dlrun_side(a, w, a.steps, warm, "", os.path.join(log_dir, f"{n}-dlrun-{r}.log")))
                    theirs.append(torch_side(a, w, a.steps, warm, "", os.path.join(log_dir, f"{n}-torch-{r}.log")))
                    log = os.path.join(log_dir, f"{n}-compile-{r}.log")
                    try:  # a compile that fails is a result (the row says why), not a failed workload
                        compiled.append(torch_side(a, w, a.steps, warm, "", log, compiled=True))
                    except SystemExit:
                        compiled.append({"failed": compile_error(log)})
                    said = compiled[-1].get("failed") or f"{compiled[-1]['ips']:.1f}"
                    print(f"{n} rep {r + 1}: dlrun {ours[-1]['ips']:.1f} img/s, PyTorch eager {theirs[-1]['ips']:.1f}, "
                          f"torch.compile {said}", flush=True)
                failures = [c["failed"] for c in compiled if "failed" in c]
                zoo_rows.append((n[len("zoo-"):], med(ours), med(theirs),
                                 {"failed": failures[0]} if failures else med(compiled)))
                continue
            for r in range(a.reps):  # alternating
                ours.append(dlrun_side(a, w, a.steps, warm, root, os.path.join(log_dir, f"{n}-dlrun-{r}.log")))
                theirs.append(torch_side(a, w, a.steps, warm, root, os.path.join(log_dir, f"{n}-torch-{r}.log")))
                print(f"{n} rep {r + 1}: dlrun {ours[-1]['ips']:.0f} img/s, PyTorch {theirs[-1]['ips']:.0f} img/s",
                      flush=True)
            rows.append((n, med(ours), med(theirs)))
        except (SystemExit, Exception) as e:  # noqa: BLE001 -- reported, and the exit code says so
            failed.append((n, str(e) or type(e).__name__))
            print(f"{n}: FAILED: {failed[-1][1]}", flush=True)

    version = subprocess.run([a.dlrun, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    cmd = "bench/compare.py " + " ".join(shlex.quote(x) for x in sys.argv[1:])
    gpu = any(n in WORKLOADS and WORKLOADS[n]["device"] == "cuda" for n in names)
    lines = [f"### {datetime.date.today().isoformat()}: `{cmd}`", "",
             f"Machine: {machine(gpu)}; {versions()}; {version}; {a.reps} alternating runs of "
             f"{a.steps} steps each (first {warm} not counted), {a.threads} intra-op threads, medians.", ""]
    if rows:
        lines += ["| workload | dlrun img/s | PyTorch img/s | ratio | dlrun ms/step: data / fwd / bwd / opt "
                  "| PyTorch ms/step: data / fwd / bwd / opt | peak MiB dlrun / PyTorch |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for n, o, t in rows:
            lines.append(f"| {n} | {o['ips']:.0f} | {t['ips']:.0f} | **{o['ips'] / t['ips']:.2f}** | {fmt_ms(o['ms'])} "
                         f"| {fmt_ms(t['ms'])} | {o['peak_mb']:.0f} / {t['peak_mb']:.0f} |")
        lines.append("")
    if zoo_rows:
        lines += ["Each family's smallest member, torchvision's model, 3x64x64 images resident, batch 32, SGD with "
                  "momentum, float32, on the CPU:", "",
                  "| model | dlrun img/s | PyTorch eager img/s | torch.compile img/s | dlrun / eager | "
                  "dlrun / compile | peak MiB dlrun / eager / compile |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for n, o, t, c in zoo_rows:
            if "failed" in c:
                lines.append(f"| {n} | {o['ips']:.1f} | {t['ips']:.1f} | failed: {c['failed']} | "
                             f"**{o['ips'] / t['ips']:.2f}** | - | {o['peak_mb']:.0f} / {t['peak_mb']:.0f} / - |")
                continue
            lines.append(f"| {n} | {o['ips']:.1f} | {t['ips']:.1f} | {c['ips']:.1f} | **{o['ips'] / t['ips']:.2f}** | "
                         f"**{o['ips'] / c['ips']:.2f}** | {o['peak_mb']:.0f} / {t['peak_mb']:.0f} / {c['peak_mb']:.0f} |")
        lines.append("")
    for rows_, what in ((pipeline, "random-resized crop 224 + flip"),
                        (recipe, "random-resized crop 224 + flip + TrivialAugmentWide (bilinear) + normalize + "
                                 "random erasing p 0.1, torchvision's ImageNet recipe")):
        if not rows_:
            continue
        lines += [f"Input pipeline alone (generated 320x320 JPEGs, {what}, batch 64): "
                  "`dlrun bench data` vs torchvision `ImageFolder` + `DataLoader` (PIL).", "",
                  "| workers | dlrun img/s | per worker | torchvision img/s | per worker | ratio |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for workers, o, t in rows_:
            lines.append(f"| {workers} | {o:.0f} | {o / workers:.0f} | {t:.0f} | {t / workers:.0f} | **{o / t:.2f}** |")
        lines.append("")
    for n, why in failed:
        lines += [f"**{n} failed**: {why}", ""]
    report = "\n".join(lines)
    print(report)
    if a.append:
        with open(a.append, "a") as f:
            f.write("\n" + report)
    print(f"logs in {log_dir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
