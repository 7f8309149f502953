"""Every model family of the zoo exports to ONNX: for one or two members of each family (the
smallest, and the one with another kind of block), torchvision's model with weights as if trained
(torchvision_zoo.py's as_if_trained: BatchNorm statistics, norm affines and layer scales away
from their initial values) is saved as torch.save(state_dict()), loaded strictly by dlrun
(dlrun_model_dump --load), and lowered to ONNX as `dlrun export --format onnx` lowers it —
with BatchNorm kept, and folded (`--fold-batchnorm`) for the families that have it. Each file
passes onnx.checker's full check (shape inference included), uses only the operators
docs/training.md lists, and runs in onnxruntime: its logits for a batch of 2 and a batch of 1
equal torchvision's within 1e-4 of their scale.

mlp, convnet and the ResNet family are exported from trained runs by tests/e2e/test_onnx.py;
a family that `dlrun models` lists and neither test covers fails this one.

Usage: onnx_zoo.py PATH/TO/dlrun PATH/TO/dlrun_model_dump [NAME...]
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision

from torchvision_zoo import as_if_trained, listed_models

# name -> image side: each family's smallest member and those with other blocks (MobileNetV2's
# ReLU6, V3's hard-swish and SE; EfficientNet V2's FusedMBConv; RegNet Y's SE); Swin V1 at 32
# (windows padded, shifted in the first stage), V2 at 64 (its window of 8 shifted at 16x16).
MEMBERS = {
    "mobilenet_v2": 32, "mobilenet_v3_large": 32, "mobilenet_v3_small": 32,
    "efficientnet_b0": 32, "efficientnet_v2_s": 32,
    "regnet_x_400mf": 32, "regnet_y_400mf": 32,
    "convnext_tiny": 32,
    "vit_b_32": 64,
    "swin_t": 32, "swin_v2_t": 64,
}
COVERED_ELSEWHERE = {"mlp", "convnet", "resnet"}  # tests/e2e/test_onnx.py
# docs/training.md, "ONNX"
OPERATORS = {"Conv", "BatchNormalization", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Erf", "MaxPool",
             "AveragePool", "GlobalAveragePool", "Add", "Mul", "Div", "Max", "MatMul", "Gemm", "Flatten",
             "LayerNormalization", "Softmax", "ReduceL2", "Transpose", "Reshape", "Slice", "Gather", "Concat", "Pad",
             "Shape", "Expand"}


def run_onnx(path, x):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert ops <= OPERATORS, f"{path}: operators outside the documented list: {sorted(ops - OPERATORS)}"
    has_bn = "BatchNormalization" in ops
    del model
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    two = sess.run(["logits"], {"images": x.numpy()})[0]
    one = sess.run(["logits"], {"images": x[:1].numpy()})[0]
    return two, one, has_bn, len(ops)


def check(dump_exe, tmp, name, family, fold, side, seed):
    torch.manual_seed(seed)
    kwargs = {"image_size": side} if family == "vit" else {}
    model = as_if_trained(getattr(torchvision.models, name)(num_classes=7, **kwargs)).eval()
    weights, inputs = Path(tmp) / f"{name}.pth", Path(tmp) / f"{name}.input.pt"
    torch.save(model.state_dict(), weights)
    x = torch.randn(2, 3, side, side)
    torch.save({"input": x}, inputs)
    with torch.no_grad():
        want = model(x).numpy()
    onnx_path = Path(tmp) / f"{name}.onnx"
    run = subprocess.run([dump_exe, "--load", name, str(weights), str(inputs), str(Path(tmp) / f"{name}.out.pt"),
                          str(onnx_path), *(["fold"] if fold else [])], capture_output=True, text=True)
    assert run.returncode == 0, f"{name}: dlrun_model_dump --load failed:\n{run.stdout}{run.stderr}"
    scale = float(np.abs(want).max())
    assert scale > 1e-3, f"{name}: torchvision's logits are all near 0 ({scale:.2e}): nothing is compared"
    said = []
    for path, folded in ((onnx_path, False), (Path(f"{onnx_path}.folded"), True)):
        if folded and not fold:
            continue
        two, one, has_bn, kinds = run_onnx(path, x)
        assert has_bn == (fold and not folded), f"{name} folded={folded}: BatchNormalization present: {has_bn}"
        err = float(np.abs(two - want).max()) / scale
        err_one = float(np.abs(one - want[:1]).max()) / scale
        assert two.shape == want.shape and one.shape == (1, want.shape[1]), (two.shape, one.shape, want.shape)
        assert err <= 1e-4 and err_one <= 1e-4, \
            f"{name} folded={folded}: onnxruntime's logits differ from torchvision's by {err:.2e} (batch of one {err_one:.2e})"
        said.append(f"{'folded' if folded else 'kept'} {os.path.getsize(path) / 1e6:.0f} MB {kinds} kinds of operator, "
                    f"error {max(err, err_one):.1e}")
        path.unlink()
    weights.unlink()
    return "; ".join(said)


def main():
    dlrun, dump_exe = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    torch.set_num_threads(1)
    listed = listed_models(dlrun)
    family_of = {m["name"]: m["family"] for m in listed}
    folds = {m["name"] for m in listed if "fold_batchnorm" in m["features"]}  # BatchNorm after its convs
    for m in listed:
        assert "onnx" in m["features"], f"{m['name']}: dlrun models does not list onnx among its features"
    families = set(family_of.values())
    checked = {family_of[n] for n in MEMBERS}
    assert families <= checked | COVERED_ELSEWHERE, f"families no ONNX test covers: {sorted(families - checked - COVERED_ELSEWHERE)}"
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, side) in enumerate(MEMBERS.items()):
            if only and name not in only:
                continue
            start = time.monotonic()
            said = check(dump_exe, tmp, name, family_of[name], name in folds, side, seed)
            print(f"ok {name} at {side}x{side}: {said}, {time.monotonic() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
