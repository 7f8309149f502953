#!/usr/bin/env python3
"""Mixed precision, channels_last and CUDA graphs on one GPU: dlrun next to the same model in
PyTorch, eager and under torch.compile, in the same run (docs/benchmarks.md, "GPU").

Workloads, on synthetic data:
  resnet50, 224x224 RGB, batch 256                  (compute-bound)
  resnet18, 28x28 gray, batch 512, ImageNet stem    (launch-bound: where CUDA graphs pay)
Each workload x dtype (fp32, bf16, fp16) x layout (nchw, channels_last) is a row group, and
each of its variants a row:
  pytorch-eager         the network below in eager PyTorch
  dlrun-eager           dlrun train, train.cuda_graphs=false
  dlrun-graphs          dlrun train, train.cuda_graphs=true (state: captured or not)
  dlrun-kernels         dlrun-eager with model.fused_conv_bn_relu=true (dlrun's BatchNorm kernels)
  dlrun-cudnn           dlrun-eager with model.fused_conv_bn_relu=cudnn (cuDNN's fused
                        BatchNorm-activation; fp16/bf16 channels_last, else dlrun's kernels)
  (dlrun-eager and dlrun-graphs run model.fused_conv_bn_relu=auto: the path dlrun picks itself)
  compile-default       torch.compile(model) (mode "default"); the optimizer step stays eager
  compile-max-autotune  torch.compile(model, mode="max-autotune-no-cudagraphs")
A torch.compile that fails is recorded as "failed: <first line>" and the run goes on. Compile
time (the first step) is left out of the timing and reported in the compile_s column.

Fairness rules:
  - Same step on both sides: SGD lr 0.01, momentum 0.9, no weight decay, constant schedule
    (fused=True on CUDA, as dlrun's); autocast in the dtype, GradScaler for fp16; cuDNN
    autotuning and TF32 on (dlrun's defaults); the model and its input in the layout.
  - Same data placement: a synthetic set of 8 batches resident on the device on both sides
    (PyTorch: tensors made there; dlrun: data.device_resident=true), each step's batch gathered
    from it with index_select. The data column says where each side's data was (for dlrun:
    read back from its log).
  - Alternated repetitions: --reps (default 3) rounds, each running every variant once
    (A B C A B C ..., not A A A B B B), each after --warmup steps of its own (a new dlrun
    process, or a PyTorch model that has run before), timing --steps steps (default 100).
    PyTorch: wall time of the steps; dlrun: its metrics records after the warm-up
    (bench/runlog.py). Reported: the median img/s, min, max and (max-min)/median %.
  - Ratios, of medians: each row / PyTorch eager in the same dtype and layout; / the fastest
    PyTorch eager of any dtype and layout of the workload (named); / torch.compile in the same
    dtype and layout, per mode.
Outputs: the rows on stdout; --results-dir DIR writes DIR/<UTC date>-<gpu slug>.tsv (rewritten
after each row group; bench/results/README.md), --out the one-line-per-group table,
--profile DIR/kernels-pytorch-<workload>-<dtype>-<layout>.txt (top 25 CUDA kernels of one
eager step; DIR: --results-dir, else --log-dir) and "batchnorm backend: cudnn|native".
--device cpu --tiny: a smoke run (resnet18 on 16x16, batch 8, few steps; pytorch-eager and
dlrun-eager unless --variants asks more) for the statistics and files, not for speed.

  bench/gpu_amp.py --dlrun build-gpu/dlrun [--only resnet50] [--dtypes bf16,fp16]
      [--layouts channels_last] [--variants pytorch-eager,dlrun-eager,...] [--reps 3]
      [--steps 100] [--warmup 30] [--results-dir bench/results] [--out t.tsv] [--profile]
"""
import argparse
import gc
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import torch
import torch._dynamo
import torch._dynamo.utils
from torch import nn

import gpu_amp_stats as st  # bench/, next to this script
from runlog import mean_samples_per_s

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {
    "resnet50": {"name": "resnet50", "channels": 3, "side": 224, "batch": 256},
    "resnet18": {"name": "resnet18", "channels": 1, "side": 28, "batch": 512},
}
TINY = {"tiny": {"name": "resnet18", "channels": 1, "side": 16, "batch": 8}}
BATCHES = 8  # the resident set, in batches, on both sides
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class TorchSide:
    """One PyTorch variant of a row group: a model, its optimizer and the resident data, kept
    across the repetitions (so a compiled model compiles once)."""

    def __init__(self, w, dtype, layout, mode, dev):
        self.dev, self.w, self.dtype = dev, w, DTYPES[dtype]
        self.fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        self.model = resnet(w["name"], w["channels"]).to(dev).to(memory_format=self.fmt)
        self.fwd = self.model if mode is None else torch.compile(self.model, mode=mode)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=0,
                                   fused=True if dev.type == "cuda" else None)
        self.scaler = torch.amp.GradScaler(dev.type, enabled=dtype == "fp16")
        n, c, s = BATCHES * w["batch"], w["channels"], w["side"]
        self.images = torch.randn(n, c, s, s, device=dev)
        self.labels = torch.randint(0, 10, (n,), device=dev)
        self.idx = torch.randperm(n, device=dev).view(BATCHES, w["batch"])
        self.i = 0

    def step(self):
        idx = self.idx[self.i % BATCHES]
        self.i += 1
        x = self.images.index_select(0, idx).contiguous(memory_format=self.fmt)
        y = self.labels.index_select(0, idx)
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.dev.type, dtype=self.dtype or torch.bfloat16, enabled=self.dtype is not None):
            loss = nn.functional.cross_entropy(self.fwd(x).float(), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()

    def first_step(self):
        """The first step (a compile, for torch.compile): its seconds."""
        t = time.perf_counter()
        self.step()
        sync(self.dev)
        return time.perf_counter() - t

    def rep(self, warm, steps):
        for _ in range(warm):
            self.step()
        sync(self.dev)
        t = time.perf_counter()
        for _ in range(steps):
            self.step()
        sync(self.dev)
        return steps * self.w["batch"] / (time.perf_counter() - t)

    def profile(self, title, path):
        import warnings
        from torch.profiler import ProfilerActivity, profile
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        for _ in range(3):
            self.step()
        sync(self.dev)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            t = time.perf_counter()
            self.step()
            sync(self.dev)
            ms = 1000 * (time.perf_counter() - t)
        text, backend = st.kernel_table(prof, self.dev, title, ms)
        with open(path, "w") as f:
            f.write(text)
        return backend


def dlrun_rep(a, w, dtype, layout, graphs, warm, every, log_path, bn="auto"):
    """One dlrun process: its img/s after the warm-up, its state and where its data was."""
    cfg = os.path.join(ROOT, "configs", "synthetic", "resnet50.yaml")
    c, s = w["channels"], w["side"]
    amp = ["amp.enabled=false"] if dtype == "fp32" else ["amp.enabled=true", f"amp.dtype={dtype}"]
    threads = [f"run.threads={a.threads}"] if a.device == "cpu" and a.threads else []
    with tempfile.TemporaryDirectory(prefix="dlrun-gpu-amp-") as tmp:
        run = os.path.join(tmp, "run")
        cmd = [a.dlrun, "train", cfg, "--run-dir", run, f"run.device={a.device}", *threads,
               f"model.name={w['name']}", f"model.in_channels={c}", f"data.synthetic_shape=[{c},{s},{s}]",
               f"data.batch_size={w['batch']}", f"data.synthetic_train_size={w['batch'] * BATCHES}",
               "data.device_resident=true", f"train.max_steps={warm + a.steps}", f"log.every_steps={every}",
               "log.progress=none", "log.tensorboard=false",
               # The PyTorch side's optimizer: SGD lr 0.01, momentum 0.9, no weight decay, constant.
               "optim.name=sgd", "optim.lr=0.01", "optim.momentum=0.9", "optim.nesterov=false",
               "optim.weight_decay=0", "sched.name=constant",
               f"model.channels_last={'true' if layout == 'channels_last' else 'false'}",
               f"train.cuda_graphs={'true' if graphs else 'false'}", f"model.fused_conv_bn_relu={bn}",
               "checkpoint.every_minutes=0", *amp]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with open(log_path, "w") as f:
            f.write(shlex.join(cmd) + "\n" + p.stdout)
        m = re.search(r"train \d+ samples resident on (\S+)", p.stdout)
        data = f"resident on {m.group(1)} (data.device_resident=true)" if m else "-" if p.returncode else "host loader"
        if p.returncode != 0:
            return None, "failed: " + (p.stdout.strip().splitlines()[-1:] or ["?"])[0][:200], data
        state = ("captured" if "is replayed from now on" in p.stdout else "not captured") if graphs else "ok"
        return mean_samples_per_s(run, warm), path_state(p.stdout, bn, state), data


def path_state(log, bn, state):
    """A row's status says whose BatchNorm it measured when that is not what it asked for: a
    dlrun-cudnn row where cuDNN refused some calls ("cuDNN refused BFloat16 at 64, 128 channels:
    ..."), or where the run's path is not cuDNN's at all (the log's conv-BN-ReLU path line)."""
    notes = []
    m = re.search(r"conv-BN-ReLU path (\w+)", log)
    if bn == "cudnn" and m and m.group(1) != "cudnn":
        notes.append(f"path {m.group(1)}, not cudnn")
    refused = {}
    for dt, ch, why in re.findall(r"cuDNN refused (\S+) at (\d+) channels on \S+: (.*?); dlrun's kernels run there", log):
        refused.setdefault(dt, ([], why))[0].append(ch)
    for dt, (chs, why) in refused.items():
        notes.append(f"cuDNN refused {dt} at {', '.join(chs)} channels (dlrun's kernels ran there): {why[:120]}")
    return "; ".join([state] + notes) if notes else state


def free(dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def group(a, dev, wname, w, dtype, layout, cells, warm, every, emit, after_rep=lambda: None):
    """One row group: set up the PyTorch variants, then the alternated repetitions (after_rep()
    after each variant's repetition: the results file is rewritten then)."""
    torch._dynamo.reset()  # a fresh compile per group: no recompile limit reached across groups
    sides = {}
    for var in a.variants:
        key = (wname, dtype, layout, var)
        if var.startswith("dlrun"):
            cells[key] = st.Cell("-")
            continue
        cells[key] = c = st.Cell(f"resident on {dev} (made there)")
        try:
            side = TorchSide(w, dtype, layout, st.COMPILE_MODES.get(var), dev)
            before = dict(torch._dynamo.utils.counters["stats"])
            secs = side.first_step()
            if var in st.COMPILE_MODES:
                c.compile_s = secs
                graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before.get("unique_graphs", 0)
                breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
                c.status = f"ok ({graphs} graphs, {breaks} graph breaks so far)"
                print(f"  {wname} {dtype} {layout} {var}: compiled in {secs:.1f} s; {c.status}", flush=True)
            sides[var] = side
        except Exception as e:  # noqa: BLE001 - a variant that fails is a result, the run goes on
            c.status = f"failed: {type(e).__name__}: {st.first_line(e)}"
            print(f"  {wname} {dtype} {layout} {var}: {c.status}", flush=True)
            free(dev)
    for r in range(a.reps):
        for var in a.variants:
            key, c = (wname, dtype, layout, var), cells[(wname, dtype, layout, var)]
            if c.failed:
                continue
            try:
                if var.startswith("dlrun"):
                    free(dev)  # what PyTorch's caching allocator holds (GBs), back to the driver
                    log = os.path.join(a.log_dir, f"dlrun-{wname}-{dtype}-{layout}-{var}-rep{r + 1}.log")
                    bn = {"dlrun-kernels": "true", "dlrun-cudnn": "cudnn"}.get(var, "auto")
                    ips, state, c.data = dlrun_rep(a, w, dtype, layout, var == "dlrun-graphs", warm, every, log, bn)
                    if ips is None or c.status == "ok" or state != "captured":
                        c.status = state
                else:
                    ips = sides[var].rep(warm, a.steps)
            except Exception as e:  # noqa: BLE001
                ips, c.status = None, f"failed: {type(e).__name__}: {st.first_line(e)}"
            if ips is not None:
                c.ips.append(ips)
            print(f"  rep {r + 1}/{a.reps} {wname} {dtype} {layout} {var}: "
                  f"{'%.1f img/s' % ips if ips is not None else c.status}", flush=True)
            after_rep()
    if a.profile:
        side = sides.get("pytorch-eager")
        try:
            side = side or TorchSide(w, dtype, layout, None, dev)
            path = os.path.join(a.profile_dir, f"kernels-pytorch-{wname}-{dtype}-{layout}.txt")
            backend = side.profile(f"{wname} {dtype} {layout} on {a.gpu_name}, torch {torch.__version__}", path)
            print(f"  {wname} {dtype} {layout}: batchnorm backend: {backend} ({path})", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"  {wname} {dtype} {layout}: profile failed: {st.first_line(e)}", flush=True)
    sides.clear()
    free(dev)
    for var in a.variants:
        emit(st.row(cells, (wname, dtype, layout, var), a.steps))


def csv(text, allowed, what):
    vals = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        sys.exit(f"gpu_amp.py: unknown {what} {','.join(bad) or '(none)'}; choose from {','.join(allowed)}")
    return [v for v in allowed if v in vals]  # the canonical order


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="the smoke workload (resnet18 16x16 batch 8)")
    ap.add_argument("--only", default="", help="workloads, comma-separated (resnet50, resnet18)")
    ap.add_argument("--dtypes", default="", help="of fp32,bf16,fp16 (default all; on the CPU fp32,bf16)")
    ap.add_argument("--layouts", default="nchw,channels_last")
    ap.add_argument("--variants", default="", help="of " + ",".join(st.VARIANTS) +
                    " (default all; on the CPU pytorch-eager,dlrun-eager)")
    ap.add_argument("--reps", type=int, default=3, help="alternated repetitions")
    ap.add_argument("--steps", type=int, default=0, help="timed steps a repetition (default 100; --tiny 10)")
    ap.add_argument("--warmup", type=int, default=-1, help="steps before each repetition (30; --tiny 5)")
    ap.add_argument("--threads", type=int, default=0, help="--device cpu: intra-op threads on both sides")
    ap.add_argument("--out", default="", help="the one-line-per-group table (TSV)")
    ap.add_argument("--results-dir", default="", help="writes <UTC date>-<gpu slug>.tsv here")
    ap.add_argument("--log-dir", default="", help="dlrun's logs (default: --out's folder, else a temporary one)")
    ap.add_argument("--profile", action="store_true", help="the kernels of one PyTorch eager step, per group")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout: dlrun's child is killed too
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_amp.py needs a CUDA device (or --device cpu --tiny for a smoke run)")
    workloads = TINY if a.tiny else {k: v for k, v in WORKLOADS.items() if k in csv(a.only or "resnet50,resnet18",
                                                                                    list(WORKLOADS), "workload")}
    cpu = dev.type == "cpu"
    a.dtypes = csv(a.dtypes or ("fp32,bf16" if cpu else "fp32,bf16,fp16"), list(DTYPES), "dtype")
    a.layouts = csv(a.layouts, ["nchw", "channels_last"], "layout")
    a.variants = csv(a.variants or ("pytorch-eager,dlrun-eager" if cpu else ",".join(st.VARIANTS)), st.VARIANTS,
                     "variant")
    every = 5 if a.tiny else 10  # dlrun's metrics interval; warm-up and steps are multiples of it
    a.steps = -(-(a.steps or (10 if a.tiny else 100)) // every) * every
    warm = -(-(a.warmup if a.warmup >= 0 else (5 if a.tiny else 30)) // every) * every
    a.log_dir = a.log_dir or (os.path.dirname(os.path.abspath(a.out)) if a.out else tempfile.mkdtemp())
    a.profile_dir = a.results_dir or a.log_dir
    os.makedirs(a.log_dir, exist_ok=True)
    os.makedirs(a.profile_dir, exist_ok=True)
    if cpu:
        torch.set_num_threads(a.threads or torch.get_num_threads())
        a.threads = torch.get_num_threads()
    else:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
    torch._dynamo.config.recompile_limit = 64
    header, a.gpu_name = st.machine(dev)
    ver = subprocess.run([a.dlrun, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    header += [("dlrun", ver.stdout.strip().splitlines()[0] if ver.stdout.strip() else "?"),
               ("command", shlex.join(["python3"] + sys.argv)),
               ("placement", f"pytorch: a set of {BATCHES} batches made on {dev}; dlrun: data.device_resident=true "
                             f"({BATCHES} batches); both index_select each step's batch"),
               ("timing", f"{a.reps} alternated repetitions of {a.steps} steps after {warm} warm-up steps each; "
                          f"img/s median, min, max over the repetitions"),
               ("compile modes", ", ".join(f"{k}={v}" for k, v in st.COMPILE_MODES.items()))]
    if not cpu or torch.backends.cudnn.is_available():
        print(f"cudnn version: {torch.backends.cudnn.version()}", flush=True)
    results = st.results_path(a.results_dir, a.gpu_name) if a.results_dir else ""
    cells = {}
    print("\t".join(st.COLUMNS), flush=True)
    total = len(workloads) * len(a.dtypes) * len(a.layouts)
    done = 0

    def save(complete):
        if results:
            st.write_results(results, header, cells, a.steps, complete)
        if a.out:
            st.write_wide(a.out, cells)

    for wname, w in workloads.items():
        for dtype in a.dtypes:
            for layout in a.layouts:
                group(a, dev, wname, w, dtype, layout, cells, warm, every, lambda line: print(line, flush=True),
                      lambda: save(False))
                done += 1
                save(done == total)
    # The rows again, with the ratios to the fastest PyTorch eager of all the groups measured.
    print("\n" + "\n".join(["\t".join(st.COLUMNS)] + [st.row(cells, k, a.steps) for k in cells]) + "\n")
    print(st.write_wide(a.out, cells))
    if results:
        print(f"results: {results}")


if __name__ == "__main__":
    main()
