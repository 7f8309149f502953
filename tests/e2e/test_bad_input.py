"""Bad input stops with exit 2 and a message naming the file or the difference: corrupt
data files, incompatible resumes, unsafe fresh starts, bad checkpoint paths, damaged or foreign
checkpoints, hostile configs and data files - and the run directory stays exactly as it was."""
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys

from common import DLRUN, SRC, RunDir, cfg, dlrun, environment, expect, main, snapshot, train

TINY = cfg("tiny.yaml")
FMNIST = "/usr/share/datasets/fashion-mnist"


def test_corrupt_idx_files():
    expect(os.path.isdir(FMNIST), f"{FMNIST} is missing: install Debian's dataset-fashion-mnist (scripts/setup.sh does)")
    with RunDir() as r:
        root = r.file("data")
        os.makedirs(root)
        for f in os.listdir(FMNIST):
            shutil.copy(os.path.join(FMNIST, f), root)
        imgs = os.path.join(root, "t10k-images-idx3-ubyte.gz")
        raw = gzip.open(imgs).read()
        cases = {
            "truncated": raw[: len(raw) // 2],
            "bad magic": b"\x00\x00\x09\x03" + raw[4:],
        }
        for what, data in cases.items():
            with gzip.open(imgs, "wb") as f:
                f.write(data)
            p = dlrun("train", cfg("tiny.yaml"), "data.name=fashion_mnist", f"data.root={root}",
                      "data.synthetic_shape=[1,28,28]", "--run-dir", r.file("run"), check=2)
            expect("t10k-images-idx3-ubyte" in p.stdout, f"{what}: message does not name the file:\n{p.stdout}")
            expect(not os.path.exists(r.file("run", "checkpoints")), f"{what}: a checkpoint was written")


def test_incompatible_resume_is_refused():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=5")
        p = dlrun("train", TINY, "train.max_steps=10", "model.width=16", "--run-dir", r.path, check=2)
        expect("architecture" in p.stdout and "conv" in p.stdout, p.stdout[-1500:])
        p = dlrun("train", TINY, "train.max_steps=10", "optim.name=adamw", "--run-dir", r.path, check=2)
        expect("optim.name=sgd" in p.stdout and "adamw" in p.stdout, p.stdout[-1500:])
        p = dlrun("train", TINY, "train.max_steps=10", "--run-dir", r.path, check=0)
        expect("different schedule length" in p.stdout, "no warning for a changed schedule length")


def test_fresh_start_does_not_mix_runs():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=5")
        p = dlrun("train", TINY, "train.max_steps=5", "--resume", "never", "--run-dir", r.path, check=2)
        expect("--force" in p.stdout, p.stdout[-1000:])
        dlrun("train", TINY, "train.max_steps=5", "--resume", "never", "--force", "--run-dir", r.path, check=0)
        aside = [d for d in os.listdir(r.path) if d.startswith("aside-")]
        expect(len(aside) == 1 and os.listdir(os.path.join(r.path, aside[0], "checkpoints")),
               "old checkpoints were not kept")


def test_bad_resume_path():
    with RunDir() as r:
        p = dlrun("train", TINY, "--resume", r.file("nope"), "--run-dir", r.path, check=2)
        expect("nope" in p.stdout, p.stdout[-800:])


def folder_with_a_broken_image(root):
    """image_folder with 8 PNGs per class and split, and train/dog/00_broken.jpg (dataset index 9
    of 17: read in step 3 of each epoch of 4 steps of batch 4 without shuffling)."""
    from PIL import Image
    for split in ("train", "val"):
        for c in ("cat", "dog"):
            os.makedirs(os.path.join(root, split, c))
            for i in range(8):
                Image.new("RGB", (20, 18), (i * 30 % 255, 80 if c == "cat" else 200, 40)).save(
                    os.path.join(root, split, c, f"{i}.png"))
    with open(os.path.join(root, "train", "dog", "00_broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 definitely not a jpeg")


def folder_run(root, *overrides):
    return ("data.name=image_folder", f"data.root={root}", "data.image_size=16", "model.in_channels=3",
            "data.augment=[]", "data.batch_size=4", "data.workers=0", "data.shuffle=false", *overrides)


def test_undecodable_image_mid_run():
    """image_folder decodes lazily: a corrupt JPEG met during training stops the run with exit
    2 naming the file, and summary.json says the run failed."""
    with RunDir() as r:
        root = r.file("imgs")
        folder_with_a_broken_image(root)
        p = dlrun("train", TINY, *folder_run(root, "train.epochs=1"), "--run-dir", r.file("run"), check=2)
        expect("00_broken.jpg" in p.stdout, p.stdout[-1500:])
        with open(r.file("run", "summary.json")) as f:
            s = json.load(f)
        expect(s["status"] == "failed" and s["steps"] > 0, s)


def test_a_damaged_image_is_skipped_named_and_counted_exactly_across_a_kill():
    """data.on_bad_sample: skip. A broken training image is replaced by the next one that decodes
    (each epoch), named once (a warning, a bad_sample event) and counted in summary.json; killed
    after the second read and resumed from the checkpoint before it, the run counts the same
    reads and ends with the same parameters. A broken evaluation image is left out of the
    figures. More distinct bad samples than data.max_bad_samples end the run with exit 2."""
    with RunDir() as r:
        root = r.file("imgs")
        folder_with_a_broken_image(root)
        with open(os.path.join(root, "val", "cat", "zz_broken.png"), "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n cut short")
        skip = folder_run(root, "train.epochs=3", "data.on_bad_sample=skip")
        p = dlrun("train", TINY, *skip, "--run-dir", r.file("whole"), check=0)
        with open(r.file("whole", "summary.json")) as f:
            s = json.load(f)
        b = s["bad_samples"]
        expect(b["policy"] == "skip" and b["distinct"] == 1 and b["reads_replaced"] == 3, b)
        expect(b["samples"][0]["index"] == 9 and "00_broken.jpg" in b["samples"][0]["error"], b)
        expect(p.stdout.count("training sample 9 is replaced") == 1, p.stdout[-2000:])
        events = [json.loads(line) for line in open(r.file("whole", "metrics.jsonl"))]
        expect([e["index"] for e in events if e.get("event") == "bad_sample"] == [9], "bad_sample events")
        expect(s["eval"]["samples"] == 16 and "zz_broken.png" in p.stdout, (s["eval"], p.stdout[-2000:]))
        # Killed after step 7 (the checkpoint of step 5 holds the first read; step 7 read it again).
        sync = "checkpoint.async=false"  # the save of step 5 committed before the kill, however busy the machine
        dlrun("train", TINY, *skip, sync, "--run-dir", r.file("killed"), env={"DLRUN_FAULT": "abort_at_step:7"},
              check=None)
        dlrun("train", TINY, *skip, sync, "data.workers=2", "--run-dir", r.file("killed"), check=0)
        with open(r.file("killed", "summary.json")) as f:
            k = json.load(f)
        expect(k["resumed_from_step"] in (4, 5) and k["bad_samples"] == b, (k["resumed_from_step"], k["bad_samples"], b))
        expect(k["params_sha256"] == s["params_sha256"], "a resumed run with a skipped sample differs")
        # Two ranks (each reads half of every batch): the same sample replaced by the same one, the
        # ranks' bad samples merged at the step boundary into one count.
        from s3_server import free_port
        two = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "dlrun-launch"), "--nproc-per-node", "2",
                              "--master-port", str(free_port()), "--", DLRUN, "train", TINY, *skip, "log.progress=none",
                              "--run-dir", r.file("two")], env=environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=300)
        expect(two.returncode == 0, two.stdout[-3000:])
        with open(r.file("two", "summary.json")) as f:
            t = json.load(f)
        expect(t["world_size"] == 2 and t["bad_samples"] == b, (t["bad_samples"], b))
        # The cap counts distinct samples.
        with open(os.path.join(root, "train", "cat", "00_broken.png"), "wb") as f:
            f.write(b"not a png")
        p = dlrun("train", TINY, *skip, "data.max_bad_samples=1", "--run-dir", r.file("capped"), check=2)
        expect("2 distinct training samples did not decode, more than data.max_bad_samples (1)" in p.stdout,
               p.stdout[-1500:])


DIVERGE = ("model.name=mlp", "model.hidden=[32]", "optim.lr=1000", "sched.name=constant", "sched.warmup_steps=0")


def test_nonfinite_loss_stops_the_run_naming_the_step():
    # every_steps 1: found when the loss is read; 7: found before the next save (every 5 steps),
    # with the loss still on the device - no checkpoint may be written from spoiled weights.
    for every in (1, 7):
        with RunDir() as r:
            p = train(TINY, r.path, *DIVERGE, f"log.every_steps={every}", check=1)
            expect("the training loss or a gradient is not finite" in p.stdout, p.stdout[-1500:])
            s = r.summary()
            m = re.search(r"^step (\d+): the training loss", s["error"])
            expect(s["status"] == "failed" and m, s)
            bad = int(m.group(1))
            saved = [int(d[5:]) for d in os.listdir(r.file("checkpoints")) if re.fullmatch(r"step-\d+", d)]
            expect(saved and max(saved) < bad, f"log.every_steps={every}: bad step {bad}, checkpoints {saved}")
            expect(s["checkpoint"] and int(s["checkpoint"][-8:]) == max(saved), s)
            dlrun("ckpt", "verify", s["checkpoint"], check=0)


def test_nonfinite_steps_can_be_skipped_and_counted():
    with RunDir() as r:
        train(TINY, r.path, *DIVERGE, "train.nonfinite=skip")
        s = r.summary()
        skips = [m for m in r.metrics() if m.get("event") == "skip"]
        expect(s["status"] == "completed" and s["skipped_steps"] > 0 and sum(m["steps"] for m in skips) == s["skipped_steps"], s)
        expect(all("non-finite" in m["reason"] for m in skips), skips[:2])


def test_config_validate_refuses_what_train_refuses():
    """`config validate` runs train's start-up checks: the data must fit the model, and the
    device must exist here."""
    p = dlrun("config", "validate", TINY, "model.in_channels=3", "data.synthetic_shape=[3,16,16]",
              "data.name=fashion_mnist", check=2)
    expect("model.in_channels: data.name=fashion_mnist has 1 channel(s) but model.in_channels is 3" in p.stdout,
           p.stdout[-800:])
    info = json.loads(dlrun("info", "--json", check=0).stdout)
    if not info["torch"]["cuda_available"]:
        p = dlrun("config", "validate", TINY, "run.device=cuda", check=2)
        expect("CUDA is not available here" in p.stdout, p.stdout[-800:])
    else:
        dlrun("config", "validate", TINY, "run.device=cuda", check=0)


def newest_checkpoint(r):
    with open(r.file("checkpoints", "LATEST")) as f:
        return r.file("checkpoints", f.read().strip())


def test_damaged_checkpoints_are_refused_and_nothing_changes():
    """--resume PATH and eval --checkpoint PATH on a damaged checkpoint: exit 2 naming the file and
    the reason; the run directory is byte for byte as it was."""
    damages = {
        "truncated model.pt": lambda d: open(os.path.join(d, "model.pt"), "r+b").truncate(100),
        "zero-length model.pt": lambda d: open(os.path.join(d, "model.pt"), "w").close(),
        "missing optim.pt": lambda d: os.remove(os.path.join(d, "optim.pt")),
        "bit-flipped state.json": lambda d: flip(os.path.join(d, "state.json"), 10),
        "manifest lies about a size": lambda d: rewrite_manifest(d, lambda m: m["files"][0].update(bytes=m["files"][0]["bytes"] + 1)),
        "manifest names ../": lambda d: rewrite_manifest(d, lambda m: m["files"][0].update(name="../model.pt")),
        "manifest names an absolute path": lambda d: rewrite_manifest(d, lambda m: m["files"][0].update(name="/etc/passwd")),
        "model.pt is a symlink": lambda d: relink(os.path.join(d, "model.pt")),
        "model.pt is a directory": lambda d: (os.remove(os.path.join(d, "model.pt")), os.mkdir(os.path.join(d, "model.pt"))),
        "manifest.json is a directory": lambda d: (os.remove(os.path.join(d, "manifest.json")), os.mkdir(os.path.join(d, "manifest.json"))),
        "a newer format version": lambda d: rewrite_manifest(d, lambda m: m.update(format_version=99)),
    }
    reasons = {"truncated model.pt": "model.pt: size", "zero-length model.pt": "model.pt: size 0",
               "missing optim.pt": "optim.pt: missing", "bit-flipped state.json": "SHA-256",
               "manifest lies about a size": "size", "manifest names ../": "invalid file name",
               "manifest names an absolute path": "invalid file name", "model.pt is a symlink": "symbolic link",
               "model.pt is a directory": "a directory where a file is expected",
               "manifest.json is a directory": "manifest.json", "a newer format version": "newer dlrun"}
    for what, damage in damages.items():
        with RunDir() as r:
            train(TINY, r.path, "train.max_steps=10")
            ck = newest_checkpoint(r)
            damage(ck)
            before = snapshot(r.path)
            p = dlrun("train", TINY, "train.max_steps=20", "--resume", ck, "--run-dir", r.path, check=2)
            expect(os.path.basename(ck) in p.stdout and reasons[what] in p.stdout, f"{what}: {p.stdout[-1200:]}")
            p = dlrun("eval", TINY, "--checkpoint", ck, "--run-dir", r.path, check=2)
            expect(reasons[what] in p.stdout, f"{what} (eval): {p.stdout[-1200:]}")
            dlrun("ckpt", "verify", ck, check=2)
            expect(snapshot(r.path) == before, f"{what}: the run directory changed")


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


def rewrite_manifest(ckpt_dir, change):
    path = os.path.join(ckpt_dir, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    change(m)
    with open(path, "w") as f:
        json.dump(m, f)


def relink(path):
    """Replace `path` by a symbolic link to an identical copy outside the checkpoint."""
    outside = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "outside-" + os.path.basename(path))
    shutil.copy(path, outside)
    os.remove(path)
    os.symlink(outside, path)


def test_resume_auto_refuses_a_checkpoint_from_a_newer_dlrun():
    """Skipping it as if corrupt would start the run over beside it: exit 2, nothing changed."""
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=10")
        rewrite_manifest(newest_checkpoint(r), lambda m: m.update(format_version=2))
        before = snapshot(r.path)
        p = dlrun("train", TINY, "train.max_steps=20", "--run-dir", r.path, check=2)
        expect("newer dlrun" in p.stdout and "step-00000010" in p.stdout, p.stdout[-1200:])
        expect(snapshot(r.path) == before, "the run directory changed")


def test_another_models_checkpoint_is_refused_by_eval():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=5")
        p = dlrun("eval", TINY, "model.width=16", "--checkpoint", newest_checkpoint(r), check=2)
        expect("step-00000005" in p.stdout and "has shape 8x1x3x3, the model expects 16x1x3x3" in p.stdout,
               p.stdout[-1200:])
        p = dlrun("eval", TINY, "model.name=mlp", "--checkpoint", newest_checkpoint(r), check=2)
        expect("step-00000005" in p.stdout, p.stdout[-1200:])


def test_hostile_configs_are_bad_input_naming_the_file():
    with RunDir() as r:
        cases = {
            "binary garbage": bytes((i * 131 + 7) % 256 for i in range(4096)),
            "an alias that contains itself": b"model: {name: mlp}\ndata: {name: synthetic}\nx: &a [*a]\n",
            "deep nesting": b"model: {name: mlp}\ndata: " + b"[" * 5000 + b"]" * 5000 + b"\n",
            "a 100000-digit number": b"model: {name: mlp}\ndata: {name: synthetic}\ntrain: {epochs: " + b"9" * 100000 + b"}\n",
            "NUL bytes": b"model: {name: mlp}\0\0\0",
        }
        for what, text in cases.items():
            path = r.file("exp.yaml")
            with open(path, "wb") as f:
                f.write(text)
            for cmd in (("config", "validate", path), ("train", path, "--run-dir", r.file("run"))):
                p = dlrun(*cmd, check=2)  # text mode: raw bytes in the output would not decode
                expect("exp.yaml" in p.stdout and all(c >= " " or c in "\n\t" for c in p.stdout),
                       f"{what}: {cmd[0]}: {p.stdout[-600:]!r}")
            expect(not os.path.exists(r.file("run")), f"{what}: a run directory was made")
        for huge in ("data.batch_size=4611686018427387904", "train.epochs=99999999999999999999",
                     "optim.lr=1e400", "train.max_steps=-9223372036854775808"):
            p = dlrun("config", "validate", TINY, huge, check=2)
            expect(huge.split("=")[0] in p.stdout, f"{huge}: {p.stdout[-600:]}")
        # A FIFO or a device as the config: refused at once, not read forever.
        fifo = r.file("fifo.yaml")
        os.mkfifo(fifo)
        p = dlrun("config", "validate", fifo, check=2, timeout=60)
        expect("not a regular file" in p.stdout, p.stdout[-600:])
        p = dlrun("config", "validate", "/dev/zero", check=2, timeout=60)
        expect("not a regular file" in p.stdout, p.stdout[-600:])
        os.mkdir(r.file("dir.yaml"))
        p = dlrun("config", "validate", r.file("dir.yaml"), check=2)
        expect("is a directory" in p.stdout, p.stdout[-600:])


def test_absurd_data_headers_and_directories_for_files():
    with RunDir() as r:
        root = r.file("data")
        os.makedirs(root)
        labels = struct.pack(">II", 0x801, 4) + bytes(4)
        for what, images in {
            "dimensions that overflow 64 bits": struct.pack(">IIII", 0x803, 4, 1 << 31, 1 << 31),
            "counts far beyond the file": struct.pack(">IIII", 0x803, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF) + bytes(64),
            "a zero dimension": struct.pack(">IIII", 0x803, 4, 0, 28),
        }.items():
            for split in ("train", "t10k"):
                with open(os.path.join(root, f"{split}-images-idx3-ubyte"), "wb") as f:
                    f.write(images)
                with open(os.path.join(root, f"{split}-labels-idx1-ubyte"), "wb") as f:
                    f.write(labels)
            p = dlrun("train", TINY, "data.name=fashion_mnist", f"data.root={root}", "--run-dir", r.file("run"), check=2)
            expect("images-idx3-ubyte" in p.stdout, f"{what}: {p.stdout[-800:]}")
            expect(not os.path.exists(r.file("run", "checkpoints")), f"{what}: a checkpoint was written")
        os.remove(os.path.join(root, "train-images-idx3-ubyte"))
        os.mkdir(os.path.join(root, "train-images-idx3-ubyte"))
        p = dlrun("train", TINY, "data.name=fashion_mnist", f"data.root={root}", "--run-dir", r.file("run"), check=2)
        expect("train-images-idx3-ubyte" in p.stdout and "not a regular file" in p.stdout, p.stdout[-800:])


if __name__ == "__main__":
    main([test_corrupt_idx_files, test_incompatible_resume_is_refused, test_fresh_start_does_not_mix_runs,
          test_bad_resume_path, test_undecodable_image_mid_run,
          test_a_damaged_image_is_skipped_named_and_counted_exactly_across_a_kill,
          test_nonfinite_loss_stops_the_run_naming_the_step,
          test_nonfinite_steps_can_be_skipped_and_counted, test_config_validate_refuses_what_train_refuses,
          test_damaged_checkpoints_are_refused_and_nothing_changes,
          test_resume_auto_refuses_a_checkpoint_from_a_newer_dlrun, test_another_models_checkpoint_is_refused_by_eval,
          test_hostile_configs_are_bad_input_naming_the_file, test_absurd_data_headers_and_directories_for_files])
