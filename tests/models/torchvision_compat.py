"""dlrun's ResNets are torchvision's: same state-dict keys in the same order, same shapes and
dtypes, loadable with strict=True, and the same eval-mode logits for the same input.

Usage: torchvision_compat.py PATH/TO/dlrun_model_dump
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torchvision

# (name, num_classes, in_channels, stem, seed, image size)
CASES = [
    ("resnet18", 10, 3, "imagenet", 1, 64),
    ("resnet34", 5, 3, "imagenet", 2, 64),
    ("resnet50", 7, 3, "imagenet", 3, 64),
    ("resnet18", 10, 1, "cifar", 4, 32),
]


def torchvision_model(name, num_classes, in_channels, stem):
    model = getattr(torchvision.models, name)(num_classes=num_classes)
    if stem == "cifar":
        model.conv1 = torch.nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        model.maxpool = torch.nn.Identity()
    elif in_channels != 3:
        model.conv1 = torch.nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    return model


def check(dump_exe, tmp, name, num_classes, in_channels, stem, seed, size):
    prefix = Path(tmp) / f"{name}-{stem}-{in_channels}"
    subprocess.run([dump_exe, name, str(num_classes), str(in_channels), stem, str(seed), str(size),
                    str(prefix)], check=True)
    state = torch.load(f"{prefix}.state.pt", weights_only=True)
    io = torch.load(f"{prefix}.io.pt", weights_only=True)

    model = torchvision_model(name, num_classes, in_channels, stem)
    expected = model.state_dict()
    assert list(state.keys()) == list(expected.keys()), (
        f"{name}: key order differs; first mismatch at "
        f"{next(i for i, (a, b) in enumerate(zip(state, expected)) if a != b)}")
    for key, tensor in expected.items():
        assert state[key].shape == tensor.shape, f"{name}: {key} {state[key].shape} vs {tensor.shape}"
        assert state[key].dtype == tensor.dtype, f"{name}: {key} {state[key].dtype} vs {tensor.dtype}"
    model.load_state_dict(state, strict=True)
    model.eval()
    with torch.no_grad():
        logits = model(io["input"])
    assert logits.shape == io["logits"].shape == (2, num_classes)
    # Random-init ResNets in eval mode (BN = identity) can have large logits: compare relative
    # to their scale, and absolutely to 1e-4 when they are O(1).
    scale = max(1.0, logits.abs().max().item())
    diff = (logits - io["logits"]).abs().max().item()
    assert diff <= 1e-4 * scale, f"{name} {stem}: logits differ by {diff} (scale {scale})"
    print(f"ok {name} stem={stem} in_channels={in_channels}: {len(state)} keys, "
          f"max |logit diff| {diff:.2e} (scale {scale:.3g})")


def main():
    dump_exe = sys.argv[1]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            check(dump_exe, tmp, *case)


if __name__ == "__main__":
    main()
