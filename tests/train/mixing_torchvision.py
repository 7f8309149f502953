#!/usr/bin/env python3
"""dlrun's MixUp and CutMix against torchvision.transforms.v2's, and its loss against timm's.

For random batches (sizes, channels, classes) and lambdas (with CutMix, box centers), dlrun_mix
mixes each batch as train.mixup_alpha / train.cutmix_alpha do, and torchvision's MixUp / CutMix
mix it with the same lambda and center (their make_params with the Beta and randint draws
replaced by these values): the images, the targets, CutMix's box and adjusted lambda must be equal
(the same tensor operations: bit for bit). Then the loss dlrun takes on a mixed batch,
cross-entropy against the targets with train.label_smoothing, equals timm's
SoftTargetCrossEntropy against timm's smoothed targets (mixup_target's on/off values, for the
rolled pairing) within 1e-6.

    mixing_torchvision.py DLRUN_MIX
"""
import json
import os
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from timm.data.mixup import one_hot as timm_one_hot
from timm.loss import SoftTargetCrossEntropy
from torchvision.transforms.v2 import CutMix, MixUp


def torchvision_mix(kind, x, y, classes, lam, r_x, r_y):
    t = (MixUp if kind == "mixup" else CutMix)(alpha=1.0, num_classes=classes)
    # Their own make_params, with the draws replaced by the case's values.
    with mock.patch.object(t._dist, "sample", return_value=torch.tensor([lam])), \
            mock.patch("torch.randint", side_effect=[torch.tensor([r_x]), torch.tensor([r_y])]):
        params = t.make_params([x])
    params.update(labels=y, batch_size=y.shape[0])
    return t.transform(x, params), t.transform(y, params), params


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(7)
    cases, blobs, inputs, offset = [], [], [], 0
    for i in range(60):
        kind = "mixup" if i % 2 == 0 else "cutmix"
        n, c = int(rng.integers(2, 9)), int(rng.choice([1, 3]))
        h, w, classes = int(rng.integers(4, 40)), int(rng.integers(4, 40)), int(rng.integers(2, 20))
        # A float32 value, as torchvision's Beta of float32 parameters draws it.
        lam = float(np.float32(rng.choice([0.0, 1.0, float(rng.beta(0.4, 0.4)), float(rng.uniform())])))
        r_x, r_y = int(rng.integers(0, w)), int(rng.integers(0, h))
        x = torch.from_numpy(rng.standard_normal((n, c, h, w)).astype(np.float32))
        y = torch.from_numpy(rng.integers(0, classes, n).astype(np.int64))
        cases.append({"kind": kind, "lam": lam, "r_x": r_x, "r_y": r_y, "n": n, "c": c, "h": h, "w": w,
                      "classes": classes, "offset": offset})
        blob = x.numpy().tobytes() + y.numpy().tobytes()
        blobs.append(blob)
        inputs.append((x, y))
        offset += len(blob)
    with tempfile.TemporaryDirectory(prefix="dlrun-mixing-") as tmp:
        paths = [os.path.join(tmp, f) for f in ("cases.json", "in.bin", "out.bin")]
        with open(paths[0], "w") as f:
            json.dump(cases, f)
        with open(paths[1], "wb") as f:
            f.write(b"".join(blobs))
        p = subprocess.run([tool] + paths, stdout=subprocess.PIPE, check=True, text=True)
        report = json.loads(p.stdout)
        got = open(paths[2], "rb").read()
    at, worst_loss = 0, 0.0
    for case, (x, y), rep in zip(cases, inputs, report):
        n, classes = case["n"], case["classes"]
        mx = torch.frombuffer(bytearray(got[at:at + x.numel() * 4]), dtype=torch.float32).view(x.shape)
        at += x.numel() * 4
        tg = torch.frombuffer(bytearray(got[at:at + n * classes * 4]), dtype=torch.float32).view(n, classes)
        at += n * classes * 4
        ref_x, ref_t, params = torchvision_mix(case["kind"], x, y, classes, case["lam"], case["r_x"], case["r_y"])
        what = f"{case['kind']} lam {case['lam']!r} on {tuple(x.shape)}"
        if not torch.equal(mx, ref_x):
            raise SystemExit(f"FAIL: {what}: images differ (max {float((mx - ref_x).abs().max()):.3g})")
        if not torch.equal(tg, ref_t):
            raise SystemExit(f"FAIL: {what}: targets differ")
        if case["kind"] == "cutmix":
            if tuple(rep["box"]) != tuple(params["box"]) or rep["lam"] != params["lam_adjusted"]:
                raise SystemExit(f"FAIL: {what}: box {rep['box']} lam {rep['lam']} vs {params['box']} "
                                 f"{params['lam_adjusted']}")
        # The loss: dlrun's cross-entropy on the targets with label smoothing, timm's on its own.
        lam = rep["lam"]
        logits = torch.randn(n, classes, generator=torch.Generator().manual_seed(case["offset"]))
        for eps in (0.0, 0.1):
            ours = F.cross_entropy(logits, tg, label_smoothing=eps)
            off = eps / classes
            on = 1.0 - eps + off
            timm_t = (timm_one_hot(y, classes, on, off) * lam + timm_one_hot(y.roll(1, 0), classes, on, off) * (1 - lam))
            theirs = SoftTargetCrossEntropy()(logits, timm_t)
            worst_loss = max(worst_loss, abs(float(ours - theirs)))
    if worst_loss > 1e-6:
        raise SystemExit(f"FAIL: the loss differs from timm's by {worst_loss:.3g}")
    print(f"{len(cases)} batches: images, targets, boxes and lambdas equal to torchvision's; "
          f"loss within {worst_loss:.1e} of timm's")
    print("mixing_torchvision: PASS")


if __name__ == "__main__":
    main()
