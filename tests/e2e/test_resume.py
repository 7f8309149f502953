"""Exact resume (the determinism contract of docs/checkpoints.md): a run killed at any step,
by a kill -9 from outside at any moment, or at any file-write point of a checkpoint save
(synchronous or in the background), and resumed, ends with the same params_sha256 as an
uninterrupted run — mid-epoch, at epoch boundaries, with several loader workers, and across
optimizers, schedules, accumulation, augmentations, datasets and thread counts."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from common import DATA, DLRUN, RunDir, cfg, dlrun, expect, main, train

TINY = cfg("tiny.yaml")
SYNC = "checkpoint.async=false"  # where a test needs the save before the kill to be committed
SEED = int(os.environ.get("DLRUN_TEST_SEED", str(int(time.time()))))
RNG = random.Random(SEED)
print(f"random draws from DLRUN_TEST_SEED={SEED} (set it to repeat them)", flush=True)
_baseline = {}


def baseline(*overrides):
    key = overrides
    if key not in _baseline:
        with RunDir() as r:
            start = time.time()
            train(TINY, r.path, *overrides)
            _baseline[key] = (r.summary()["params_sha256"], time.time() - start)
    return _baseline[key][0]


def baseline_seconds(*overrides):
    baseline(*overrides)
    return _baseline[overrides][1]


def kill_9_at(r, delay, *overrides):
    """Start a run, SIGKILL it from outside after `delay` seconds (if still running)."""
    env = dict(os.environ)
    env.pop("DLRUN_FAULT", None)
    p = subprocess.Popen([DLRUN, "train", TINY, "--run-dir", r.path, "log.progress=none", *overrides], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    return p.returncode


def abort_then_resume(r, step, *overrides):
    p = train(TINY, r.path, *overrides, env={"DLRUN_FAULT": f"abort_at_step:{step}"}, check=None)
    expect(p.returncode != 0 and p.returncode != 75, f"abort_at_step:{step} exited {p.returncode}")
    train(TINY, r.path, *overrides)  # --resume auto is the default
    return r.summary()


def test_kill_at_random_steps():
    # Mid-epoch (7), right after a checkpoint (10), an epoch boundary (16), plus random ones.
    steps = [7, 10, 16] + RNG.sample(range(1, 48), 3)
    print(f"kill steps: {steps}")
    for k in steps:
        with RunDir() as r:
            s = abort_then_resume(r, k)
            expect(s["status"] == "completed", s["status"])
            expect(s["params_sha256"] == baseline(), f"killed at step {k}: params differ after resume")
            # The abort comes before step k's own save; an async save may not have committed.
            expect(s["resumed_from_step"] < k, f"killed at {k}: resumed from {s['resumed_from_step']}")


def test_external_kill_9_at_random_moments():
    """A real SIGKILL from outside at moments drawn at random over the run (start-up, steps,
    evaluations, background checkpoint writes), twice in a row, then resume to the end."""
    long = ("train.epochs=30",)
    ref = baseline(*long)
    span = baseline_seconds(*long)
    for trial in range(3):
        delays = sorted(RNG.uniform(0.05, span) for _ in range(2))
        print(f"trial {trial}: kill -9 after {delays[0]:.2f} s, then again after {delays[1]:.2f} s of a {span:.1f} s run")
        with RunDir() as r:
            for d in delays:
                code = kill_9_at(r, d, *long)
                expect(code in (-signal.SIGKILL, 0), f"exit {code}")
            train(TINY, r.path, *long)
            s = r.summary()
            expect(s["params_sha256"] == ref, f"kill -9 at {delays} + resume differs")
            expect(s["status"] == "completed" and s["steps"] == 480, s)


def test_kill_at_every_checkpoint_write_point():
    points = ["file", "files", "manifest", "rename", "latest"]
    for mode in (SYNC, "checkpoint.async=true"):  # the background writer dies the same way
        for point in points:
            with RunDir() as r:
                # Reach step 12 (checkpoints 5 and 10 committed), then die inside the save at step 15.
                train(TINY, r.path, mode, env={"DLRUN_FAULT": "abort_at_step:12"}, check=None)
                p = train(TINY, r.path, mode, env={"DLRUN_FAULT": f"ckpt:{point}"}, check=None)
                expect(p.returncode not in (0, 75), f"{mode} ckpt:{point} did not abort (exit {p.returncode})")
                v = dlrun("ckpt", "verify", os.path.join(r.path, "checkpoints",
                                                         open(r.file("checkpoints", "LATEST")).read().strip()))
                expect(v.returncode == 0, f"after a crash at {point}, LATEST does not verify:\n{v.stdout}")
                train(TINY, r.path, mode)
                expect(r.summary()["params_sha256"] == baseline(), f"{mode} crash at ckpt:{point}: params differ")


def test_corrupt_checkpoint_is_skipped_not_deleted():
    with RunDir() as r:
        train(TINY, r.path, SYNC, env={"DLRUN_FAULT": "abort_at_step:12"}, check=None)
        bad = r.file("checkpoints", "step-00000010", "model.pt")
        with open(bad, "r+b") as f:
            f.seek(200)
            b = f.read(1)
            f.seek(200)
            f.write(bytes([b[0] ^ 0x40]))
        os.makedirs(r.file("checkpoints", "step-00000011.tmp"))  # a partial write left behind
        p = train(TINY, r.path, SYNC)
        expect("skipping checkpoint" in p.stdout and "step-00000010" in p.stdout, p.stdout[-2000:])
        expect(r.summary()["resumed_from_step"] == 5, f"resumed from {r.summary()['resumed_from_step']}")
        expect(r.summary()["params_sha256"] == baseline(), "params differ after skipping a corrupt checkpoint")
        expect(os.path.isdir(r.file("checkpoints", "step-00000011.tmp")), "partial checkpoint was deleted")
        # Training reached step 10 again and saved it: the corrupt copy was set aside, not replaced.
        corrupt = [d for d in os.listdir(r.file("checkpoints")) if d.startswith("step-00000010.corrupt-")]
        expect(len(corrupt) == 1, os.listdir(r.file("checkpoints")))
        v = dlrun("ckpt", "verify", r.file("checkpoints", corrupt[0]))
        expect(v.returncode == 2 and "model.pt: SHA-256 mismatch" in v.stdout, v.stdout)


def test_steps_lost_and_goodput():
    with RunDir() as r:
        s = abort_then_resume(r, 13, SYNC)  # checkpoint at 10, logged up to 13: 3 steps lost
        expect(s["steps_lost"] == 3, f"steps_lost {s['steps_lost']}")
        expect(abs(s["goodput"] - 48 / 51) < 1e-9, f"goodput {s['goodput']}")


def image_folder(root):
    """A small two-class RGB image set (sizes vary, as in real folders) for image_folder."""
    from PIL import Image
    for split, n in (("train", 24), ("val", 8)):
        for c, tint in (("a", 40), ("b", 200)):
            os.makedirs(os.path.join(root, split, c))
            for i in range(n):
                w, h = 18 + i % 5, 16 + i % 3
                img = Image.new("RGB", (w, h), (tint, (i * 37) % 255, 255 - tint))
                img.putpixel((i % w, i % h), (255, 255, 255))
                img.save(os.path.join(root, split, c, f"{i:03d}.png"))


# Each variant trains from scratch once without interruption, then again killed (abort after a
# random step, as kill -9 would) and resumed; both must end with the same parameters.
VARIANTS = {
    "adamw + onecycle + grad_accum 2 + resized_crop + 2 threads": (
        "optim.name=adamw", "optim.lr=0.003", "sched.name=onecycle", "train.grad_accum=2", "run.threads=2",
        "data.augment=[flip,resized_crop,erase]", "data.image_size=16", "train.epochs=2"),
    "multistep with warmup, clipping, label smoothing, rotate/translate": (
        "sched.name=multistep", "sched.milestones=[1]", "sched.warmup_epochs=0.5", "train.clip_grad_norm=1.0",
        "train.label_smoothing=0.1", "data.augment=[vflip,rotate,translate]", "train.epochs=2"),
    "rmsprop centered with momentum (its square_avg, grad_avg and momentum state) + cosine": (
        "optim.name=rmsprop", "optim.lr=0.001", "optim.alpha=0.9", "optim.eps=0.0316", "optim.centered=true",
        "sched.name=cosine", "train.epochs=2"),
    "lamb with layer decay and no decay on norms (per-group step counts, rate scales)": (
        "optim.name=lamb", "optim.lr=0.002", "optim.eps=1e-6", "optim.weight_decay=0.02",
        "optim.no_decay_norm_bias=true", "optim.layer_decay=0.8", "train.epochs=2"),
    "rand_augment (each sample's operations from its own stream) + flip + erase with per-pixel values": (
        "data.augment=[flip,rand_augment,erase]", "data.rand_augment_magnitude=15", "data.erase_value=per_pixel",
        "train.epochs=2"),
}


def test_exact_resume_across_settings():
    for name, overrides in VARIANTS.items():
        ref = baseline(*overrides)
        k = RNG.randrange(1, 31)
        print(f"{name}: abort after step {k}")
        with RunDir() as r:
            s = abort_then_resume(r, k, *overrides)
            expect(s["status"] == "completed", s)
            expect(s["params_sha256"] == ref, f"{name}: killed at step {k}: params differ after resume")


def test_exact_resume_on_an_image_folder():
    with RunDir() as data:
        image_folder(data.file("imgs"))
        overrides = ("data.name=image_folder", f"data.root={data.file('imgs')}", "data.image_size=16",
                     "model.in_channels=3", "data.batch_size=8", "data.augment=[flip,resized_crop]",
                     "checkpoint.every_steps=4", "train.epochs=2")
        ref = baseline(*overrides)
        for k in sorted(RNG.sample(range(1, 12), 2)):
            with RunDir() as r:
                s = abort_then_resume(r, k, *overrides)
                expect(s["params_sha256"] == ref, f"image_folder: killed at step {k}: params differ after resume")


GOLDEN = os.path.join(DATA, "golden", "step-00000020")


# The CPU kernels' numerics pinned to what every x86-64 machine has (ATen's default kernels, oneDNN
# up to SSE4.1, MKL's compatible path), as when the golden checkpoint was made: an AVX-512 machine
# and an AVX2 one otherwise compute different last bits, and the golden's weights would fit only one.
PORTABLE = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"}


def test_golden_checkpoint_trains_on():
    """A checkpoint committed by an earlier dlrun (tests/e2e/data/golden/README.md: tiny.yaml
    stopped after step 20) loads, and training on from it ends where an uninterrupted run does;
    a checkpoint written now at the same step holds the same files, tensors and state.json keys
    and values."""
    with RunDir() as ref:
        train(TINY, ref.path, env=PORTABLE)
        uninterrupted = ref.summary()["params_sha256"]
    with RunDir() as r:
        shutil.copytree(GOLDEN, r.file("checkpoints", "step-00000020"))
        p = train(TINY, r.path, env=PORTABLE)
        expect("differs from the checkpoint" not in p.stdout, p.stdout[-2000:])
        s = r.summary()
        expect(s["resumed_from_step"] == 20, f"resumed from {s['resumed_from_step']}")
        expect(s["params_sha256"] == uninterrupted, "training on from the golden checkpoint ends with other parameters")
    with RunDir() as r:  # today's checkpoint of step 20, beside the golden one
        train(TINY, r.path, SYNC, env={"DLRUN_FAULT": "abort_at_step:21"}, check=None)
        now = r.file("checkpoints", "step-00000020")
        manifests = [json.load(open(os.path.join(d, "manifest.json"))) for d in (GOLDEN, now)]
        files = [sorted(f["name"] for f in m["files"]) for m in manifests]
        expect(files[0] == files[1], f"checkpoint files: golden {files[0]}, now {files[1]}")
        states = [json.load(open(os.path.join(d, "state.json"))) for d in (GOLDEN, now)]
        # Keys added since the golden checkpoint was made, each optional when a checkpoint is
        # loaded (the golden one loads above without them): dataset (what `dlrun predict` needs)
        # monitor (checkpoint.keep_best, train.early_stop) and bad_samples (data.on_bad_sample).
        added = {"dataset", "monitor", "bad_samples"}
        expect(set(states[0]) <= set(states[1]) and set(states[1]) - set(states[0]) == added,
               f"state.json keys: golden {sorted(states[0])}, now {sorted(states[1])}")
        for key in states[0]:
            if key not in ("time", "versions", "config_hash"):  # config_hash: checkpoint.async=false here
                expect(states[0][key] == states[1][key], f"state.json {key}: golden {states[0][key]}, now {states[1][key]}")
        # The tensor files: the same names, dtypes and shapes, as Python's torch.load sees them.
        script = ("import sys, torch\n"
                  "for stem in ('model', 'optim', 'rng-rank00000'):\n"
                  "    d = torch.load(f'{sys.argv[1]}/{stem}.pt')\n"
                  "    print(stem, [(k, str(v.dtype), tuple(v.shape)) for k, v in d.items()])\n")
        seen = [subprocess.run([sys.executable, "-c", script, d], capture_output=True, text=True, check=True).stdout
                for d in (GOLDEN, now)]
        expect(seen[0] == seen[1], f"tensor files differ:\ngolden {seen[0]}\nnow {seen[1]}")


if __name__ == "__main__":
    main([test_kill_at_random_steps, test_external_kill_9_at_random_moments, test_kill_at_every_checkpoint_write_point,
          test_corrupt_checkpoint_is_skipped_not_deleted, test_steps_lost_and_goodput,
          test_exact_resume_across_settings, test_exact_resume_on_an_image_folder, test_golden_checkpoint_trains_on])
