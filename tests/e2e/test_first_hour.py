"""What a newcomer meets in the first hour: every shipped config and every documented
`dlrun train configs/...` example is accepted by `config validate` exactly when `train` accepts it
(with the same first error otherwise); showing and describing a config never needs its data;
--force means what it says; `eval --checkpoint` reads what `export` writes and names the kind of
anything else; fine-tuning from pretrained weights (model.init); a validation split with the best
checkpoint and early stopping, resumed exactly; `dlrun predict` with the run's class names."""
import glob
import json
import os
import socket
import re
import subprocess
import time

from common import SRC, RunDir, cfg, dlrun, environment, expect, main, train

TINY = cfg("tiny.yaml")


def shipped_configs():
    return sorted(glob.glob(os.path.join(SRC, "configs", "**", "*.yaml"), recursive=True))


def documented_examples():
    """(config, overrides) of every `dlrun train configs/X.yaml key=value ...` in the README and
    docs/ (commands started by a launcher run under its world size, and are left out)."""
    found = set()
    pattern = re.compile(r"(?:^|[\s`$])(?:build/)?dlrun train (configs/\S+?\.yaml)((?: [\w.]+=[^\s`]+)*)")
    for path in [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md"))):
        with open(path) as f:
            for m in pattern.finditer(f.read()):
                found.add((m.group(1), tuple(m.group(2).split())))
    return sorted(found)


def first_error(text):
    lines = [line for line in text.splitlines() if line.startswith("dlrun: error:")]
    return lines[0] if lines else ""


def check_agreement(config, overrides, env=None):
    """config validate accepts exactly what train accepts; both refuse with the same first error.
    Where validate accepts, train is stopped by a SIGTERM once its data is loaded (exit 75): it got
    past every check made before the data. Where validate refuses, train runs until it refuses too
    (model.init is read later, with the checkpoint) -- or, if it does not, until a SIGTERM after its
    first step (exit 75, a disagreement)."""
    t0 = time.monotonic()
    v = dlrun("config", "validate", config, *overrides, env=env)
    took = time.monotonic() - t0
    fault = "signal_during:startup" if v.returncode == 0 else "signal_at_step:1"
    with RunDir() as r:
        t = dlrun("train", config, *overrides, "--run-dir", r.path, "log.progress=none",
                  env={**(env or {}), "DLRUN_FAULT": fault})
    what = f"{os.path.relpath(config, SRC)} {' '.join(overrides)}"
    expect(v.returncode in (0, 2), f"{what}: validate exited {v.returncode}\n{v.stdout[-1500:]}")
    expect(t.returncode in (2, 75), f"{what}: train exited {t.returncode}\n{t.stdout[-1500:]}")
    expect((v.returncode == 0) == (t.returncode == 75),
           f"{what}: validate exited {v.returncode} but train {'accepted' if t.returncode == 75 else 'refused'} it:\n"
           f"validate: {v.stdout[-800:]}\ntrain: {t.stdout[-800:]}")
    if v.returncode == 2:
        expect(first_error(v.stdout) == first_error(t.stdout),
               f"{what}: different errors:\nvalidate: {first_error(v.stdout)}\ntrain: {first_error(t.stdout)}")
    print(f"  {what}: validate {'ok' if v.returncode == 0 else 'refused'} in {took:.2f} s"
          f"{'' if v.returncode == 0 else ' (' + first_error(v.stdout)[:100] + ')'}")
    return v.returncode


def test_validate_accepts_exactly_what_train_accepts():
    configs = shipped_configs()
    expect(len(configs) >= 10, configs)
    codes = {}
    for c in configs:
        codes[os.path.relpath(c, SRC)] = check_agreement(c, ())
    # On this machine (no GPU, no CIFAR/ImageNet files) those two are refused, the rest accepted.
    expect(codes["configs/quickstart.yaml"] == 0 and codes["configs/synthetic/resnet50.yaml"] == 0, codes)
    examples = documented_examples()
    expect(any(c == "configs/quickstart.yaml" for c, _ in examples), examples)
    for c, overrides in examples:
        if overrides:  # (without overrides: one of the shipped configs above)
            check_agreement(os.path.join(SRC, c), overrides)
    # fp16 on run.device: auto is refused where auto means the CPU, by both, naming the resolution.
    v = dlrun("config", "validate", TINY, "run.device=auto", "amp.enabled=true", "amp.dtype=fp16", check=2)
    expect("fp16 autocast needs a CUDA device, but run.device=auto resolves to cpu here" in v.stdout, v.stdout)
    check_agreement(TINY, ("run.device=auto", "amp.enabled=true", "amp.dtype=fp16"))
    check_agreement(TINY, ("run.device=auto", "train.cuda_graphs=true"))
    # An image_folder without data.image_size (its images vary in size) is refused by both.
    with RunDir() as d:
        os.makedirs(d.file("imgs", "a"))
        v = dlrun("config", "validate", TINY, "data.name=image_folder", f"data.root={d.file('imgs')}", check=2)
        expect("data.image_size: the images of an image_folder vary in size" in v.stdout, v.stdout)
        check_agreement(TINY, ("data.name=image_folder", f"data.root={d.file('imgs')}"))


def test_validate_checks_what_train_meets_before_its_first_step():
    """An average that would take nothing, a profile that does not exist, a metrics port in use:
    refused by validate as by train, with the same error."""
    swa = ("optim.swa_start_epoch=1", "optim.swa_lr=0.01")
    expect(check_agreement(TINY, (*swa, "train.max_steps=24")) == 2, "16 steps an epoch: no epoch end before step 24")
    v = dlrun("config", "validate", TINY, *swa, "train.max_steps=24", check=2)
    expect("end of epoch 2 (step 32" in v.stdout and "nothing would be averaged" in v.stdout, v.stdout)
    expect(check_agreement(TINY, (*swa, "train.max_steps=32")) == 0, "step 32 ends epoch 2: one average")
    with RunDir() as d:
        for name in ("config", "credentials"):
            open(d.file(name), "w").close()
        env = {"AWS_PROFILE": "nope", "AWS_CONFIG_FILE": d.file("config"), "AWS_SHARED_CREDENTIALS_FILE":
               d.file("credentials"), "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": None,
               "AWS_SECRET_ACCESS_KEY": None}
        expect(check_agreement(TINY, ("checkpoint.remote=s3://bucket/runs",), env=env) == 2, "AWS_PROFILE=nope")
        v = dlrun("config", "validate", TINY, "checkpoint.remote=s3://bucket/runs", env=env, check=2)
        expect("AWS_PROFILE=nope: no such profile" in v.stdout, v.stdout)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        expect(check_agreement(TINY, (f"log.metrics_port={port}",)) == 2, f"port {port} in use")
        v = dlrun("config", "validate", TINY, f"log.metrics_port={port}", check=2)
        expect(f"cannot listen on 127.0.0.1:{port}" in v.stdout, v.stdout)


def test_train_prints_a_short_header_and_the_whole_config_on_request():
    with RunDir() as r:
        p = train(TINY, r.path, "train.max_steps=1", "optim.lr=0.07")
        head = p.stdout.split("dlrun: model ")[0]
        expect(f"config {TINY}, run directory {r.path}" in head and "  optim.lr: 0.07" in head, head)
        # tiny.yaml sets optim.momentum to its default (0.9): not a difference.
        expect("  model.name: convnet" in head and "  optim.momentum" not in head, head)
        expect(len(head.splitlines()) < 40 and "dlrun: resolved config:" not in head, head)
        expect(open(r.file("config.yaml")).read().count("\n") > 100, "config.yaml is not the whole config")
    with RunDir() as r:
        p = train(TINY, r.path, "train.max_steps=1", "--print-config")
        expect("dlrun: resolved config:" in p.stdout and "  metrics_port: 0" in p.stdout, p.stdout[:3000])


def test_what_a_user_tripped_on_is_named():
    with RunDir() as r:
        # A glob in data.shards (a shell would expand it; a config does not).
        p = train(TINY, r.path, "data.name=webdataset", f"data.shards={r.path}/*.tar", "data.image_size=16",
                  "train.eval_at_end=false", "train.eval_every_epochs=0", check=2)
        expect("is a glob pattern, which dlrun does not expand" in p.stdout and "brace pattern" in p.stdout,
               p.stdout[-1500:])
        # --resume given a folder that is not a checkpoint.
        os.makedirs(r.file("images"))
        open(r.file("images", "a.jpg"), "wb").close()
        p = dlrun("train", TINY, "--run-dir", r.file("run"), "--resume", r.file("images"), check=2)
        expect("not a checkpoint directory" in p.stdout and "partial write" not in p.stdout, p.stdout[-1500:])
        # A data.root set by hand that does not exist: no advice to install the Debian dataset.
        p = train(TINY, r.file("run2"), "data.name=fashion_mnist", f"data.root={r.file('nowhere')}", check=2)
        expect("data directory does not exist" in p.stdout and "dataset-fashion-mnist" not in p.stdout and
               "check data.root" in p.stdout, p.stdout[-1500:])


def test_show_and_info_need_no_data():
    for c in shipped_configs():
        env = {"CIFAR10_ROOT": "/nonexistent/cifar", "IMAGENET_ROOT": "/nonexistent/imagenet"}
        p = dlrun("config", "show", c, env=env)
        expect(p.returncode == 0 and "model:" in p.stdout, f"config show {c}: exit {p.returncode}\n{p.stdout[-800:]}")
        p = dlrun("info", c, "--json", env=env)
        expect(p.returncode == 0, f"info {c}: exit {p.returncode}\n{p.stdout[-800:]}")
        expect(json.loads(p.stdout[p.stdout.index("{"):])["fast_paths"]["config"] == c, p.stdout[-400:])
    # validate, which checks what train checks, still names the missing directory.
    p = dlrun("config", "validate", os.path.join(SRC, "configs", "imagenet", "resnet50.yaml"),
              env={"IMAGENET_ROOT": "/nonexistent/imagenet"}, check=2)
    expect("data directory does not exist: /nonexistent/imagenet" in p.stdout, p.stdout)


def test_force_without_resume_never_is_refused():
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=3")
        before = r.summary()
        p = train(TINY, r.path, "train.max_steps=6", extra=("--force",), check=2)
        expect("--force only applies with --resume never" in p.stdout and "--resume is auto" in p.stdout, p.stdout)
        expect(r.summary() == before, "the refused command changed the run")
        p = train(TINY, r.path, "train.max_steps=6", extra=("--resume", "never", "--force"))
        expect("--force: the previous run was moved to" in p.stdout, p.stdout[-1500:])
        expect(r.summary()["steps"] == 6 and r.summary()["resumed_from_step"] == -1, r.summary())


def eval_json(*args, check=0):
    p = dlrun("eval", TINY, "--json", *args, check=check)
    return json.loads(p.stdout.strip().splitlines()[-1]) if check == 0 else p.stdout


def test_eval_reads_what_export_writes():
    with RunDir() as r:
        train(TINY, r.path, "train.epochs=1")
        ref = eval_json("--checkpoint", r.path)  # a run directory: the checkpoint a resume takes
        expect(ref["kind"] == "checkpoint" and ref["step"] == 16 and ref["checkpoint"].endswith("step-00000016"), ref)
        for fmt_, fold in (("safetensors", False), ("torch", False), ("safetensors", True), ("torch", True)):
            out = r.file(f"w-{fmt_}-{fold}.bin")
            dlrun("export", "--checkpoint", r.path, "--format", fmt_, "--output", out,
                  *(["--fold-batchnorm"] if fold else []), check=0)
            got = eval_json("--checkpoint", out)
            expect(got["kind"] == ("safetensors file" if fmt_ == "safetensors" else "torch file"), got)
            expect(got["folded_export"] == fold, got)
            expect(got["samples"] == ref["samples"], got)
            tol = 1e-4 if fold else 0.0  # folding rounds differently
            expect(abs(got["loss"] - ref["loss"]) <= tol * max(1.0, ref["loss"]) and
                   abs(got["accuracy"] - ref["accuracy"]) <= (1.0 / ref["samples"] if fold else 0.0), (fmt_, fold, got, ref))
        # Files of other kinds are named, not called corrupt.
        step = os.path.join(r.path, "checkpoints", "step-00000016")
        for path, kind in ((TINY, "a YAML or text file, not model weights"),
                           (os.path.join(step, "manifest.json"), "a JSON file, not model weights"),
                           (os.path.join(step, "optim.pt"), "a checkpoint's optimizer state (optim.pt)")):
            out = eval_json("--checkpoint", path, check=2)
            expect(kind in out and "partial write" not in out and "corrupt" not in out, out)
        out = eval_json("--checkpoint", os.path.join(step, "model.pt"))
        expect(out["kind"] == "torch file" and out["loss"] == ref["loss"], out)
        # Without a config: the run directory's (as predict takes it); an override still applies.
        p = dlrun("eval", "--checkpoint", r.path, "--json", check=0)
        expect(json.loads(p.stdout.strip().splitlines()[-1])["loss"] == ref["loss"], p.stdout[-1500:])
        p = dlrun("eval", "data.eval_batch_size=7", "--checkpoint", r.path, "--json", check=0)
        expect(json.loads(p.stdout.strip().splitlines()[-1])["samples"] == ref["samples"], p.stdout[-1500:])
        p = dlrun("eval", "--checkpoint", r.file("w-torch-False.bin"), check=2)  # an export holds no config
        expect("no config given, and --checkpoint" in p.stdout and "carries none (config.yaml)" in p.stdout, p.stdout)


def python(code, *args):
    """Run `code` in this interpreter (torch, safetensors, PIL installed by the setup script)."""
    return subprocess.run([os.sys.executable, "-c", code, *args], check=True, capture_output=True, text=True).stdout


def test_fine_tune_from_pretrained_weights():
    with RunDir() as r:
        train(TINY, r.file("base"), "train.epochs=1")
        export = r.file("base.safetensors")
        dlrun("export", "--checkpoint", r.file("base"), "--output", export, check=0)
        # A fresh run starts from the export: every tensor loaded, reported, in summary.json.
        p = train(TINY, r.file("ft"), "train.max_steps=2", f"model.init={export}",
                  extra=("--save-init", r.file("init.pt")))
        expect(re.search(r"model.init: \S+base.safetensors \(safetensors file\): loaded (\d+) of \1 tensors; "
                         r"missing: none; unexpected: none", p.stdout), p.stdout[-2500:])
        init = json.load(open(r.file("ft", "summary.json")))["init"]
        expect(init["kind"] == "safetensors file" and init["missing"] == [] and init["loaded"] > 0, init)
        same = python("import sys, torch; from safetensors.torch import load_file\n"
                      "a = torch.load(sys.argv[1]); b = load_file(sys.argv[2])\n"
                      "print(sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a))",
                      r.file("init.pt"), export)
        expect(same.strip() == "True", "the initial weights are not the export's")
        # Another number of classes: the head starts as initialised, and the log says so.
        p = train(TINY, r.file("ft12"), "train.max_steps=1", f"model.init={export}", "model.num_classes=12")
        expect("model.init: the classification head (classifier.1.weight, classifier.1.bias) is re-initialised"
               in p.stdout, p.stdout[-2500:])
        # Resumed, the run continues from its checkpoint: model.init is not read again (gone here).
        ref = train(TINY, r.file("ref"), "train.max_steps=10", f"model.init={export}")
        moved = r.file("moved.safetensors")
        train(TINY, r.file("int"), "train.max_steps=10", f"model.init={export}", "checkpoint.every_steps=4",
              env={"DLRUN_FAULT": "signal_at_step:5"}, check=75)
        os.rename(export, moved)
        train(TINY, r.file("int"), "train.max_steps=10", f"model.init={export}", "checkpoint.every_steps=4")
        expect(json.load(open(r.file("int", "summary.json")))["params_sha256"] ==
               json.load(open(r.file("ref", "summary.json")))["params_sha256"], "resume with model.init differs")
        del ref
        # Weights of another model (strict), and a file that is no weights, are refused at model.init.
        p = train(TINY, r.file("bad"), "train.max_steps=1", f"model.init={moved}", "model.name=mlp", check=2)
        expect("model.init: " in p.stdout and "the weights do not match the model: missing layers." in p.stdout,
               p.stdout[-1500:])
        v = dlrun("config", "validate", TINY, f"model.init={moved}", "model.name=mlp", check=2)
        expect("the weights do not match the model" in v.stdout, v.stdout)
        p = train(TINY, r.file("bad2"), "train.max_steps=1", f"model.init={TINY}", check=2)
        expect("model.init: " in p.stdout and "a YAML or text file, not model weights" in p.stdout, p.stdout[-1500:])
        # not strict: what matches loads, the rest is reported.
        p = train(TINY, r.file("lax"), "train.max_steps=1", f"model.init={moved}", "model.width=16",
                  "model.init_strict=false", check=2)
        expect("shape" in p.stdout, "a shape mismatch is refused even when not strict (as PyTorch does)")


def test_a_torch_save_state_dict_as_torchvision_publishes_it():
    with RunDir() as r:
        path = r.file("resnet18.pth")
        python("import sys, torch, torchvision\n"
               "torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), sys.argv[1])", path)
        p = train(TINY, r.file("run"), "train.max_steps=1", "model.name=resnet18", "model.in_channels=3",
                  "data.synthetic_shape=[3,16,16]", "model.stem=imagenet", f"model.init={path}")
        expect(re.search(r"\(torch file\): loaded (\d+) of \1 tensors; missing: none; unexpected: none", p.stdout),
               p.stdout[-2000:])
        # torch < 1.6's format (older published files): said so, with how to re-save it.
        old = r.file("legacy.pth")
        python("import sys, torch\ntorch.save({'w': torch.zeros(2)}, sys.argv[1], _use_new_zipfile_serialization=False)",
               old)
        p = train(TINY, r.file("run2"), "train.max_steps=1", f"model.init={old}", check=2)
        expect("a legacy torch.save file (torch < 1.6)" in p.stdout and "re-save it once" in p.stdout, p.stdout[-1500:])


VAL = ("data.val_fraction=0.25", "train.epochs=6", "train.eval_every_epochs=1", "checkpoint.keep_best=accuracy",
       "checkpoint.keep_last=1", "checkpoint.every_steps=0", "checkpoint.at_epoch_end=true")


def events(r, name):
    return [m for m in r.metrics() if m.get("event") == name]


def test_validation_split_best_checkpoint_and_early_stop():
    with RunDir() as r:
        p = train(TINY, r.path, *VAL)
        expect("data synthetic: 384 train / 128 validation / 128 test samples" in p.stdout, p.stdout[-3000:])
        vals, tests = events(r, "val"), events(r, "test")
        # The last line names each split's accuracy: the test split's, and the validation split's.
        done = [line for line in p.stdout.splitlines() if line.startswith("dlrun: done:")]
        expect(len(done) == 1 and f"test accuracy {tests[0]['accuracy']:.4f}, validation accuracy "
               f"{vals[-1]['accuracy']:.4f}" in done[0], done)
        expect(len(vals) == 6 and len(tests) == 1 and not events(r, "eval"), [m.get("event") for m in r.metrics()])
        s = r.summary()
        expect(s["eval"]["split"] == "val" and s["test"]["samples"] == 128 and s["eval"]["samples"] == 128, s)
        best = max(vals, key=lambda m: (m["accuracy"], -m["step"]))  # the first of the best
        expect(s["best"]["metric"] == "accuracy" and s["best"]["step"] == best["step"], (s["best"], best))
        name = open(r.file("checkpoints", "BEST")).read().strip()
        expect(name == f"step-{best['step']:08d}" and os.path.isdir(r.file("checkpoints", name)), name)
        expect(s["best"]["checkpoint"].endswith(name), s["best"])
        kept = sorted(d for d in os.listdir(r.file("checkpoints")) if d.startswith("step-"))
        expect(kept == sorted({name, "step-00000072"}), f"keep_last=1 keeps the newest and the best: {kept}")
        e = eval_json("--checkpoint", "best", "--run-dir", r.path, *VAL[:1])
        expect(e["checkpoint"].endswith(name), e)
        x = dlrun("export", "--checkpoint", "best", "--run-dir", r.path, "--output", r.file("best.safetensors"), check=0)
        expect(f"{name} (step {best['step']})" in x.stdout, x.stdout)
        # Interrupted between two evaluations and resumed: the same parameters, the same BEST.
        ref = s["params_sha256"]
    with RunDir() as r:
        train(TINY, r.path, *VAL, env={"DLRUN_FAULT": "signal_at_step:30"}, check=75)
        train(TINY, r.path, *VAL)
        expect(r.summary()["params_sha256"] == ref and open(r.file("checkpoints", "BEST")).read().strip() == name,
               "a resumed run differs")
    # Early stopping: a min_delta no evaluation can reach ends the run at the second evaluation.
    stop = VAL + ("train.early_stop=loss", "train.early_stop_patience=1", "train.early_stop_min_delta=100")
    with RunDir() as r:
        p = train(TINY, r.path, *stop)
        expect("train.early_stop: loss has not improved" in p.stdout and "the run ends at step 24" in p.stdout,
               p.stdout[-2000:])
        s = r.summary()
        expect(s["status"] == "completed" and s["steps"] == 24 and s["early_stop"]["stopped_at"] == 24, s)
        expect(s["test"] is not None and len(events(r, "test")) == 1, s)
        # Run again (a requeue, or with another patience): it stays stopped, and says so and why.
        p = train(TINY, r.path, *stop[:-2], "train.early_stop_patience=5")
        expect(r.summary()["steps"] == 24, r.summary()["steps"])
        expect("train.early_stop ended this run at step 24: loss had not improved" in p.stdout and
               "model.init=" in p.stdout, p.stdout[-2000:])
    with RunDir() as r:  # interrupted before the stop, resumed: it stops at the same step
        train(TINY, r.path, *stop, env={"DLRUN_FAULT": "signal_at_step:13"}, check=75)
        train(TINY, r.path, *stop)
        expect(r.summary()["steps"] == 24 and r.summary()["early_stop"]["stopped_at"] == 24, r.summary())
    # Refused without evaluations to decide at.
    v = dlrun("config", "validate", TINY, "checkpoint.keep_best=loss", "train.eval_every_epochs=0", check=2)
    expect("checkpoint.keep_best: the best checkpoint is chosen at evaluations, and none is scheduled" in v.stdout,
           v.stdout)


def color_folder(root, per_class=12, test=False):
    """Two classes anyone can tell apart: reddish and bluish images of varying sizes."""
    from PIL import Image
    splits = (("train", per_class), ("val", 4)) + ((("test", 4),) if test else ())
    for split, n in splits:
        for c, rgb in (("blue", (20, 40, 220)), ("red", (220, 30, 20))):
            os.makedirs(os.path.join(root, split, c))
            for i in range(n):
                img = Image.new("RGB", (20 + i % 4, 18 + i % 3), tuple((v + 7 * i) % 256 for v in rgb))
                img.save(os.path.join(root, split, c, f"{i:03d}.png"))


def test_predict_with_the_class_names_the_run_recorded():
    with RunDir() as r:
        color_folder(r.file("imgs"), test=True)
        over = ("data.name=image_folder", f"data.root={r.file('imgs')}", "data.image_size=16", "model.in_channels=3",
                "model.num_classes=2", "data.batch_size=8", "data.augment=[]", "train.epochs=4", "optim.lr=0.05",
                "checkpoint.keep_best=accuracy")
        p = train(TINY, r.file("run"), *over)
        # An image_folder with root/test: val is the validation split, test read at the end.
        expect("24 train / 8 validation / 8 test samples" in p.stdout, p.stdout[-3000:])
        files = sorted(glob.glob(r.file("imgs", "test", "*", "*.png")))
        out = dlrun("predict", TINY, *over, "--checkpoint", r.file("run"), *files, "--top-k", "2", check=0).stdout
        lines = [line for line in out.splitlines() if line.endswith(tuple("0123456789"))]
        expect(len(lines) == len(files), out[-2000:])
        for f, line in zip(files, lines):
            want = os.path.basename(os.path.dirname(f))
            expect(line.startswith(f"{f}: {want} "), f"{line} (expected {want})")
        # Without a config: the run directory's own config.yaml (the model and its class names).
        bare = dlrun("predict", *files, "--checkpoint", r.file("run"), "--top-k", "2", check=0).stdout
        expect([x for x in bare.splitlines() if x.endswith(tuple("0123456789"))] == lines, bare[-2000:])
        # JSON lines, a folder and a glob pattern, the best checkpoint, top-1.
        out = dlrun("predict", TINY, *over, "--checkpoint", "best", "--run-dir", r.file("run"), "--json",
                    "--top-k", "1", r.file("imgs", "test", "red"), r.file("imgs", "test", "blue", "00*.png"),
                    check=0).stdout
        recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        expect(len(recs) == 8 and all(len(x["top"]) == 1 for x in recs), out[-1500:])
        expect([x["top"][0]["class"] for x in recs] == ["red"] * 4 + ["blue"] * 4, recs)
        expect(all(0.5 < x["top"][0]["probability"] <= 1 for x in recs), recs)
        # A safetensors export carries the class names; a torch export has them from the config's data.
        for fmt_ in ("safetensors", "torch"):
            out_file = r.file(f"w.{fmt_}")
            dlrun("export", "--checkpoint", r.file("run"), "--format", fmt_, "--output", out_file, check=0)
            out = dlrun("predict", TINY, *over, "--checkpoint", out_file, files[0], check=0).stdout
            expect(f"{files[0]}: blue " in out, out[-1500:])
        p = dlrun("predict", files[0], "--checkpoint", r.file("w.safetensors"), check=2)  # an export: no config in it
        expect("no config given" in p.stdout and "give the experiment YAML" in p.stdout, p.stdout[-800:])
        # A safetensors file whose record of the data is hostile (a float, an absurd side): exit 2, no crash.
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
        src = r.file("w.safetensors")
        with safe_open(src, "pt") as f:
            meta = dict(f.metadata())
        for side in (4.5e74, 10 ** 9):
            d = json.loads(meta["dlrun_dataset"])
            d["image_size"] = side
            bad = r.file("bad.safetensors")
            save_file(load_file(src), bad, metadata={**meta, "dlrun_dataset": json.dumps(d)})
            p = dlrun("predict", TINY, *over, "--checkpoint", bad, files[0], check=2)
            expect("image_size" in p.stdout, p.stdout[-800:])
        # A file that is not an image is exit 2 naming it; no image at all is exit 2.
        p = dlrun("predict", TINY, *over, "--checkpoint", r.file("run"), TINY, check=2)
        expect("tiny.yaml" in p.stdout, p.stdout[-800:])
        p = dlrun("predict", TINY, *over, "--checkpoint", r.file("run"), r.file("nothing-*.png"), check=2)
        expect("matches no .jpg, .jpeg or .png file" in p.stdout, p.stdout[-800:])


if __name__ == "__main__":
    main([test_validate_accepts_exactly_what_train_accepts, test_validate_checks_what_train_meets_before_its_first_step,
          test_train_prints_a_short_header_and_the_whole_config_on_request, test_what_a_user_tripped_on_is_named,
          test_show_and_info_need_no_data,
          test_force_without_resume_never_is_refused, test_eval_reads_what_export_writes,
          test_fine_tune_from_pretrained_weights, test_a_torch_save_state_dict_as_torchvision_publishes_it,
          test_validation_split_best_checkpoint_and_early_stop, test_predict_with_the_class_names_the_run_recorded])
