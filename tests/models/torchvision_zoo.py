"""Every torchvision model of dlrun's zoo reads torchvision's own weights file strictly and gives
torchvision's logits: torchvision.models.NAME(num_classes=K) with torchvision's initialisation,
torch.save(model.state_dict()) (the format people download), then dlrun loads that file as
model.init and `dlrun eval --checkpoint` read it (strict: every key and shape must fit) and runs
the same images in eval mode.

The names come from `dlrun models --json`: a zoo name whose family is torchvision's and that
this test does not check fails it. Each family's batch and image side are the smallest it takes,
so the whole list stays within minutes on 2 cores.

Also: torchvision's file of another variant (resnet50's weights for resnext50_32x4d, vit_b_16's
for vit_b_32) is refused
by `dlrun config validate` (which reads and fits model.init as train does) with exit 2 naming the
file and the first tensor that does not fit.

Usage: torchvision_zoo.py PATH/TO/dlrun PATH/TO/dlrun_model_dump [NAME...]
"""
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.jit._pickle
import torchvision

# family -> (batch, image side): the smallest input each takes.
INPUTS = {
    "resnet": (2, 32),
    "mobilenet": (2, 32),
    "efficientnet": (2, 32),
    "regnet": (2, 32),
    "convnext": (2, 32),
    "swin": (2, 32),
    # built for two patches a side (torchvision's image_size=; dlrun's model.image_size): 28-64
    "vit": (2, lambda name: 2 * int(name.rsplit("_", 1)[1])),
}
# families of dlrun's own, not torchvision's
NOT_TORCHVISION = {"mlp", "convnet"}


def as_if_trained(model):
    """Running statistics and affine parameters of every norm layer away from their initial
    1 and 0 (as a trained model's are), layer scales of order one (not 1e-6), and a head of unit scale: a loader that dropped a
    buffer, or a network that skipped a norm, then changes the logits, which are of order one."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm, torch.nn.GroupNorm)):
                if m.weight is not None:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0.0, 0.2)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(1000)
        for name, p in model.named_parameters():
            if name.endswith("layer_scale"):  # ConvNeXt's 1e-6 would hide its blocks' branches
                p.uniform_(0.5, 1.5)
        head_weight, head_bias = list(model.parameters())[-2:]
        if not head_weight.any():  # ViT's head starts at zero: logits of 0 compare nothing
            head_weight.normal_(0.0, 0.1)
            head_bias.normal_(0.0, 0.1)
    return model


def check(dump_exe, tmp, name, family, listed_parameters, seed):
    batch, side = INPUTS[family]
    kwargs = {}
    if callable(side):  # a transformer, built for this side
        side = side(name)
        kwargs["image_size"] = side
    torch.manual_seed(seed)
    num_classes = 3 + seed % 5  # not 1000: the head's shape is checked too
    model = as_if_trained(getattr(torchvision.models, name)(num_classes=num_classes, **kwargs)).eval()
    # The count `dlrun models` lists is torchvision's for 1000 classes: the head (the last Linear,
    # whose weight and bias end every torchvision state dict) with 1000 rows instead of K.
    state = model.state_dict()
    head_inputs = list(state.values())[-2].shape[1]
    parameters = sum(p.numel() for p in model.parameters()) + (1000 - num_classes) * (head_inputs + 1)
    if kwargs:  # built for another side than the listed count's (224): count that one, unmaterialised
        with torch.device("meta"):
            parameters = sum(p.numel() for p in getattr(torchvision.models, name)().parameters())
    assert parameters == listed_parameters, f"{name}: dlrun models lists {listed_parameters} parameters, torchvision has {parameters}"
    weights = Path(tmp) / f"{name}.pth"
    torch.save(state, weights)
    x = torch.randn(batch, 3, side, side)
    inputs = Path(tmp) / f"{name}.input.pt"
    torch.save({"input": x}, inputs)
    out = Path(tmp) / f"{name}.out.pt"
    run = subprocess.run([dump_exe, "--load", name, str(weights), str(inputs), str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, f"{name}: dlrun_model_dump --load failed:\n{run.stdout}{run.stderr}"
    assert "missing: none" in run.stdout and "unexpected: none" in run.stdout, run.stdout
    # torch::pickle_save tags typed dicts with restore_type_tag, allow-listed here.
    with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
        got = torch.load(out, weights_only=True)["logits"]
    with torch.no_grad():
        want = model(x)
    assert got.shape == want.shape == (batch, num_classes), f"{name}: {got.shape} vs {want.shape}"
    # 1e-5 relative to the logits' scale: float32 on the CPU, the same ops in the same order
    # (a different order of a reduction moves the last bits only).
    scale = want.abs().max().item()
    diff = (got - want).abs().max().item()
    assert scale > 1e-3, f"{name}: torchvision's logits are all near 0 ({scale:.2e}): nothing is compared"
    assert diff <= 1e-5 * scale, f"{name}: logits differ by {diff:.3e} (scale {scale:.3e})"
    weights.unlink()
    return len(model.state_dict()), diff, scale


TINY = Path(__file__).resolve().parents[1] / "e2e" / "data" / "tiny.yaml"


def check_wrong_variant(dlrun, tmp):
    # (the file's model, the model it is given to, its image side, the first tensor that cannot fit)
    for source, target, side, key in (("resnet50", "resnext50_32x4d", 32, "layer1.0.conv1.weight"),
                                      ("vit_b_16", "vit_b_32", 224, "conv_proj.weight")):
        weights = Path(tmp) / f"{source}.pth"
        torch.save(getattr(torchvision.models, source)(num_classes=10).state_dict(), weights)
        p = subprocess.run([dlrun, "config", "validate", str(TINY), f"model.name={target}", "model.in_channels=3",
                            f"data.synthetic_shape=[3,{side},{side}]", f"model.init={weights}"],
                           capture_output=True, text=True)
        said = p.stdout + p.stderr
        assert p.returncode == 2, f"{source}'s weights for {target}: exit {p.returncode}\n{said}"
        assert "model.init" in said and str(weights) in said and key in said, said
        print(f"ok {source}'s file refused for {target}:", next(l for l in said.splitlines() if key in l).strip())
        weights.unlink()


def listed_models(dlrun):
    """`dlrun models --json`: every name of the zoo with its family, parameters and features."""
    return json.loads(subprocess.run([dlrun, "models", "--json"], check=True, capture_output=True, text=True).stdout)


def main():
    dlrun, dump_exe = sys.argv[1], sys.argv[2]
    only = set(sys.argv[3:])
    torch.set_num_threads(1)
    listed = listed_models(dlrun)
    names = [(m["name"], m["family"], m["parameters"]) for m in listed if m["family"] not in NOT_TORCHVISION]
    unknown = sorted({f for _, f, _ in names} - set(INPUTS))
    assert not unknown, f"zoo families this test does not know how to check: {unknown}"
    assert names, "dlrun models lists no torchvision model"
    with tempfile.TemporaryDirectory() as tmp:
        if not only:
            check_wrong_variant(dlrun, tmp)
        for seed, (name, family, parameters) in enumerate(names):
            if only and name not in only:
                continue
            start = time.monotonic()
            keys, diff, scale = check(dump_exe, tmp, name, family, parameters, seed)
            print(f"ok {name}: {keys} keys loaded strictly, max |logit diff| {diff:.2e} "
                  f"(logits up to {scale:.2e}), {time.monotonic() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
