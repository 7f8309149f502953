"""bench/gpu_amp.py's bookkeeping, apart from the measuring: the statistics of the repetitions,
the ratios, the results file (bench/results/README.md describes it), the --out table, the
machine's description, and the kernel table of a profiled step."""
import datetime
import os
import platform
import re
import statistics
import subprocess

import torch

# The variants, in the order each repetition runs them (A B C A B C ...).
VARIANTS = ["pytorch-eager", "dlrun-eager", "dlrun-graphs", "dlrun-kernels", "dlrun-cudnn", "compile-default",
            "compile-max-autotune"]
COMPILE_MODES = {"compile-default": "default", "compile-max-autotune": "max-autotune-no-cudagraphs"}
COLUMNS = ["workload", "dtype", "layout", "variant", "data", "img_s_median", "img_s_min", "img_s_max", "spread_pct",
           "reps", "steps", "compile_s", "vs_pytorch_eager", "vs_fastest_pytorch_eager", "fastest_pytorch_eager",
           "vs_compile_default", "vs_compile_max_autotune", "status"]


class Cell:
    """One workload x dtype x layout x variant: its repetitions' img/s and how it went."""

    def __init__(self, data):
        self.ips, self.data, self.status, self.compile_s = [], data, "ok", None

    @property
    def failed(self):
        return self.status.startswith("failed")

    def median(self):
        return statistics.median(self.ips) if self.ips and not self.failed else None


def first_line(text):
    lines = [l.strip() for l in str(text).strip().splitlines() if l.strip()]
    return lines[0][:200] if lines else "?"


def fastest_eager(cells, workload):
    """(img/s, "dtype/layout") of the fastest PyTorch eager cell of `workload`, or (None, "-")."""
    best = (None, "-")
    for (wl, dt, lay, var), c in cells.items():
        m = c.median()
        if wl == workload and var == "pytorch-eager" and m and (best[0] is None or m > best[0]):
            best = (m, f"{dt}/{lay}")
    return best


def ratios(cells, key):
    """This cell's median over each reference's median (None where either is missing or the
    reference is the cell itself)."""
    wl, dt, lay, var = key
    m = cells[key].median()

    def over(ref_key):
        ref = cells.get(ref_key)
        r = ref.median() if ref is not None and ref_key != key else None
        return m / r if m and r else None

    best, best_name = fastest_eager(cells, wl)
    return {"vs_pytorch_eager": over((wl, dt, lay, "pytorch-eager")),
            "vs_fastest_pytorch_eager": m / best if m and best else None, "fastest_pytorch_eager": best_name,
            "vs_compile_default": over((wl, dt, lay, "compile-default")),
            "vs_compile_max_autotune": over((wl, dt, lay, "compile-max-autotune"))}


def fmt(x, digits):
    return "-" if x is None else f"{x:.{digits}f}"


def row(cells, key, steps):
    c, r = cells[key], ratios(cells, key)
    m = c.median()
    lo, hi = (min(c.ips), max(c.ips)) if m else (None, None)
    vals = list(key) + [c.data, fmt(m, 1), fmt(lo, 1), fmt(hi, 1), fmt(100 * (hi - lo) / m if m else None, 1),
                        str(len(c.ips) if m else 0), str(steps), fmt(c.compile_s, 1), fmt(r["vs_pytorch_eager"], 3),
                        fmt(r["vs_fastest_pytorch_eager"], 3), r["fastest_pytorch_eager"],
                        fmt(r["vs_compile_default"], 3), fmt(r["vs_compile_max_autotune"], 3),
                        c.status.replace("\t", " ")]
    return "\t".join(vals)


def write_results(path, header, cells, steps, complete):
    lines = [f"# {k}: {v}" for k, v in header] + [f"# status: {'complete' if complete else 'partial (cut off)'}"]
    lines += ["\t".join(COLUMNS)] + [row(cells, k, steps) for k in cells]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def write_wide(path, cells):
    """The --out table: one line per workload x dtype x layout, each variant's median img/s and
    dlrun's ratios to PyTorch eager (the table the suite's summary has always shown)."""
    keys = []
    for (wl, dt, lay, _) in cells:
        if (wl, dt, lay) not in keys:
            keys.append((wl, dt, lay))
    lines = ["workload\tprecision\tlayout\t" + "\t".join(v.replace("-", "_") + "_img_s" for v in VARIANTS) +
             "\teager_ratio\tgraphs_ratio\tvs_compile_default\tvs_compile_max_autotune\tgraphs_state"]
    for wl, dt, lay in keys:
        med = [fmt(cells[(wl, dt, lay, v)].median(), 0) if (wl, dt, lay, v) in cells else "-" for v in VARIANTS]
        e = ratios(cells, (wl, dt, lay, "dlrun-eager")) if (wl, dt, lay, "dlrun-eager") in cells else {}
        g = ratios(cells, (wl, dt, lay, "dlrun-graphs")) if (wl, dt, lay, "dlrun-graphs") in cells else {}
        state = cells[(wl, dt, lay, "dlrun-graphs")].status if g else "-"
        lines.append("\t".join([wl, dt, lay, *med, fmt(e.get("vs_pytorch_eager"), 2), fmt(g.get("vs_pytorch_eager"), 2),
                                fmt(e.get("vs_compile_default"), 2), fmt(e.get("vs_compile_max_autotune"), 2), state]))
    text = "\n".join(lines) + "\n"
    if path:
        with open(path, "w") as f:
            f.write(text)
    return text


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def machine(device):
    """[(key, value)] for the results file's header, and the device's name."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30)
            driver = driver.stdout.strip().splitlines()[0] if driver.returncode == 0 and driver.stdout.strip() else "?"
        except (OSError, subprocess.TimeoutExpired):
            driver = "? (no nvidia-smi)"
    else:
        name, driver = platform.processor() or "cpu", "- (cpu)"
        try:
            name = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        except (OSError, StopIteration):
            pass
        name = f"cpu {name}"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return [("gpu", name), ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")),
            ("driver", driver), ("torch", torch.__version__), ("cuda", torch.version.cuda or "-"),
            ("cudnn", cudnn if cudnn is not None else "-")], name


def results_path(results_dir, gpu_name):
    """DIR/<UTC date>-<gpu slug>.tsv, with -2, -3 ... when that day's file of that GPU exists."""
    os.makedirs(results_dir, exist_ok=True)
    base = os.path.join(results_dir, datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d") + "-" +
                        slug(gpu_name))
    path, n = base + ".tsv", 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}.tsv"
    return path


def bn_backend(kernels, ops):
    """Which BatchNorm ATen ran: from the kernels' names (cuDNN's have bn_fw / bn_bw, or cudnn
    with norm, in theirs; ATen's own batch_norm), else from the operators that ran
    (aten::cudnn_batch_norm or aten::native_batch_norm; the only evidence on the CPU)."""
    low = [n.lower() for n in kernels]
    cudnn = any("bn_fw" in n or "bn_bw" in n or ("cudnn" in n and "norm" in n) for n in low)
    native = any("batch_norm" in n and "cudnn" not in n and "miopen" not in n for n in low)
    if not (cudnn or native):  # no kernels (a CPU run): the operators
        cudnn = any("cudnn_batch_norm" in n for n in ops)
        native = any("native_batch_norm" in n or "_batch_norm_legit" in n for n in ops)
    return {(True, False): "cudnn", (False, True): "native", (True, True): "mixed"}.get((cudnn, native), "unknown")


def kernel_table(prof, device, title, step_ms, top=25):
    """The text of a kernels-pytorch-*.txt file from one profiled step, and the BN backend."""
    from torch.autograd import DeviceType
    totals = {}
    ops = sorted({e.name for e in prof.events() if e.name.startswith("aten::") and "norm" in e.name})
    if device.type == "cuda":
        for e in prof.events():
            if e.device_type == DeviceType.CUDA:
                t = totals.setdefault(e.name, [0, 0.0])
                t[0] += 1
                t[1] += e.time_range.elapsed_us() / 1000.0
        what = "CUDA kernels (and copies) by total GPU time"
    else:
        for e in prof.key_averages():
            if e.key.startswith("aten::"):
                totals[e.key] = [e.count, e.self_cpu_time_total / 1000.0]
        what = "ATen operators by self CPU time (a CPU run: no CUDA kernels)"
    backend = bn_backend(totals if device.type == "cuda" else [], ops)
    whole = sum(t[1] for t in totals.values()) or 1.0
    lines = [f"# {title}", f"# one PyTorch eager training step after warm-up, torch.profiler: top {top} {what}",
             f"# step wall time under the profiler {step_ms:.2f} ms; all of them {whole:.2f} ms; "
             f"% is of all of them", f"# batchnorm backend: {backend} (ATen operators: {', '.join(ops) or '-'})",
             "name\tcalls\ttotal_ms\tpct"]
    for name, (calls, ms) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"{name}\t{calls}\t{ms:.3f}\t{100 * ms / whole:.1f}")
    return "\n".join(lines) + "\n", backend
