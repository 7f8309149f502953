#!/usr/bin/env python3
"""Remote checkpoints against a local S3 service: how fast the ResNet-50 training state goes up
and comes back, and how long a stop request waits for the remote commit. Side by side, boto3
(what a Python training script would use) moves the same files to the same server.

The server is moto's (tests/e2e/s3_server.py: 127.0.0.1 only, signatures checked), in the
project's venv. It is a single Python process keeping objects in memory, so the absolute MB/s
say more about it than about dlrun; the dlrun / boto3 ratio on the same server is the figure to
compare. Per repeat:

  1. `dlrun train` ResNet-50 with 1000 classes (synthetic 32x32 data: the parameter count does
     not depend on the image size) with checkpoint.remote, stopped by SIGTERM after step 2
     (DLRUN_FAULT): the `preempt` event gives signal -> local commit and signal -> remote
     commit, the `upload` event the upload's time and MB/s; once more with 16 MiB parts;
  2. `dlrun ckpt verify s3://...`: download and SHA-256 of every file (wall time, process
     start included), and `dlrun ckpt verify` of the local copy (hashing alone);
  3. `dlrun train --resume auto` on an empty run directory (download, verify, keep, restore)
     against the same on the directory that already holds the checkpoint;
  4. boto3 `upload_file` / `download_file` of the same files (its default transfer settings:
     multipart above 8 MiB, 10 threads).

    bench/remote_ckpt.py --dlrun build/dlrun [--repeat 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from s3_server import S3Server  # noqa: E402

CFG = os.path.join(ROOT, "configs", "synthetic", "resnet50.yaml")
STEP = "step-00000002"


def train_args(run_dir, remote, endpoint, *extra):
    return ["train", CFG, "--run-dir", run_dir, "run.device=cpu", "run.threads=2", "data.workers=0",
            "model.num_classes=1000", "data.synthetic_shape=[3,32,32]", "data.batch_size=4", "data.synthetic_train_size=64",
            "log.progress=none", "log.every_steps=1", f"checkpoint.remote={remote}",
            f"checkpoint.remote_endpoint={endpoint}", *extra]


def timed(cmd, env, ok=(0,)):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    dt = time.perf_counter() - t0
    if p.returncode not in ok:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}")
    return dt, p.stdout


def events(run_dir, kind):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("event") == kind]


def one(dlrun, s3, i, tmp):
    env = dict(os.environ, **s3.env)
    env.pop("DLRUN_FAULT", None)
    remote = s3.url(f"bench{i}")
    out = {}

    vm = os.path.join(tmp, f"vm{i}")
    timed([dlrun, *train_args(vm, remote, s3.direct)], dict(env, DLRUN_FAULT="signal_at_step:2"), ok=(75,))
    pre, up = events(vm, "preempt")[-1], events(vm, "upload")[-1]
    local = os.path.join(vm, "checkpoints", STEP)
    out["bytes"] = up["bytes"]
    out["local_commit_s"] = pre["latency_s"]
    out["remote_commit_s"] = pre["remote_latency_s"]
    out["upload_s"] = up["seconds"]
    vm16 = os.path.join(tmp, f"vm{i}-parts")
    timed([dlrun, *train_args(vm16, s3.url(f"bench{i}-parts"), s3.direct, "checkpoint.remote_part_mb=16")],
          dict(env, DLRUN_FAULT="signal_at_step:2"), ok=(75,))
    out["upload_parts16_s"] = events(vm16, "upload")[-1]["seconds"]

    ep = ["--remote-endpoint", s3.direct]
    out["verify_remote_s"], _ = timed([dlrun, "ckpt", "verify", f"{remote}/{STEP}", *ep], env)
    out["verify_local_s"], _ = timed([dlrun, "ckpt", "verify", local], env)

    more = ("train.max_steps=3", "checkpoint.at_end=false")
    fresh = os.path.join(tmp, f"fresh{i}")
    out["resume_fresh_s"], log = timed([dlrun, *train_args(fresh, remote, s3.direct, *more)], env)
    assert "downloading" in log, log[-2000:]
    out["resume_local_s"], log = timed([dlrun, *train_args(vm, remote, s3.direct, *more)], env)
    assert "downloading" not in log, log[-2000:]

    c = s3.client()
    files = sorted(os.listdir(local))
    t0 = time.perf_counter()
    for f in files:
        c.upload_file(os.path.join(local, f), s3.bucket, f"py{i}/{STEP}/{f}")
    out["boto3_upload_s"] = time.perf_counter() - t0
    dl = os.path.join(tmp, f"py{i}")
    os.makedirs(dl)
    t0 = time.perf_counter()
    for f in files:
        c.download_file(s3.bucket, f"py{i}/{STEP}/{f}", os.path.join(dl, f))
    out["boto3_download_s"] = time.perf_counter() - t0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlrun", default=os.path.join(ROOT, "build", "dlrun"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the raw figures here")
    a = ap.parse_args()
    runs = []
    with S3Server() as s3, tempfile.TemporaryDirectory(prefix="dlrun-bench-s3-") as tmp:
        for i in range(a.repeat):
            runs.append(one(os.path.abspath(a.dlrun), s3, i, tmp))
            print(json.dumps(runs[-1]), flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    mb = med["bytes"] / 1e6
    rows = [
        ("ResNet-50 training state (bytes uploaded)", f"{med['bytes']:,} B ({mb:.1f} MB)"),
        ("SIGTERM -> local commit (sync save)", f"{med['local_commit_s']:.2f} s"),
        ("SIGTERM -> remote commit (files, manifest, LATEST)", f"{med['remote_commit_s']:.2f} s"),
        ("dlrun upload (`upload` event)", f"{med['upload_s']:.2f} s ({mb / med['upload_s']:.0f} MB/s)"),
        ("dlrun upload, `remote_part_mb: 16` (multipart)", f"{med['upload_parts16_s']:.2f} s ({mb / med['upload_parts16_s']:.0f} MB/s)"),
        ("boto3 upload_file of the same files", f"{med['boto3_upload_s']:.2f} s ({mb / med['boto3_upload_s']:.0f} MB/s)"),
        ("dlrun ckpt verify s3://... (download + SHA-256, process included)",
         f"{med['verify_remote_s']:.2f} s ({mb / med['verify_remote_s']:.0f} MB/s)"),
        ("dlrun ckpt verify of the local copy (SHA-256 alone)", f"{med['verify_local_s']:.2f} s"),
        ("boto3 download_file of the same files", f"{med['boto3_download_s']:.2f} s ({mb / med['boto3_download_s']:.0f} MB/s)"),
        ("dlrun train --resume auto, empty run dir (downloads)", f"{med['resume_fresh_s']:.2f} s"),
        ("dlrun train --resume auto, checkpoint local", f"{med['resume_local_s']:.2f} s"),
    ]
    print(f"\nmedian of {a.repeat}\n\n| | |\n| --- | --- |")
    for k, v in rows:
        print(f"| {k} | {v} |")
    print(f"\nratio upload dlrun / boto3 time: {med['upload_s'] / med['boto3_upload_s']:.2f}; "
          f"download (with SHA-256 and process start) dlrun / boto3 time: "
          f"{med['verify_remote_s'] / med['boto3_download_s']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
