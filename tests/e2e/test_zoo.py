"""Each family of the zoo beyond the ResNets, end to end through the commands a user runs: its
smallest member trains a few steps on an image folder with a moving average of the weights,
`dlrun export` writes safetensors that torchvision's own model loads strictly and that give, in
torchvision, the logits `dlrun eval --save-batch` gave for the same batch; the average exports as
a torch file; `dlrun predict` names a class for each image. (ONNX: test_onnx.py and
tests/models/onnx_zoo.py; exact resume: test_check_resume.py; DDP and autocast per family: the
core tests.)"""
import glob
import os

import numpy as np
import torch
import torchvision
from safetensors.torch import load_file

from common import RunDir, cfg, dlrun, expect, main, train
from test_first_hour import color_folder

TINY = cfg("tiny.yaml")
# name -> torchvision's keyword arguments for the same model (ViT: the side it is built for)
MEMBERS = {"mobilenet_v3_small": {}, "efficientnet_b0": {}, "regnet_y_400mf": {}, "convnext_tiny": {},
           "vit_b_32": {"image_size": 32}, "swin_t": {}}


def test_each_family_trains_exports_to_torchvision_and_predicts():
    with RunDir() as r:
        color_folder(r.file("imgs"), test=True)
        files = sorted(glob.glob(r.file("imgs", "test", "*", "*.png")))[:3]
        for name, kwargs in MEMBERS.items():
            over = ["data.name=image_folder", f"data.root={r.file('imgs')}", "data.image_size=32",
                    "model.in_channels=3", "model.num_classes=2", f"model.name={name}", "data.batch_size=8",
                    "data.eval_batch_size=4", "data.augment=[]", "train.max_steps=3", "train.ema_decay=0.5",
                    "checkpoint.every_steps=0", *[f"model.{k}={v}" for k, v in kwargs.items()]]
            run = r.file(name)
            train(TINY, run, *over)
            batch = r.file(f"{name}.batch.safetensors")
            dlrun("eval", TINY, *over, "--checkpoint", run, "--save-batch", batch, check=0)
            weights = r.file(f"{name}.safetensors")
            dlrun("export", "--checkpoint", run, "--output", weights, check=0)
            model = getattr(torchvision.models, name)(num_classes=2, **kwargs).eval()
            model.load_state_dict(load_file(weights), strict=True)  # every key, shape and buffer torchvision's
            saved = load_file(batch)
            with torch.no_grad():
                got = model(saved["images"]).numpy()
            want = saved["logits"].numpy()
            err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))
            expect(err <= 1e-4, f"{name}: torchvision's logits with dlrun's exported weights differ by {err:.2e}")
            ema = r.file(f"{name}.ema.pt")
            dlrun("export", "--checkpoint", run, "--weights", "ema", "--output", ema, check=0)
            averaged = torch.load(ema)
            expect(averaged.keys() == model.state_dict().keys(), f"{name}: the average's keys are not the model's")
            expect(any(not torch.equal(averaged[k], v) for k, v in load_file(weights).items() if v.is_floating_point()),
                   f"{name}: the average equals the raw weights")
            out = dlrun("predict", TINY, *over, "--checkpoint", run, *files, check=0).stdout
            named = [line.split(": ", 1)[1].split()[0] for line in out.splitlines() if line.startswith(tuple(files))]
            expect(len(named) == len(files) and set(named) <= {"red", "blue"}, out[-1500:])  # "FILE: CLASS p ..."
            print(f"  {name}: trained, exported (torchvision's logits within {err:.1e}), averaged, predicted",
                  flush=True)
            for f in (weights, ema, batch):
                os.remove(f)


if __name__ == "__main__":
    main([test_each_family_trains_exports_to_torchvision_and_predicts])
