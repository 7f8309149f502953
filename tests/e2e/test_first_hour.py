"""What a newcomer meets in the first hour: every shipped config and every documented
`dlrun train configs/...` example is accepted by `config validate` exactly when `train` accepts it
(with the same first error otherwise); showing and describing a config never needs its data;
--force means what it says; `eval --checkpoint` reads what `export` writes and names the kind of
anything else."""
import glob
import json
import os
import re
import time

from common import SRC, RunDir, cfg, dlrun, expect, main, train

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
    train is stopped by a SIGTERM right after start-up (exit 75): it got past every check."""
    t0 = time.monotonic()
    v = dlrun("config", "validate", config, *overrides, env=env)
    took = time.monotonic() - t0
    with RunDir() as r:
        t = dlrun("train", config, *overrides, "--run-dir", r.path, "log.progress=none",
                  env={**(env or {}), "DLRUN_FAULT": "signal_during:startup"})
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


if __name__ == "__main__":
    main([test_validate_accepts_exactly_what_train_accepts, test_show_and_info_need_no_data,
          test_force_without_resume_never_is_refused, test_eval_reads_what_export_writes])
