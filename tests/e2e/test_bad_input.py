"""Bad input stops with exit 2 and a message naming the file or the difference: corrupt
data files, incompatible resumes, unsafe fresh starts, bad checkpoint paths."""
import gzip
import json
import os
import re
import shutil

from common import RunDir, cfg, dlrun, expect, main, train

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


def test_undecodable_image_mid_run():
    """image_folder decodes lazily: a corrupt JPEG met during training stops the run with exit
    2 naming the file, and summary.json says the run failed."""
    from PIL import Image
    with RunDir() as r:
        root = r.file("imgs")
        for split in ("train", "val"):
            for c in ("cat", "dog"):
                os.makedirs(os.path.join(root, split, c))
                for i in range(8):
                    Image.new("RGB", (20, 18), (i * 30 % 255, 80 if c == "cat" else 200, 40)).save(
                        os.path.join(root, split, c, f"{i}.png"))
        with open(os.path.join(root, "train", "dog", "00_broken.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 definitely not a jpeg")
        p = dlrun("train", TINY, "data.name=image_folder", f"data.root={root}", "data.image_size=16",
                  "model.in_channels=3", "data.augment=[]", "data.batch_size=4", "data.workers=0",
                  "data.shuffle=false", "train.epochs=1", "--run-dir", r.file("run"), check=2)
        expect("00_broken.jpg" in p.stdout, p.stdout[-1500:])
        with open(r.file("run", "summary.json")) as f:
            s = json.load(f)
        expect(s["status"] == "failed" and s["steps"] > 0, s)


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


if __name__ == "__main__":
    main([test_corrupt_idx_files, test_incompatible_resume_is_refused, test_fresh_start_does_not_mix_runs,
          test_bad_resume_path, test_undecodable_image_mid_run, test_nonfinite_loss_stops_the_run_naming_the_step,
          test_nonfinite_steps_can_be_skipped_and_counted, test_config_validate_refuses_what_train_refuses])
