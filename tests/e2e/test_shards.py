"""WebDataset shards end to end (docs/data.md "Sharded datasets"): shards written by Python's
webdataset train in dlrun; `dlrun data pack` output reads back in Python's webdataset and its
index in wids; a run killed mid-epoch on 2 ranks resumes on 1 and on 3 with the same samples in
the same order and the same augmentation (the loader's per-sample log, DLRUN_SAMPLE_LOG); an S3
outage of 30 s is ridden out, a longer one ends with exit 1 and a committed checkpoint; hostile
and corrupt shards are refused by name with exit 2."""
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from common import RunDir, dlrun, environment, expect, main, train
from s3_server import S3Server
from test_dist import Ranks

CLASSES = 4


class Scratch:
    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="dlrun-shards-")
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)

    def file(self, *parts):
        return os.path.join(self.path, *parts)


def jpeg(i, w=64, h=48):
    """A small JPEG whose content depends on i (so every sample hashes differently)."""
    from PIL import Image
    img = Image.new("RGB", (w, h), ((i * 37) % 256, (i * 91) % 256, (i * 13) % 256))
    for x in range(0, w, 8):
        img.putpixel((x, (i + x) % h), (255, 255, 255))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def python_shards(dirname, n=96, per_shard=16):
    """Shards written by Python's webdataset.ShardWriter: n samples of KEY.jpg + KEY.cls."""
    import webdataset as wds
    os.makedirs(dirname, exist_ok=True)
    with wds.ShardWriter(os.path.join(dirname, "train-%06d.tar"), maxcount=per_shard, verbose=0) as w:
        for i in range(n):
            w.write({"__key__": f"sample{i:05d}", "jpg": jpeg(i), "cls": i % CLASSES})
    return sorted(f for f in os.listdir(dirname) if f.endswith(".tar"))


def config(path, shards, cache, *extra):
    """A small deterministic run on 64x48 JPEG shards: batch 12 (1, 2 and 3 ranks divide it)."""
    with open(path, "w") as f:
        f.write(f"""
run: {{name: shards, device: cpu, seed: 3, deterministic: true, threads: 1}}
model: {{name: convnet, width: 8, in_channels: 3, num_classes: {CLASSES}}}
data:
  name: webdataset
  shards: {shards}
  eval_shards: {shards}
  cache_dir: {cache}
  image_size: 32
  batch_size: 12
  eval_batch_size: 24
  workers: 2
  augment: [resized_crop, flip]
  shuffle_block: 2
  fetch_threads: 2
optim: {{name: sgd, lr: 0.05, momentum: 0.9}}
train: {{epochs: 2}}
log: {{every_steps: 1, progress: none}}
checkpoint: {{every_steps: 2, keep_last: 3}}
""" + "\n".join(extra))
    return path


def read_sample_logs(prefix):
    """(epoch, position) -> (index, label, hash) over every PREFIX.rank* file; a position logged
    twice (a replay after a kill) must agree with itself."""
    out = {}
    d, base = os.path.split(prefix)
    for name in sorted(os.listdir(d)):
        if not name.startswith(base + ".rank"):
            continue
        for line in open(os.path.join(d, name)):
            e, pos, idx, label, h = line.split()
            key, val = (int(e), int(pos)), (int(idx), int(label), h)
            expect(out.get(key, val) == val, f"position {key} logged as {out.get(key)} and as {val}")
            out[key] = val
    return out


def test_python_webdataset_shards_train_and_index_reads_in_wids():
    with Scratch() as s, RunDir() as r:
        names = python_shards(s.file("shards"))
        expect(len(names) == 6, names)
        cfg = config(s.file("c.yaml"), s.file("shards", "train-{000000..000005}.tar"), s.file("cache"))
        p = train(cfg, r.path)
        expect("96 samples in 6 shard(s)" in p.stdout, p.stdout[-2000:])
        summ = r.summary()
        expect(summ["status"] == "completed" and summ["steps"] == 16, f"{summ['status']} {summ.get('steps')}")
        # The index dlrun writes beside the shards is a wids index.
        p = dlrun("data", "index", s.file("shards"), check=0)
        import wids
        ds = wids.ShardListDataset(s.file("shards", "shardindex.json"))
        expect(len(ds) == 96, f"wids sees {len(ds)} samples")
        for i in (0, 17, 95):
            sample = ds[i]
            expect(sample["__key__"] == f"sample{i:05d}", sample["__key__"])
            expect(sample[".cls"] == str(i % CLASSES).encode() or int(sample[".cls"]) == i % CLASSES, sample[".cls"])
        # A second run reads the shards with the index beside them (nothing to build).
        with RunDir() as r2:
            p = train(cfg, r2.path, "train.epochs=1")
            expect("indexing" not in p.stdout, p.stdout[-2000:])


def image_folder(root, per_class=6):
    files = []
    for c in range(CLASSES):
        d = os.path.join(root, "train", f"class{c}")
        os.makedirs(d, exist_ok=True)
        os.makedirs(os.path.join(root, "val", f"class{c}"), exist_ok=True)
        for k in range(per_class):
            p = os.path.join(d, f"img{k:03d}.jpg")
            with open(p, "wb") as f:
                f.write(jpeg(c * 100 + k))
            files.append((p, c))
        with open(os.path.join(root, "val", f"class{c}", "v.jpg"), "wb") as f:
            f.write(jpeg(c))
    return files  # in ImageFolder order (classes sorted, files sorted)


def test_pack_reads_back_in_python_and_verify_catches_corruption():
    import webdataset as wds
    with Scratch() as s:
        files = image_folder(s.file("folder"))
        out = s.file("packed")
        p = dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", out,
                  "--shard-size-mb", "0", check=2)  # a size of 0 is refused by the flag's check
        p = dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", out,
                  "--prefix", "ifo", "--shard-size-mb", "1", check=0)
        expect("packed 24 samples into 1 shard(s)" in p.stdout, p.stdout)
        p = dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", out,
                  "--prefix", "ifo", check=2)  # packing over shards already there is refused
        expect("already holds shards named ifo-*.tar" in p.stdout, p.stdout)
        samples = list(wds.WebDataset(os.path.join(out, "ifo-000000.tar"), shardshuffle=False))
        expect(len(samples) == len(files), f"{len(samples)} samples read back")
        for i, (sample, (path, label)) in enumerate(zip(samples, files)):
            expect(sample["__key__"] == f"{i:09d}", sample["__key__"])
            expect(sample["jpg"] == open(path, "rb").read(), f"sample {i}: bytes differ from {path}")
            expect(int(sample["cls"]) == label, f"sample {i}: label {sample['cls']} != {label}")
        p = dlrun("data", "verify", out, check=0)
        expect("ok (1 shards, 24 samples" in p.stdout, p.stdout)
        # The loader reads them as any dataset, and `--psnr` compares the region decode with the full one.
        cfg = config(s.file("c.yaml"), out, s.file("cache"))
        p = dlrun("bench", "data", cfg, "--batches", "1", "--warmup", "1", "--psnr", "8", "--json", check=0)
        q = json.loads(p.stdout.strip().splitlines()[-1])["roi_psnr"]
        expect(q["samples"] == 8 and q["identical"] <= 8 and q["full_ms_per_image"] > 0, q)
        expect(q["identical"] == 8 or q["worst_db"] > 20, q)
        # The class names travel with the shards (the index's "classes"; `data index` keeps them), so a run
        # trained on them names the classes in predict, as one trained on the folder does.
        names = [f"class{c}" for c in range(CLASSES)]
        expect(json.load(open(os.path.join(out, "shardindex.json")))["dlrun"]["classes"] == names, "no class names")
        dlrun("data", "index", out, check=0)
        expect(json.load(open(os.path.join(out, "shardindex.json")))["dlrun"]["classes"] == names, "data index lost them")
        with RunDir() as r:
            train(cfg, r.path, "train.max_steps=2", "train.eval_at_end=false")
            p = dlrun("predict", "--checkpoint", r.path, files[0][0], "--json", check=0)
            top = json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1])["top"]
            expect(all(t["class"] in names for t in top), top)
        # One flipped byte in the shard: verify names it (exit 2); training from it is refused by name.
        shard = os.path.join(out, "ifo-000000.tar")
        with open(shard, "r+b") as f:
            f.seek(1000)
            b = f.read(1)
            f.seek(1000)
            f.write(bytes([b[0] ^ 0xFF]))
        p = dlrun("data", "verify", out, check=2)
        expect("BAD" in p.stdout and "ifo-000000.tar" in p.stdout and "SHA-256" in p.stdout, p.stdout)
        expect("1 of 1 shard(s) do not match their index" in p.stdout, p.stdout)
        with RunDir() as r:
            p = train(cfg, r.path, check=2)
            expect("ifo-000000.tar does not match its index" in p.stdout, p.stdout[-2000:])


def idx_files(d, n=20):
    """Tiny MNIST-format files (idx): 20 images of 28x28, labels 0..9."""
    import gzip
    import struct
    os.makedirs(d, exist_ok=True)
    imgs = bytes((i * 7 + k) % 256 for i in range(n) for k in range(28 * 28))
    for split, count in (("train", n), ("t10k", n)):
        with open(os.path.join(d, f"{split}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 2051, count, 28, 28) + imgs)
        with open(os.path.join(d, f"{split}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 2049, count) + bytes(i % 10 for i in range(count)))
    return imgs


def test_pack_of_images_in_memory_writes_lossless_png():
    import webdataset as wds
    from PIL import Image
    import numpy as np
    with Scratch() as s:
        imgs = idx_files(s.file("mnist"))
        dlrun("data", "pack", "--dataset", "mnist", "--root", s.file("mnist"), "--to", s.file("out"), check=0)
        samples = list(wds.WebDataset(s.file("out", "train-000000.tar"), shardshuffle=False))
        expect(len(samples) == 20, f"{len(samples)} samples")
        for i, smp in enumerate(samples):
            px = np.array(Image.open(io.BytesIO(smp["png"])))
            expect(px.shape == (28, 28), px.shape)
            expect(px.tobytes() == imgs[i * 784:(i + 1) * 784], f"sample {i}: pixels differ")
            expect(int(smp["cls"]) == i % 10, smp["cls"])


def wait_for_step(run_dir, step, procs, timeout=300):
    deadline = time.time() + timeout
    path = os.path.join(run_dir, "metrics.jsonl")
    while time.time() < deadline:
        for p in procs:
            if p.poll() is not None:
                out = p.stdout.read() if p.stdout else ""
                raise AssertionError(f"a process exited ({p.returncode}) before step {step}:\n{out[-3000:]}")
        if os.path.exists(path):
            for line in open(path):
                if line.strip() and json.loads(line).get("step", 0) >= step and "loss" in line:
                    return
        time.sleep(0.05)
    raise AssertionError(f"step {step} never came")


def last_step(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    steps = [json.loads(line).get("step", 0) for line in open(path) if line.strip()] if os.path.exists(path) else []
    return max(steps, default=0)


def wait_stalled(run_dir, quiet_s, timeout=120):
    """Until no new step has come for quiet_s seconds (a step takes ~0.3 s under slow_batch:300)."""
    deadline = time.time() + timeout
    step, since = last_step(run_dir), time.time()
    while time.time() < deadline:
        time.sleep(0.1)
        now = last_step(run_dir)
        if now != step:
            step, since = now, time.time()
        elif time.time() - since >= quiet_s:
            return
    raise AssertionError("the run never stalled")


def test_kill_mid_epoch_on_2_ranks_resume_on_1_and_3_same_samples():
    with Scratch() as s:
        python_shards(s.file("shards"), n=96, per_shard=12)
        cfg = config(s.file("c.yaml"), s.file("shards"), s.file("cache"))
        with RunDir() as ref:
            train(cfg, ref.path, env={"DLRUN_SAMPLE_LOG": s.file("ref.log")})
        want = read_sample_logs(s.file("ref.log"))
        expect(len(want) == 2 * 96, f"the reference logged {len(want)} samples")  # 2 epochs, 8 steps of 12 each
        rng = random.Random(os.getpid())
        for resume_world in (1, 3):
            with RunDir() as r:
                log = s.file(f"kill{resume_world}.log")
                args = ["train", cfg, "--run-dir", r.path, "log.progress=none"]
                with Ranks(2, args, {"DLRUN_SAMPLE_LOG": log}) as ranks:
                    wait_for_step(r.path, rng.randint(3, 10), ranks.procs)
                    time.sleep(rng.uniform(0, 0.3))
                    for p in ranks.procs:
                        p.kill()
                with Ranks(resume_world, args, {"DLRUN_SAMPLE_LOG": log}) as ranks:
                    codes, outs = ranks.wait()
                expect(codes == [0] * resume_world, f"resume on {resume_world}: exit codes {codes}\n{outs[0][-3000:]}")
                expect(f"resuming on world size {resume_world} from world size 2" in outs[0], outs[0][-3000:])
                got = read_sample_logs(log)
                expect(set(got) == set(want), f"positions logged: {len(got)} vs {len(want)}")
                diff = [k for k in want if got[k] != want[k]]
                expect(not diff, f"resume on {resume_world}: {len(diff)} samples differ, first {diff[:3]}: "
                       f"{[(got[k], want[k]) for k in diff[:3]]}")
                print(f"  2 ranks killed, resumed on {resume_world}: {len(got)} samples as in the uninterrupted run")


def run_with_outage(s3, cfg, run_dir, env, overrides, outage):
    """`dlrun train` until step 3, then the store goes down and `outage(proc)` returns the run's
    output; the store is back up afterwards whatever happened. Returns (exit code, output)."""
    proc = subprocess.Popen([os.environ["DLRUN"], "train", cfg, "--run-dir", run_dir, "log.progress=none",
                             *overrides], env=environment(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        wait_for_step(run_dir, 3, [proc])
        s3.down()
        out = outage(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        s3.up()
    return proc.returncode, out


def test_s3_outage_of_30_s_is_ridden_out_and_a_longer_one_commits_then_fails():
    with Scratch() as s, S3Server() as s3:
        image_folder(s.file("folder"), per_class=24)
        env = dict(s3.env, AWS_ENDPOINT_URL=s3.endpoint)
        p = dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", s3.url("shards"),
                  "--samples-per-shard", "12", env=env, check=0)  # straight to S3, with its index
        expect("packed 96 samples into 8 shard(s)" in p.stdout, p.stdout)
        expect("shardindex.json" in s3.keys("shards") and "train-000007.tar" in s3.keys("shards"), s3.keys("shards"))
        dlrun("data", "verify", s3.url("shards"), env=env, check=0)
        slow = {"DLRUN_FAULT": "slow_batch:300"}
        cfg = config(s.file("c.yaml"), s3.url("shards"), s.file("cache"))
        # One shard read at a time, one fetched ahead, a cache that holds those two only: shards
        # are fetched all through the run, so an outage at any step is met by a fetch.
        small = ["data.shuffle_block=1", "data.fetch_ahead=1", "data.cache_limit_gb=0.00003"]
        with RunDir() as r:  # the store goes away for 30 s mid-epoch and comes back
            def back_after_30_s(proc):
                time.sleep(30)
                s3.up()
                return proc.communicate(timeout=300)[0]
            code, out = run_with_outage(s3, cfg, r.path, dict(env, **slow), small, back_after_30_s)
            expect(code == 0, f"exit {code}\n{out[-3000:]}")
            expect("retrying for up to 120 s" in out, out[-3000:])
            expect(r.summary()["status"] == "completed", "not completed")
        # A restart on the same machine finds the shards it cached (a limit that holds them all).
        bench = ["bench", "data", cfg, "--batches", "7", "--warmup", "1", "data.cache_limit_gb=1"]
        shutil.rmtree(s.file("cache"), ignore_errors=True)
        first = dlrun(*bench, env=env, check=0).stdout
        again = dlrun(*bench, env=env, check=0).stdout
        expect("8 downloaded" in first, first[-1500:])
        expect("0 downloaded" in again and "8 reused from the cache" in again, again[-1500:])
        with RunDir() as r:  # down for longer than data.retry_s: exit 1, the steps trained committed
            shutil.rmtree(s.file("cache"), ignore_errors=True)
            code, out = run_with_outage(s3, cfg, r.path, dict(env, **slow), small + ["data.retry_s=3"],
                                        lambda proc: proc.communicate(timeout=300)[0])
            expect(code == 1, f"exit {code}\n{out[-3000:]}")
            expect("unreachable for 3 s (data.retry_s)" in out and "s3://dlrun-ckpts/shards/train-" in out,
                   out[-3000:])
            latest = open(r.file("checkpoints", "LATEST")).read().strip()
            step = int(latest.split("-")[1])
            expect(step >= 3, f"LATEST {latest}")
            dlrun("ckpt", "verify", r.path, check=0)
            p = train(cfg, r.path, *small, env=env)  # the store is back: the run resumes and finishes
            expect(f"resum" in p.stdout, p.stdout[-2000:])
        with RunDir() as r:  # SIGTERM while the loader waits for a shard: saved at once, exit 75
            shutil.rmtree(s.file("cache"), ignore_errors=True)
            took = []
            def sigterm_while_waiting(proc):
                wait_stalled(r.path, 2.0)  # the loader is waiting for a shard
                t0 = time.time()
                proc.send_signal(signal.SIGTERM)
                out = proc.communicate(timeout=120)[0]
                took.append(time.time() - t0)
                return out
            code, out = run_with_outage(s3, cfg, r.path, dict(env, **slow), small, sigterm_while_waiting)
            expect(code == 75, f"exit {code}\n{out[-3000:]}")
            took = took[0]
            expect(took < 20, f"exit 75 took {took:.1f} s after SIGTERM (the store was down)")
            expect("stop requested while waiting for shard" in out, out[-3000:])
            dlrun("ckpt", "verify", r.path, check=0)


def test_hostile_shards_are_refused_by_name():
    import tarfile
    with Scratch() as s:
        os.makedirs(s.file("evil"))
        good = jpeg(1)
        # A member that climbs out of the sample key.
        with tarfile.open(s.file("evil", "a.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
            for name, data in (("../outside.jpg", good), ("../outside.cls", b"1")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        p = dlrun("data", "index", s.file("evil"), check=2)
        expect("a.tar" in p.stdout and "../outside.jpg" in p.stdout, p.stdout)
        # A truncated shard.
        os.remove(s.file("evil", "a.tar"))
        python_shards(s.file("evil"), n=8, per_shard=8)
        shard = s.file("evil", "train-000000.tar")
        data = open(shard, "rb").read()
        open(shard, "wb").write(data[:len(data) // 2])
        with RunDir() as r:
            p = train(config(s.file("c.yaml"), s.file("evil"), s.file("cache")), r.path, check=2)
            expect("train-000000.tar is truncated" in p.stdout, p.stdout[-2000:])


def test_splits_never_mix_in_one_folder():
    """A second split packed into the same folder is refused (its index would replace the first's);
    a folder holding shards its index does not list (packed there by hand, or by an older dlrun)
    is refused by training and named by verify, instead of training on both splits."""
    with Scratch() as s:
        image_folder(s.file("folder"))
        out = s.file("packed")
        dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--to", out,
              "--samples-per-shard", "16", check=0)
        index = open(os.path.join(out, "shardindex.json"), "rb").read()
        p = dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--split", "eval",
                  "--prefix", "val", "--to", out, check=2)
        expect("already holds other shards" in p.stdout and "a folder of its own" in p.stdout, p.stdout)
        expect(open(os.path.join(out, "shardindex.json"), "rb").read() == index, "the first split's index changed")
        expect(sorted(os.listdir(out)) == ["shardindex.json", "train-000000.tar", "train-000001.tar"], os.listdir(out))
        # The validation split in a folder of its own, then one of its shards copied beside the training ones.
        dlrun("data", "pack", "--dataset", "image_folder", "--root", s.file("folder"), "--split", "eval",
              "--prefix", "val", "--to", s.file("packed-val"), check=0)
        shutil.copy(s.file("packed-val", "val-000000.tar"), out)
        p = dlrun("data", "verify", out, check=2)
        expect("val-000000.tar: not in the index" in p.stdout, p.stdout)
        # (counted as what it is: the shards that are listed match)
        expect("1 shard(s) in the folder are not in the index" in p.stdout and "do not match" not in p.stdout, p.stdout)
        with RunDir() as r:
            p = train(config(s.file("c.yaml"), out, s.file("cache")), r.path, "train.epochs=1", check=2)
            expect("also holds 1 other(s) (val-000000.tar)" in p.stdout and "another split's" in p.stdout,
                   p.stdout[-2000:])
        # Asked for explicitly, the folder is indexed whole (a split that grew by new shards); the log
        # names no cache copy (there is none to keep).
        p = dlrun("data", "index", out, check=0)
        expect("cached as" not in p.stdout and "shardindex.json" in p.stdout, p.stdout)
        p = dlrun("data", "verify", out, check=0)
        expect("ok (3 shards, 28 samples" in p.stdout, p.stdout)


def test_training_shards_alone_train_when_no_evaluation_is_scheduled():
    with Scratch() as s, RunDir() as r:
        python_shards(s.file("train"), n=24, per_shard=24)
        cfg = config(s.file("c.yaml"), s.file("train"), s.file("cache"))
        p = train(cfg, r.path, "data.eval_shards=", "train.max_steps=2", check=2)
        expect("needs data.eval_shards" in p.stdout and "train.eval_at_end: false" in p.stdout, p.stdout[-1500:])
        p = train(cfg, r.path, "data.eval_shards=", "train.max_steps=2", "train.eval_at_end=false",
                  "train.eval_every_epochs=0", check=0)
        expect(r.summary()["steps"] == 2 and r.summary()["eval"] is None, r.summary())


def test_a_tar_with_scattered_samples_and_a_truncated_jpeg_are_named():
    import tarfile
    with Scratch() as s:
        os.makedirs(s.file("scattered"))
        # GNU tar without --sort=name writes a folder in directory order: all images, then all labels.
        with tarfile.open(s.file("scattered", "a.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
            for name, data in [(f"{k:05d}.jpg", jpeg(k)) for k in range(4)] + [(f"{k:05d}.cls", b"1") for k in range(4)]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        p = dlrun("data", "index", s.file("scattered"), check=2)
        expect("the files of sample 00000 are not adjacent" in p.stdout and "--sort=name" in p.stdout, p.stdout)
        # The first half of a JPEG: decoding it would fill the rest in gray. verify and predict refuse it.
        os.makedirs(s.file("cut"))
        with tarfile.open(s.file("cut", "a.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
            for k in range(4):
                img = jpeg(k, 256, 192)
                for name, data in ((f"{k:05d}.jpg", img[:len(img) // 2] if k == 2 else img), (f"{k:05d}.cls", b"1")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        dlrun("data", "index", s.file("cut"), check=0)
        p = dlrun("data", "verify", s.file("cut"), check=2)
        expect("a.tar" in p.stdout and "sample 2" in p.stdout and "Premature end of JPEG file" in p.stdout, p.stdout)
        expect("match their index but hold an image that does not decode" in p.stdout and "do not match" not in p.stdout,
               p.stdout)
        img = jpeg(5, 256, 192)
        with open(s.file("half.jpg"), "wb") as f:
            f.write(img[:len(img) // 2])
        python_shards(s.file("good"), n=24, per_shard=24)
        cfg = config(s.file("c.yaml"), s.file("good"), s.file("cache"))
        with RunDir() as r:
            train(cfg, r.path, "train.max_steps=1", check=0)
            p = dlrun("predict", cfg, s.file("half.jpg"), "--checkpoint", "auto", "--run-dir", r.path, check=2)
            expect("half.jpg" in p.stdout and "Premature end of JPEG file" in p.stdout, p.stdout[-2000:])


if __name__ == "__main__":
    main([test_python_webdataset_shards_train_and_index_reads_in_wids,
          test_pack_reads_back_in_python_and_verify_catches_corruption,
          test_pack_of_images_in_memory_writes_lossless_png,
          test_kill_mid_epoch_on_2_ranks_resume_on_1_and_3_same_samples,
          test_s3_outage_of_30_s_is_ridden_out_and_a_longer_one_commits_then_fails,
          test_hostile_shards_are_refused_by_name, test_splits_never_mix_in_one_folder,
          test_training_shards_alone_train_when_no_evaluation_is_scheduled,
          test_a_tar_with_scattered_samples_and_a_truncated_jpeg_are_named])
