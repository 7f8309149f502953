"""dlrun's ResNets are torchvision's: same state-dict keys in the same order, same shapes and
dtypes, loadable with strict=True, and the same eval-mode logits for the same input.

Usage: torchvision_compat.py PATH/TO/dlrun_model_dump
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.jit._pickle
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
    # torch::pickle_save tags typed dicts with restore_type_tag, which weights_only=True
    # refuses unless allow-listed.
    with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
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
    diff = (logits - io["logits"]).abs().max().item()
    torch.testing.assert_close(io["logits"], logits, atol=1e-4, rtol=1e-5,
                               msg=lambda m: f"{name} stem={stem}: logits differ: {m}")
    print(f"ok {name} stem={stem} in_channels={in_channels}: {len(state)} keys, "
          f"max |logit diff| {diff:.2e}")


def main():
    dump_exe = sys.argv[1]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            check(dump_exe, tmp, *case)


if __name__ == "__main__":
    main()
