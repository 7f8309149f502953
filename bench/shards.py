#!/usr/bin/env python3
"""The sharded input pipeline, measured side by side (docs/benchmarks.md "Sharded datasets").

On generated ImageNet-sized JPEGs (500x375, quality 90, photo-like: gradients plus noise), with
random-resized crop 224 + flip + normalization, batch 64:
  - `dlrun data pack` throughput (image folder -> shards + index);
  - images/s per loader worker, each worker a core: dlrun's loader on the shards (region decode
    on, and off), torchvision ImageFolder + DataLoader (PIL) on the folder, Python webdataset +
    DataLoader (PIL) on the same shards -- alternating, medians of --reps;
  - the region decode's PSNR against the full decode (`dlrun bench data --psnr`);
  - the first epoch from S3 (moto's server on 127.0.0.1, cold cache) against local disk, and the
    cache's size against its limit.

  bench/shards.py --dlrun build/dlrun [--images 2000] [--reps 3] [--workers 1,2] [--out DIR]
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
BATCH, WARMUP, BATCHES = 64, 3, 25
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def make_images(root, n):
    import numpy as np
    from PIL import Image
    done = os.path.join(root, f".made-{n}")
    if os.path.exists(done):
        return
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:375, 0:500]
    for i in range(n):
        d = os.path.join(root, "train", f"class{i % 10}")
        os.makedirs(d, exist_ok=True)
        base = np.stack([(xx * (c + 1) / 2 + yy * (3 - c) / 2 + i * 7) % 256 for c in range(3)], -1)
        img = np.clip(base + rng.normal(0, 10, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
    os.makedirs(os.path.join(root, "val", "class0"), exist_ok=True)
    Image.fromarray(np.zeros((375, 500, 3), np.uint8)).save(os.path.join(root, "val", "class0", "0.jpg"))
    open(done, "w").close()


def dlrun_bench(a, shards, workers, *extra, env=None, batches=BATCHES, warmup=WARMUP):
    cmd = [a.dlrun, "bench", "data", os.path.join(ROOT, "configs", "quickstart.yaml"), "data.name=webdataset",
           f"data.shards={shards}", f"data.eval_shards={shards}", "data.image_size=224",
           "data.augment=[resized_crop,flip]", f"data.workers={workers}", f"data.batch_size={BATCH}",
           "model.in_channels=3", f"data.cache_dir={a.out}/cache", "--batches", str(batches), "--warmup",
           str(warmup), "--json", *extra]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"dlrun bench data failed:\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def python_rate(loader_factory):
    dl = loader_factory()

    def endless():
        while True:
            yield from dl
    it = endless()
    for _ in range(WARMUP):
        next(it)
    start, n = time.perf_counter(), 0
    for _ in range(BATCHES):
        n += next(it)[0].shape[0]
    return n / (time.perf_counter() - start)


def transform():
    import torchvision.transforms as T
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def torchvision_loader(folder, workers):
    import torch
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(os.path.join(folder, "train"), transform())
    return lambda: torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                                               persistent_workers=True, drop_last=True)


def webdataset_loader(shard_dir, workers):
    import torch
    import webdataset as wds
    urls = sorted(os.path.join(shard_dir, f) for f in os.listdir(shard_dir) if f.endswith(".tar"))
    t = transform()
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), workersplitter=wds.split_by_worker, empty_check=False)
          .shuffle(1000).decode("pil").to_tuple("jpg", "cls").map_tuple(t, lambda c: int(c)))
    return lambda: torch.utils.data.DataLoader(ds.repeat(), batch_size=BATCH, num_workers=workers,
                                               persistent_workers=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrun", required=True)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--out", default="/tmp/dlrun-bench-shards")
    ap.add_argument("--skip-s3", action="store_true")
    a = ap.parse_args()
    a.dlrun = os.path.abspath(a.dlrun)
    folder, shards = os.path.join(a.out, "folder"), os.path.join(a.out, "shards")
    t0 = time.time()
    make_images(folder, a.images)
    print(f"images ready ({time.time() - t0:.0f} s)", flush=True)
    lines = []

    # Pack.
    import shutil
    shutil.rmtree(shards, ignore_errors=True)
    p = subprocess.run([a.dlrun, "data", "pack", "--dataset", "image_folder", "--root", folder, "--to", shards,
                        "--shard-size-mb", "16"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise SystemExit(p.stdout)
    pack_line = p.stdout.strip().splitlines()[-1]
    print(pack_line, flush=True)
    folder_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(folder, "train"))
                    for f in fs) / 1e6
    lines.append(f"- `dlrun data pack --dataset image_folder --shard-size-mb 16` of {a.images} JPEGs "
                 f"({folder_mb:.0f} MB): {pack_line}")

    # Throughput per worker, alternating.
    table = ["| workers | dlrun shards (region decode) | dlrun shards (full decode) | torchvision ImageFolder | "
             "Python webdataset | dlrun / torchvision | dlrun / webdataset |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for w in [int(x) for x in a.workers.split(",")]:
        runs = {"roi": [], "full": [], "tv": [], "wds": []}
        for _ in range(a.reps):
            runs["roi"].append(dlrun_bench(a, shards, w)[0]["images_per_s"])
            runs["full"].append(dlrun_bench(a, shards, w, "data.jpeg_roi_decode=false")[0]["images_per_s"])
            runs["tv"].append(python_rate(torchvision_loader(folder, w)))
            runs["wds"].append(python_rate(webdataset_loader(shards, w)))
        m = {k: statistics.median(v) for k, v in runs.items()}
        print(f"{w} worker(s): " + ", ".join(f"{k} {v:.0f}" for k, v in m.items()), flush=True)
        table.append(f"| {w} | {m['roi']:.0f} ({m['roi'] / w:.0f}/core) | {m['full']:.0f} ({m['full'] / w:.0f}/core) | "
                     f"{m['tv']:.0f} ({m['tv'] / w:.0f}/core) | {m['wds']:.0f} ({m['wds'] / w:.0f}/core) | "
                     f"**{m['roi'] / m['tv']:.2f}** | **{m['roi'] / m['wds']:.2f}** |")
    lines += ["", "Images/s (random-resized crop 224 + flip + normalization, batch 64, "
              f"{BATCHES} batches after {WARMUP}; medians of {a.reps} alternating runs):", ""] + table

    # The region decode against the full decode: at 224 (ImageNet's crops of a 500x375 photo
    # decode at full scale, only the crop), and at 112 (crops of 224 pixels or more decode at 4/8).
    for size in (224, 112):
        j, _ = dlrun_bench(a, shards, 1, "--psnr", "500", f"data.image_size={size}", batches=1, warmup=1)
        q = j["roi_psnr"]
        lines += ["", f"- Region decode vs full decode through the same pipeline (no normalization), output {size}, "
                  f"{q['samples']} samples: {q['identical']} bit-identical, {q['scaled']} decoded at a reduced DCT "
                  f"scale; PSNR of the others against the full decode: mean **{q['mean_db']:.1f} dB**, worst "
                  f"{q['worst_db']:.1f} dB. Decode + transform {q['roi_ms_per_image']:.2f} ms vs "
                  f"{q['full_ms_per_image']:.2f} ms per image on one thread."]

    # S3 against local disk: the first epoch, cold cache.
    if not a.skip_s3:
        from s3_server import S3Server
        epoch_batches = a.images // BATCH - 1
        limit_gb = 0.08
        with S3Server() as s3:
            for f in sorted(os.listdir(shards)):
                s3.write(f"shards/{f}", open(os.path.join(shards, f), "rb").read())
            env = dict(os.environ, **s3.env, AWS_ENDPOINT_URL=s3.endpoint, AWS_EC2_METADATA_DISABLED="true")
            rows = []
            for _ in range(a.reps):
                shutil.rmtree(os.path.join(a.out, "cache"), ignore_errors=True)
                window = ["data.shuffle_block=2", "data.fetch_ahead=2"]  # 4 shards of ~16 MB in use at a time
                remote, log = dlrun_bench(a, s3.url("shards"), 2, f"data.cache_limit_gb={limit_gb}", *window, env=env,
                                          batches=epoch_batches, warmup=1)
                local, _ = dlrun_bench(a, shards, 2, *window, batches=epoch_batches, warmup=1)
                rows.append((remote["images_per_s"], local["images_per_s"], log))
            r = statistics.median(x[0] for x in rows)
            l = statistics.median(x[1] for x in rows)
            cache = [m.group(0) for m in re.finditer(r"shards of s3://[^\n]*", rows[-1][2])]
            lines += ["", f"- First epoch ({epoch_batches} batches after 1, 2 workers, cold cache, cache limit "
                      f"{limit_gb * 1000:.0f} MB, shuffle blocks of 2 shards, 2 fetched ahead) from S3 (moto on 127.0.0.1): **{r:.0f}** images/s; from local disk "
                      f"{l:.0f}: **{r / l:.2f}x**. The store's own account: {'; '.join(cache) or 'n/a'}"]

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    import torch
    import torchvision
    import webdataset
    head = (f"### {datetime.date.today()}: `bench/shards.py --dlrun {os.path.relpath(a.dlrun, ROOT)} --images "
            f"{a.images} --reps {a.reps} --workers {a.workers}`\n\nMachine: {os.cpu_count()} cores ({cpu}), "
            f"{platform.system()} {platform.release()}; torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}, webdataset {webdataset.__version__}.\n")
    print("\n" + head + "\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
