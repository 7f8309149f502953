"""`dlrun export --format onnx`, checked with the real tools: mlp, convnet, ResNet-18/34/50,
ResNeXt-50 for the ResNet family's grouped convolutions, and through the same command a
MobileNetV3 (hard-swish, squeeze-excitation) and a Swin (windowed attention), BatchNorm kept or
folded, is trained a few steps (so its BatchNorm statistics are not the initial ones), exported, passed through onnx.checker (full check, with shape
inference), and run by onnxruntime on the first evaluation batch `dlrun eval --save-batch`
wrote: its logits must match dlrun's within 1e-4 relative, for the whole batch and for a batch
of one (the batch axis is dynamic). tests/models/onnx_zoo.py checks one or two members of
every other family against torchvision.
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from safetensors.numpy import load_file

from common import RunDir, cfg, dlrun, expect, main, train

# model name -> overrides of tests/e2e/data/tiny.yaml (synthetic 16x16 or 32x32 images).
MODELS = {
    "convnet": [],
    "convnet_dropout_32": ["data.synthetic_shape=[3,32,32]", "model.in_channels=3", "model.dropout=0.2"],
    "mlp": ["model.name=mlp", "model.hidden=[64,32]", "model.dropout=0.1"],
    "resnet18": ["model.name=resnet18", "model.stem=cifar"],
    "resnet34": ["model.name=resnet34", "data.synthetic_shape=[3,32,32]", "model.in_channels=3"],
    "resnet50": ["model.name=resnet50", "data.synthetic_shape=[3,32,32]", "model.in_channels=3"],
    # the family's grouped 3x3 (ONNX Conv's group attribute), folded too
    "resnext50_32x4d": ["model.name=resnext50_32x4d", "data.synthetic_shape=[3,32,32]", "model.in_channels=3"],
    "mobilenet_v3_small": ["model.name=mobilenet_v3_small", "data.synthetic_shape=[3,32,32]", "model.in_channels=3"],
    "swin_t": ["model.name=swin_t", "data.synthetic_shape=[3,32,32]", "model.in_channels=3"],
}
# The operators each model may use beyond the convolutional ones (docs/training.md, "ONNX").
CONV_OPS = {"Conv", "BatchNormalization", "Relu", "MaxPool", "AveragePool", "MatMul", "GlobalAveragePool", "Add",
            "Flatten", "Gemm"}
MORE_OPS = {"mobilenet_v3_small": {"HardSwish", "HardSigmoid", "Mul"},
            "swin_t": {"LayerNormalization", "Erf", "Mul", "Softmax", "Transpose", "Reshape", "Slice", "Gather",
                       "Concat", "Pad"}}
NO_BATCHNORM = {"mlp", "swin_t"}
SMALL = ["train.max_steps=3", "data.batch_size=8", "data.eval_batch_size=6", "data.synthetic_train_size=64",
         "data.synthetic_eval_size=12", "checkpoint.every_steps=0", "data.augment=[]"]


def relative_error(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


def check_model(name, overrides, run, fold):
    out = run.file(f"{name}{'-folded' if fold else ''}.onnx")
    args = ["export", "--checkpoint", run.path, "--format", "onnx", "--output", out]
    said = dlrun(*args, *(["--fold-batchnorm"] if fold else []), check=0).stdout
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    # The count said is the file's: its initializers (folded weights are fewer than the checkpoint's).
    expect(f"{len(model.graph.initializer)} tensors from" in said, (len(model.graph.initializer), said))
    ops = {n.op_type for n in model.graph.node}
    has_bn = name not in NO_BATCHNORM
    expect(("BatchNormalization" in ops) == (has_bn and not fold), f"{name} fold={fold}: operators {sorted(ops)}")
    expect(ops <= CONV_OPS | MORE_OPS.get(name, set()), f"{name}: unexpected operators {sorted(ops)}")
    meta = {p.key: p.value for p in model.metadata_props}
    expect(meta.get("step") == "3" and meta.get("folded_batchnorm") == ("true" if fold else "false"), meta)
    expect(json.loads(meta["dlrun_dataset"])["image_size"] in (16, 32), meta)
    batch = load_file(run.file("batch.safetensors"))
    sess = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"images": batch["images"]})[0]
    err = relative_error(got, batch["logits"])
    print(f"  {name:20s} fold={str(fold):5s} {os.path.getsize(out):>10d} bytes  {len(model.graph.node):3d} nodes  "
          f"max relative error {err:.2e}", flush=True)
    expect(err <= 1e-4, f"{name} fold={fold}: onnxruntime's logits differ from dlrun's by {err:.2e} (relative)")
    one = sess.run(["logits"], {"images": batch["images"][:1]})[0]
    expect(one.shape == (1, got.shape[1]) and relative_error(one, got[:1]) <= 1e-4, f"{name}: batch of one differs")


def test_every_zoo_model_runs_in_onnxruntime():
    for name, overrides in MODELS.items():
        with RunDir() as run:
            train(cfg("tiny.yaml"), run.path, *SMALL, *overrides)
            dlrun("eval", cfg("tiny.yaml"), *SMALL, *overrides, "--checkpoint", run.path, "--save-batch",
                  run.file("batch.safetensors"), check=0)
            for fold in (False, True) if name != "swin_t" else (False,):
                check_model(name, overrides, run, fold)


def test_image_size_comes_from_the_run_or_the_flag():
    with RunDir() as run:
        train(cfg("tiny.yaml"), run.path, *SMALL)
        out = run.file("m.onnx")
        dlrun("export", "--checkpoint", run.path, "--format", "onnx", "--image-size", "20", "--output", out, check=0)
        dims = [d.dim_value or d.dim_param for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
        expect(dims == ["batch", 1, 20, 20], dims)
        # A 4x4 image reaches the 3x3 adaptive pool as 1x1 (windows overlap: MatMul); 2x2 is too small.
        small = run.file("small.onnx")
        dlrun("export", "--checkpoint", run.path, "--format", "onnx", "--image-size", "4", "--output", small, check=0)
        onnx.checker.check_model(onnx.load(small), full_check=True)
        got = ort.InferenceSession(small, providers=["CPUExecutionProvider"]).run(
            ["logits"], {"images": np.zeros((2, 1, 4, 4), np.float32)})[0]
        expect(got.shape == (2, 10) and np.isfinite(got).all(), got)
        p = dlrun("export", "--checkpoint", run.path, "--format", "onnx", "--image-size", "2", "--output", out)
        expect(p.returncode == 2 and "too small" in p.stdout, p.stdout)
        # The moving average exports as the weights do.
        with RunDir() as ema_run:
            train(cfg("tiny.yaml"), ema_run.path, *SMALL, "train.ema_decay=0.5")
            dlrun("export", "--checkpoint", ema_run.path, "--format", "onnx", "--weights", "ema", "--output",
                  ema_run.file("ema.onnx"), check=0)
            meta = {p.key: p.value for p in onnx.load(ema_run.file("ema.onnx")).metadata_props}
            expect(meta["weights"] == "ema", meta)
            # --save-batch --weights ema: the average's logits, which its export must reproduce.
            for weights in ("ema", "raw"):
                dlrun("eval", cfg("tiny.yaml"), *SMALL, "train.ema_decay=0.5", "--checkpoint", ema_run.path,
                      "--save-batch", ema_run.file(f"{weights}.safetensors"), "--weights", weights, check=0)
            batch = load_file(ema_run.file("ema.safetensors"))
            got = ort.InferenceSession(ema_run.file("ema.onnx"), providers=["CPUExecutionProvider"]).run(
                ["logits"], {"images": batch["images"]})[0]
            expect(relative_error(got, batch["logits"]) <= 1e-4, relative_error(got, batch["logits"]))
            raw = load_file(ema_run.file("raw.safetensors"))["logits"]
            expect(relative_error(raw, batch["logits"]) > 1e-3, "the raw and the averaged logits are the same")
            p = dlrun("eval", cfg("tiny.yaml"), *SMALL, "--checkpoint", run.path, "--save-batch", run.file("s.st"),
                      "--weights", "swa", check=2)
            expect("holds no such average" in p.stdout, p.stdout)
        # A checkpoint without config.yaml cannot be lowered: the error names what is missing.
        ck = os.path.join(run.path, "checkpoints", open(run.file("checkpoints", "LATEST")).read().strip())
        os.rename(os.path.join(ck, "config.yaml"), os.path.join(ck, "config.yaml.away"))
        p = dlrun("export", "--checkpoint", ck, "--format", "onnx", "--output", run.file("x.onnx"))
        expect(p.returncode == 2 and "config.yaml" in p.stdout and not os.path.exists(run.file("x.onnx")), p.stdout)


def test_the_format_follows_the_output_extension():
    """x.onnx without --format is ONNX, x.pt a torch file; a --format that contradicts a known
    extension is refused and writes nothing."""
    with RunDir() as run:
        train(cfg("tiny.yaml"), run.path, *SMALL)
        dlrun("export", "--checkpoint", run.path, "--output", run.file("m.onnx"), check=0)
        onnx.checker.check_model(onnx.load(run.file("m.onnx")), full_check=True)
        # dlrun's own ONNX export given to eval: said for what it is (not "a file of unknown kind").
        p = dlrun("eval", cfg("tiny.yaml"), *SMALL, "--checkpoint", run.file("m.onnx"), check=2)
        expect("m.onnx: an ONNX model; dlrun evaluates and predicts from its own weights" in p.stdout, p.stdout)
        p = dlrun("export", "--checkpoint", run.path, "--output", run.file("m.pt"), check=0)
        expect("written as torch" in p.stdout, p.stdout)
        p = dlrun("export", "--checkpoint", run.path, "--output", run.file("m.weights"), check=0)
        expect("written as safetensors" in p.stdout, p.stdout)
        expect(len(load_file(run.file("m.weights"))) > 0, "m.weights")
        p = dlrun("export", "--checkpoint", run.path, "--format", "safetensors", "--output", run.file("x.onnx"), check=2)
        expect("--format safetensors but --output" in p.stdout and "onnx file" in p.stdout, p.stdout)
        expect("name the output .safetensors for --format safetensors" in p.stdout, p.stdout)  # its own extension
        expect(not os.path.exists(run.file("x.onnx")), "x.onnx was written")
        # An output whose folder does not exist is bad input (exit 2), named; nothing is written.
        p = dlrun("export", "--checkpoint", run.path, "--output", "/nonexistent/dir/x.pt", check=2)
        expect("/nonexistent/dir" in p.stdout, p.stdout)


def test_external_data_puts_the_weights_beside_the_model():
    """--external-data: the weights in OUTPUT.data, the model file small, and onnx and onnxruntime
    read the pair from the model's path (as they do for a model over 2 GB, where dlrun does it
    without the flag); other formats refuse the flag, writing nothing."""
    overrides = ["model.name=resnet18", "model.stem=cifar"]
    with RunDir() as run:
        train(cfg("tiny.yaml"), run.path, *SMALL, *overrides)
        dlrun("eval", cfg("tiny.yaml"), *SMALL, *overrides, "--checkpoint", run.path, "--save-batch",
              run.file("batch.safetensors"), check=0)
        out = run.file("m.onnx")
        said = dlrun("export", "--checkpoint", run.path, "--output", out, "--external-data", check=0).stdout
        expect("external data" in said and "m.onnx.data" in said, said)
        expect(os.path.getsize(out) < 100_000 and os.path.getsize(out + ".data") > 40_000_000,
               (os.path.getsize(out), os.path.getsize(out + ".data")))
        onnx.checker.check_model(out, full_check=True)  # by path: the checker reads the external data
        locations = {e.value for t in onnx.load(out, load_external_data=False).graph.initializer
                     for e in t.external_data if e.key == "location"}
        expect(locations == {"m.onnx.data"}, locations)
        batch = load_file(run.file("batch.safetensors"))
        got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(["logits"], {"images": batch["images"]})[0]
        expect(relative_error(got, batch["logits"]) <= 1e-4, relative_error(got, batch["logits"]))
        p = dlrun("export", "--checkpoint", run.path, "--output", run.file("m.safetensors"), "--external-data", check=2)
        expect("--external-data is ONNX's" in p.stdout and not os.path.exists(run.file("m.safetensors")), p.stdout)


if __name__ == "__main__":
    main([test_every_zoo_model_runs_in_onnxruntime,
          test_image_size_comes_from_the_run_or_the_flag,
          test_the_format_follows_the_output_extension, test_external_data_puts_the_weights_beside_the_model])
