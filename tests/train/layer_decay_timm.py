#!/usr/bin/env python3
"""dlrun's parameter groups against timm's, for a member of every torchvision family.

For ViT-B/16, Swin-T, ConvNeXt-T, ResNet-50, EfficientNet-B0, MobileNetV3-Large, MobileNetV2 and
RegNetY-400MF, `dlrun info CONFIG --json` lists the groups that optim.layer_decay 0.75 and
optim.no_decay_norm_bias make; timm 1.0.31's param_groups_layer_decay (with the model's
no_weight_decay()) makes them for timm's same network under timm's names. The parameter names differ (torchvision's against timm's), so the
two are compared as how many values learn at each (rate scale, weight decay): equal, and more than
a handful of distinct scales (the rule is not vacuous).

    layer_decay_timm.py DLRUN
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

import timm
from timm.optim._param_groups import param_groups_layer_decay

CASES = [("vit_b_16", "vit_base_patch16_224"), ("swin_t", "swin_tiny_patch4_window7_224"),
         ("convnext_tiny", "convnext_tiny"), ("resnet50", "resnet50"), ("efficientnet_b0", "efficientnet_b0"),
         ("mobilenet_v3_large", "mobilenetv3_large_100"), ("mobilenet_v2", "mobilenetv2_100"),
         ("regnet_y_400mf", "regnety_004")]
DECAY, WD = 0.75, 0.05


def values_by_scale(groups, numel):
    out = collections.Counter()
    for scale, wd, n in ((g["lr_scale"], g["weight_decay"], numel(g)) for g in groups):
        out[(round(scale, 12), wd)] += n
    return dict(out)


def main():
    dlrun = sys.argv[1]
    for ours, theirs in CASES:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(f"model: {{name: {ours}, num_classes: 1000, in_channels: 3}}\n"
                    f"data: {{name: synthetic, synthetic_shape: [3, 224, 224]}}\n"
                    f"optim: {{name: adamw, lr: 1.0e-3, weight_decay: {WD}, no_decay_norm_bias: true, "
                    f"layer_decay: {DECAY}}}\n")
        try:
            p = subprocess.run([dlrun, "info", f.name, "--json"], stdout=subprocess.PIPE, text=True, check=True)
        finally:
            os.unlink(f.name)
        o = json.loads(p.stdout)["optimizer"]
        if "groups_error" in o:
            raise SystemExit(f"{ours}: {o['groups_error']}")
        got = values_by_scale(o["groups"], lambda g: g["values"])
        model = timm.create_model(theirs, pretrained=False)
        ref_groups = param_groups_layer_decay(model, weight_decay=WD, no_weight_decay_list=getattr(model, "no_weight_decay", set)(),
                                              layer_decay=DECAY)
        want = values_by_scale(ref_groups, lambda g: sum(t.numel() for t in g["params"]))
        if got != want:
            for k in sorted(set(got) | set(want)):
                print(f"  scale {k[0]:.6g} wd {k[1]}: dlrun {got.get(k, 0)} timm {want.get(k, 0)}")
            raise SystemExit(f"FAIL: {ours}'s groups differ from timm's {theirs}")
        if len({k[0] for k in got}) < 10:
            raise SystemExit(f"FAIL: {ours}: only {len(got)} rate scales")
        print(f"{ours}: {len(o['groups'])} groups, {len(got)} (scale, decay) pairs, equal to timm's {theirs}")
    print("layer_decay_timm: PASS")


if __name__ == "__main__":
    main()
