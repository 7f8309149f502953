#!/usr/bin/env python3
"""dlrun's automatic augmentation policies against torchvision.transforms.v2's.

1. The operations, pixel for pixel.

Every operation of TrivialAugmentWide, RandAugment and AutoAugment (src/data/image_ops.h) runs on
random uint8 images (RGB and grayscale, sides 3 to 96 and one 224x200, some natural-looking) at the
magnitudes the policies use (every bin of each table, both signs, each on 6 of the images) and at
others (the right angles, extreme factors), through dlrun_image_ops and through the
`_apply_image_or_video_transform` that torchvision's policies call (fill 0; the geometric ones with
nearest and with bilinear sampling). With nearest sampling the outputs must be equal, every pixel:
the geometric operations sample the nearest pixel of the same float32 grid, the colour operations
compute in float32 as ATen does and truncate back to uint8 as it does. Bilinear sampling is within
one level everywhere and equal on all but a few values in ten thousand (the weights' float32 rounding
next to a half).

2. The magnitude tables of TrivialAugmentWide, RandAugment and AutoAugment (at several bin counts
and image sizes): the same operations, signs and float32 values.

3. The draws: 20000 samples of each policy from dlrun (its own random streams) and from
torchvision's forward() (its operations recorded instead of applied): every (operation,
magnitude) is drawn as often, within six standard deviations, and so is each number of operations
per sample.

4. Hue (color_jitter's own operation) against F.adjust_hue at shifts across [-0.5, 0.5]; and
color_jitter as a whole: dlrun's draws (order and factors, within ColorJitter's ranges, each order
as frequent) applied by dlrun and by ColorJitter.transform with those parameters: equal.

5. AugMix: dlrun's draws (the Dirichlet weights, the chains) fed to torchvision's own
AugMix.forward in place of its random numbers; its output equal to dlrun's, pixel for pixel with
nearest sampling (bilinear: a one-level sampling difference, carried on through a chain's later
operations, changes a few values in ten thousand).

    policy_ops.py DLRUN_IMAGE_OPS
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import collections

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
import torchvision.transforms.v2._auto_augment as tv_auto_augment
import torchvision.transforms.v2.functional as F
from torchvision.transforms.v2 import AugMix, AutoAugment, ColorJitter, RandAugment, TrivialAugmentWide

GEOMETRIC = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}
MODES = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR}
PARTS = 6  # each image takes every 6th magnitude of a table: each bin on 6 images of the 36
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
       "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert"]


def images(rng):
    """(C, H, W) uint8 images: noise, smooth gradients with noise (natural-looking), flat ones."""
    out = []
    for i in range(36):
        c = 1 if i % 4 == 3 else 3
        h, w = (224, 200) if i == 1 else (int(rng.integers(3, 97)), int(rng.integers(3, 97)))
        if i % 6 == 5:
            w = h  # square: rotate's right-angle fast paths
        kind = i % 3
        if kind == 0:
            img = rng.integers(0, 256, (c, h, w))
        elif kind == 1:
            y, x = np.mgrid[0:h, 0:w]
            base = 40 + 120 * (x / max(w - 1, 1)) + 60 * (y / max(h - 1, 1))
            img = np.stack([base * (0.6 + 0.2 * k) for k in range(c)]) + rng.normal(0, 6, (c, h, w))
        else:
            img = np.full((c, h, w), int(rng.integers(0, 256))) + rng.integers(0, 2, (c, h, w))
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def magnitudes(op, h, w, part, parts):
    """The magnitudes each policy's tables give op at this size (both signs), every parts-th of them
    from part on (so that the images share the bins out between them), and others."""
    mags = {0.0}
    for cls, bins in ((TrivialAugmentWide, 31), (RandAugment, 31), (AutoAugment, 10)):
        space = cls._AUGMENTATION_SPACE
        if op not in space:
            continue
        fn, signed = space[op]
        table = fn(bins, h, w)
        if table is None:
            continue
        for m in table.tolist():
            mags.add(float(m))
            if signed:
                mags.add(-float(m))
    extra = {"Rotate": [90.0, -90.0, 180.0, 270.0, -180.0, 360.0, 45.0, 0.5, -135.0],
             "ShearX": [0.99, -0.99], "ShearY": [0.99, -0.99], "TranslateX": [-0.7, 1.9, float(w)],
             "TranslateY": [-1.5, float(h)], "Brightness": [-1.0, 0.5, 2.0], "Color": [-1.0, 0.7, 2.0],
             "Contrast": [-1.0, 0.3, 2.0], "Sharpness": [-1.0, 0.37, 3.0], "Posterize": [0.0, 1.0, 8.0],
             "Solarize": [0.0, 0.6, 1.0, 0.5]}
    if mags == {0.0}:  # no table: the operation takes no magnitude
        return [0.0]
    mags = sorted(mags)[part::parts]
    return sorted(set(mags) | set(extra.get(op, [])))


def check_tables(tool):
    n = 0
    for kind, cls, bins in (("trivial_augment", TrivialAugmentWide, 31), ("trivial_augment", TrivialAugmentWide, 11),
                            ("rand_augment", RandAugment, 31), ("rand_augment", RandAugment, 17),
                            ("auto_augment", AutoAugment, 10), ("augmix", AugMix, 10)):
        for h, w in ((224, 224), (32, 40), (331, 500)):
            p = subprocess.run([tool, "--tables", kind, str(bins), str(h), str(w)], stdout=subprocess.PIPE,
                               check=True, text=True)
            ours = json.loads(p.stdout)
            space = cls._AUGMENTATION_SPACE
            if sorted(ours) != sorted(space):
                raise SystemExit(f"FAIL: {kind}'s operations {sorted(ours)} are not torchvision's {sorted(space)}")
            for op, (fn, signed) in space.items():
                table = fn(bins, h, w)
                want = [] if table is None else [float(v) for v in table.tolist()]
                if ours[op]["table"] != want or ours[op]["signed"] != (signed and table is not None):
                    raise SystemExit(f"FAIL: {kind} {op} at {bins} bins, {h}x{w}: table {ours[op]} != {want}")
                n += 1
    print(f"tables: {n} equal to torchvision's")


def recorded(policy, n, h, w):
    """torchvision's draws: forward() n times with its operations recorded, not applied."""
    events = []

    def record(image, transform_id, magnitude, interpolation, fill):
        events[-1].append((transform_id, round(float(magnitude), 6)))
        return image

    policy._apply_image_or_video_transform = record
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    torch.manual_seed(0)
    for _ in range(n):
        events.append([])
        policy(img)
    return events


def check_draws(tool, n=20000, h=224, w=224):
    for kind, policy, args in (("trivial_augment", TrivialAugmentWide(), ["31", "2", "9", "imagenet"]),
                               ("rand_augment", RandAugment(num_ops=2, magnitude=9), ["31", "2", "9", "imagenet"]),
                               ("auto_augment", AutoAugment(), ["10", "2", "9", "imagenet"]),
                               ("augmix", AugMix(), ["10", "2", "9", "imagenet"])):
        side = 32 if kind == "augmix" else h  # (AugMix's forward mixes the image: a small one is quicker)
        p = subprocess.run([tool, "--draw", kind] + args + [str(side), str(side), str(n)], stdout=subprocess.PIPE,
                           check=True, text=True)
        ours = [[(op, round(m, 6)) for op, m in sample] for sample in json.loads(p.stdout)]
        theirs = recorded(policy, n, side, side)
        for what, a, b in (("(operation, magnitude)", collections.Counter(e for s in ours for e in s),
                            collections.Counter(e for s in theirs for e in s)),
                           ("operations per sample", collections.Counter(len(s) for s in ours),
                            collections.Counter(len(s) for s in theirs))):
            for key in set(a) | set(b):
                pa, pb = a[key] / n, b[key] / n
                p = (pa + pb) / 2
                if abs(pa - pb) > 6 * math.sqrt(2 * p * (1 - p) / n) + 2 / n:
                    raise SystemExit(f"FAIL: {kind}: {what} {key}: dlrun {a[key]}, torchvision {b[key]} of {n}")
            print(f"draws: {kind}: {len(set(a) | set(b))} {what} as often as torchvision's")


def run_cases(tool, cases, blobs, mode=()):
    """The tool over the cases; returns its outputs (bytes) and its stdout."""
    with tempfile.TemporaryDirectory(prefix="dlrun-policy-ops-") as tmp:
        paths = [os.path.join(tmp, n) for n in ("cases.json", "in.bin", "out.bin")]
        with open(paths[0], "w") as f:
            json.dump(cases, f)
        with open(paths[1], "wb") as f:
            f.write(b"".join(blobs))
        p = subprocess.run([tool, *mode] + paths, check=True, stdout=subprocess.PIPE, text=True)
        with open(paths[2], "rb") as f:
            return f.read(), p.stdout


def outputs(got, refs):
    at = 0
    for ref in refs:
        yield np.frombuffer(got, dtype=np.uint8, count=ref.size, offset=at).reshape(ref.shape)
        at += ref.size
    if at != len(got):
        raise SystemExit(f"FAIL: dlrun_image_ops wrote {len(got)} bytes, expected {at}")


def check_color_jitter(tool, imgs, n=4000):
    # Hue alone, at shifts across its range, on every image (grayscale ones pass unchanged).
    cases, blobs, refs, offset = [], [], [], 0
    for img in imgs:
        t = torch.from_numpy(img)
        for m in (-0.5, -0.37, -0.1, -0.013, 0.0, 0.02, 0.25, 0.4999, 0.5):
            cases.append({"op": "Hue", "magnitude": m, "c": img.shape[0], "h": img.shape[1], "w": img.shape[2],
                          "offset": offset})
            refs.append(F.adjust_hue(t, m).numpy())
            blobs.append(img.tobytes())
            offset += img.size
    # color_jitter's draws: ColorJitter(0.4, 0.3, 0.5, 0.1)'s ranges, each order as frequent.
    values = (0.4, 0.3, 0.5, 0.1)
    p = subprocess.run([tool, "--jitter", *map(str, values), str(n)], stdout=subprocess.PIPE, check=True, text=True)
    draws = json.loads(p.stdout)
    names = ["Brightness", "Contrast", "Color", "Hue"]
    firsts = collections.Counter(d[0][0] for d in draws)
    for name in names:
        if abs(firsts[name] / n - 0.25) > 6 * math.sqrt(0.25 * 0.75 / n):
            raise SystemExit(f"FAIL: color_jitter: {name} first in {firsts[name]} of {n} draws, expected a quarter")
    for d in draws:
        if sorted(op for op, _ in d) != sorted(names):
            raise SystemExit(f"FAIL: color_jitter draw {d} does not hold each operation once")
        for op, m in d:
            v = values[names.index(op)]
            lo, hi = (-v, v) if op == "Hue" else (max(0.0, 1 - v) - 1, v)
            if not lo <= m <= hi:
                raise SystemExit(f"FAIL: color_jitter: {op} {m} outside [{lo}, {hi}]")
    # dlrun's draws applied by dlrun and by ColorJitter.transform with the same parameters.
    jitter = ColorJitter(*values)
    for k, d in enumerate(draws[:200]):
        img = imgs[k % len(imgs)]
        key = {"Brightness": "brightness_factor", "Contrast": "contrast_factor", "Color": "saturation_factor",
               "Hue": "hue_factor"}
        params = {key[op]: (m if op == "Hue" else m + 1.0) for op, m in d}
        params["fn_idx"] = torch.tensor([names.index(op) for op, _ in d])
        refs.append(jitter.transform(torch.from_numpy(img), params).numpy())
        cases.append({"ops": d, "c": img.shape[0], "h": img.shape[1], "w": img.shape[2], "offset": offset})
        blobs.append(img.tobytes())
        offset += img.size
    got, _ = run_cases(tool, cases, blobs)
    bad = 0
    for case, mine, ref in zip(cases, outputs(got, refs), refs):
        if not np.array_equal(mine, ref):
            bad += 1
            diff = np.abs(mine.astype(int) - ref.astype(int))
            print(f"DIFF {case.get('op', 'color_jitter')} {case.get('magnitude', case.get('ops'))}: "
                  f"{int((diff > 0).sum())} values differ, at most by {int(diff.max())}")
    if bad:
        raise SystemExit(f"FAIL: {bad} of {len(cases)} hue / color_jitter outputs differ from torchvision's")
    print(f"color_jitter: {len(cases)} outputs (hue alone, and {min(len(draws), 200)} jitters) equal to "
          f"torchvision's; {n} draws within ColorJitter's ranges, each first as often")


class _FedTorch:
    """torch, as AugMix.forward sees it, with randint/rand answered from dlrun's draws."""

    def __init__(self, ints, rands):
        self.ints, self.rands = ints, rands

    def randint(self, *args, **kwargs):
        return torch.tensor(self.ints.pop(0))

    def rand(self, *args, **kwargs):
        return torch.tensor(self.rands.pop(0))

    def __getattr__(self, name):
        return getattr(torch, name)


def augmix_reference(img, draw, severity, width, depth, alpha, mode):
    """torchvision's AugMix.forward on img with dlrun's draws in place of its random numbers."""
    aug = AugMix(severity=severity, mixture_width=width, chain_depth=depth, alpha=alpha, interpolation=MODES[mode])
    space = list(aug._AUGMENTATION_SPACE)
    h, w = img.shape[1:]
    ints, rands = [], []
    for chain in draw["chains"]:
        if depth <= 0:
            ints.append(len(chain))
        for op, m in chain:
            ints.append(space.index(op))
            fn, signed = aug._AUGMENTATION_SPACE[op]
            table = fn(10, h, w)
            if table is None:
                continue
            ints.append([float(v) for v in table.tolist()].index(abs(m)))
            if signed:
                rands.append(0.0 if math.copysign(1.0, m) < 0 else 1.0)
    weights = [torch.tensor([[draw["original"], draw["mixed"]]], dtype=torch.float32),
               torch.tensor([draw["shares"]], dtype=torch.float32)]
    aug._sample_dirichlet = lambda params: weights.pop(0)
    real = tv_auto_augment.torch
    tv_auto_augment.torch = _FedTorch(ints, rands)
    try:
        out = aug(torch.from_numpy(img)).numpy()
    finally:
        tv_auto_augment.torch = real
    if ints or rands or weights:
        raise SystemExit(f"FAIL: AugMix.forward left dlrun's draws unused: {ints} {rands}")
    return out


def check_augmix(tool, imgs):
    for severity, width, depth, alpha in ((3, 3, -1, 1.0), (10, 2, 4, 0.3)):
        for mode in ("nearest", "bilinear"):
            cases, blobs, offset = [], [], 0
            for k in range(4 * len(imgs)):
                img = imgs[k % len(imgs)]
                cases.append({"key": k, "c": img.shape[0], "h": img.shape[1], "w": img.shape[2], "offset": offset,
                              "interpolation": mode})
                blobs.append(img.tobytes())
                offset += img.size
            got, printed = run_cases(tool, cases, blobs, ("--augmix", str(severity), str(width), str(depth), str(alpha)))
            draws = json.loads(printed)
            refs = [augmix_reference(imgs[k % len(imgs)], d, severity, width, depth, alpha, mode)
                    for k, d in enumerate(draws)]
            values, off, bad = 0, 0, 0
            for mine, ref in zip(outputs(got, refs), refs):
                diff = np.abs(mine.astype(int) - ref.astype(int))
                values += ref.size
                off += int((diff > 0).sum())
                bad += not np.array_equal(mine, ref)
            originals = np.array([d["original"] for d in draws])
            # m[0] ~ Beta(alpha, alpha): mean 1/2, variance 1 / (4 (2 alpha + 1)).
            sd = math.sqrt(1 / (4 * (2 * alpha + 1)) / len(draws))
            if abs(originals.mean() - 0.5) > 6 * sd:
                raise SystemExit(f"FAIL: AugMix's original weight averages {originals.mean():.3f}, not 1/2")
            what = f"augmix severity {severity} width {width} depth {depth} alpha {alpha} {mode}"
            if mode == "nearest" and bad:
                raise SystemExit(f"FAIL: {what}: {bad} of {len(cases)} outputs differ from torchvision's ({off} values)")
            if mode == "bilinear" and off > 1e-3 * values:
                raise SystemExit(f"FAIL: {what}: {off} of {values} values differ from torchvision's")
            print(f"{what}: {len(cases)} images, {len(cases) - bad} equal to torchvision's AugMix on the same draws"
                  f" ({off} of {values} values differ)")


def main():
    tool = sys.argv[1]
    check_tables(tool)
    check_draws(tool)
    rng = np.random.default_rng(51)
    ta = TrivialAugmentWide()
    cases, blobs, refs, offset = [], [], [], 0
    for i, img in enumerate(images(rng)):
        c, h, w = img.shape
        t = torch.from_numpy(img)
        for op in OPS:
            for m in magnitudes(op, h, w, i % PARTS, PARTS):
                modes = ["nearest", "bilinear"] if op in GEOMETRIC else ["nearest"]
                for mode in modes:
                    ref = ta._apply_image_or_video_transform(t, op, m, interpolation=MODES[mode], fill=ta._fill)
                    cases.append({"op": op, "magnitude": m, "c": c, "h": h, "w": w, "offset": offset,
                                  "interpolation": mode})
                    refs.append(ref.numpy())
                blobs.append(img.tobytes())
                offset += img.size
    got, _ = run_cases(tool, cases, blobs)
    bad, per_op, bilinear_values, bilinear_off = 0, {}, 0, 0
    for case, ref, mine in zip(cases, refs, outputs(got, refs)):
        n = ref.size
        per_op[case["op"]] = per_op.get(case["op"], 0) + 1
        if case["interpolation"] == "bilinear":
            # Bilinear: the four weights and their sum in float32 as ATen's sampler forms them,
            # then rounded; where the exact value lies within rounding of a half the level may
            # differ by one. Within 1 everywhere, and equal almost everywhere.
            diff = np.abs(mine.astype(int) - ref.astype(int))
            bilinear_values += n
            bilinear_off += int((diff > 0).sum())
            if diff.max(initial=0) > 1:
                bad += 1
                print(f"DIFF {case['op']} bilinear {case['magnitude']!r}: off by {int(diff.max())}")
            continue
        if not np.array_equal(mine, ref):
            bad += 1
            diff = np.abs(mine.astype(int) - ref.astype(int))
            if bad <= 20:
                print(f"DIFF {case['op']} magnitude {case['magnitude']!r} on {case['c']}x{case['h']}x{case['w']}: "
                      f"{int((diff > 0).sum())} values differ, at most by {int(diff.max())}")
    print(f"{len(cases)} cases: " + ", ".join(f"{k} {v}" for k, v in per_op.items()))
    if bad:
        raise SystemExit(f"FAIL: {bad} of {len(cases)} outputs differ from torchvision's")
    share = bilinear_off / max(bilinear_values, 1)
    print(f"bilinear: {bilinear_off} of {bilinear_values} values one level off torchvision's ({share:.2e})")
    if share > 1e-3:
        raise SystemExit("FAIL: bilinear sampling differs from torchvision's on more than 0.1 % of the values")
    print("ops: every nearest-sampled and colour output equal to torchvision's, bilinear within one level")
    imgs = images(np.random.default_rng(52))
    check_color_jitter(tool, imgs)
    check_augmix(tool, imgs)


if __name__ == "__main__":
    main()
