"""What a user does with a finished run: read TensorBoard, evaluate, export, load weights
in Python, inspect checkpoints."""
import glob
import os

from common import RunDir, cfg, dlrun, expect, main, train

TINY = cfg("tiny.yaml")


def fuse_like_pytorch(model):
    """torchvision's resnet with every conv-BN pair fused the way PyTorch does it for inference
    (torch.nn.utils.fusion.fuse_conv_bn_eval; the BatchNorm becomes an identity)."""
    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    for mod in list(model.modules()):
        for c, b in (("conv1", "bn1"), ("conv2", "bn2"), ("conv3", "bn3")):
            if isinstance(getattr(mod, b, None), torch.nn.BatchNorm2d):
                setattr(mod, c, fuse_conv_bn_eval(getattr(mod, c), getattr(mod, b)))
                setattr(mod, b, torch.nn.Identity())
        if isinstance(mod, torch.nn.Sequential) and len(mod) == 2 and isinstance(mod[1], torch.nn.BatchNorm2d):
            mod[0] = fuse_conv_bn_eval(mod[0], mod[1])
            mod[1] = torch.nn.Identity()
    return model


def check_folded_export(run):
    """`dlrun export --fold-batchnorm` of a resnet18 (cifar stem, 1 channel) checkpoint: the state
    dict PyTorch's own conv-BN fusion gives, loadable strictly into that fused network, with the
    unfused network's eval outputs."""
    import safetensors.torch
    import torch
    import torchvision
    ck = run.file("checkpoints", open(run.file("checkpoints", "LATEST")).read().strip())
    out = run.file("folded.safetensors")
    p = dlrun("export", "--checkpoint", ck, "--fold-batchnorm", "--output", out, check=0)
    expect("BatchNorm folded" in p.stdout, p.stdout)
    folded = safetensors.torch.load_file(out)
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    net.maxpool = torch.nn.Identity()
    net.load_state_dict(torch.load(os.path.join(ck, "model.pt")), strict=True)
    net.eval()
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = net(x)
        fused = fuse_like_pytorch(net)
        ref = fused.state_dict()
        expect(set(folded) == set(ref), f"keys differ: {sorted(set(folded) ^ set(ref))[:8]}")
        expect(not any(".bn" in k or "downsample.1" in k for k in folded), sorted(folded)[:8])
        for k, v in ref.items():
            expect(torch.allclose(folded[k], v, rtol=1e-5, atol=1e-6), f"{k}: folded by dlrun and by PyTorch differ")
        fused.load_state_dict(folded, strict=True)
        got = fused(x)
    expect(torch.allclose(got, want, rtol=1e-4, atol=1e-4), f"folded export's logits differ: {(got - want).abs().max()}")
    # The mlp has no BatchNorm: its weights are written unchanged, and say so.
    with RunDir() as r:
        train(TINY, r.path, "train.max_steps=2", "model.name=mlp", "model.hidden=[16]")
        o = dlrun("export", "--checkpoint", r.path, "--fold-batchnorm", "--output", r.file("w.safetensors"), check=0)
        expect("no BatchNorm" in o.stdout, o.stdout)


def test_outputs():
    import safetensors.torch
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with RunDir() as r:
        init = r.file("init.pt")
        train(TINY, r.path, "train.epochs=1", extra=("--save-init", init))
        s = r.summary()

        # TensorBoard reads our event file.
        acc = EventAccumulator(r.path)
        acc.Reload()
        tags = acc.Tags()["scalars"]
        for t in ("train/loss", "train/lr", "eval/accuracy"):
            expect(t in tags, f"{t} not in {tags}")
        losses = {e.step: e.value for e in acc.Scalars("train/loss")}
        expect(sorted(losses) == list(range(1, 17)), sorted(losses))
        expect(abs(losses[16] - r.step_losses()[16]) < 1e-5, "TensorBoard and metrics.jsonl disagree")

        # eval --checkpoint auto reproduces the final eval of the run.
        e = dlrun("eval", TINY, "--checkpoint", "auto", "--run-dir", r.path, "--json", "train.epochs=1", check=0)
        import json
        ej = json.loads(e.stdout.strip().splitlines()[-1])
        expect(abs(ej["accuracy"] - s["eval"]["accuracy"]) < 1e-9, f"eval {ej} vs summary {s['eval']}")
        expect(ej["fold_batchnorm"] is False, ej)
        # --fold-batchnorm: BatchNorm folded into the convolutions, the same results within rounding.
        for model in ((), ("model.name=resnet18", "model.stem=cifar")):
            with RunDir() as m:
                if model:
                    train(TINY, m.path, "train.max_steps=6", *model)
                run = r.path if not model else m.path
                plain = json.loads(dlrun("eval", TINY, "--checkpoint", "auto", "--run-dir", run, "--json",
                                         "train.epochs=1", *model, check=0).stdout.strip().splitlines()[-1])
                f = dlrun("eval", TINY, "--checkpoint", "auto", "--run-dir", run, "--json", "--fold-batchnorm",
                          "train.epochs=1", *model, check=0)
                folded = json.loads(f.stdout.strip().splitlines()[-1])
                expect(folded["fold_batchnorm"] is True, folded)
                expect(abs(folded["loss"] - plain["loss"]) < 1e-4 * max(1.0, abs(plain["loss"])) and
                       abs(folded["accuracy"] - plain["accuracy"]) <= 1 / plain["samples"], f"{model}: {folded} vs {plain}")
                if model:
                    check_folded_export(m)

        # Weights load in Python: checkpoint model.pt, exported safetensors and torch files.
        ck = s["checkpoint"]
        state = torch.load(os.path.join(ck, "model.pt"))
        expect(isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values()), type(state))
        st = r.file("w.safetensors")
        pt = r.file("w.pt")
        dlrun("export", "--checkpoint", ck, "--format", "safetensors", "--output", st, check=0)
        dlrun("export", "--checkpoint", r.path, "--format", "torch", "--output", pt, check=0)
        a, b = safetensors.torch.load_file(st), torch.load(pt)
        expect(list(a) == list(state) or set(a) == set(state), "exported names differ")
        for k, v in state.items():
            expect(torch.equal(a[k], v) and torch.equal(b[k], v), f"{k} differs after export")
        init_state = torch.load(init)
        expect(set(init_state) == set(state), "--save-init names differ")
        expect(any(not torch.equal(init_state[k], state[k]) for k in state), "init equals trained weights")

        # ckpt list / verify.
        ls = dlrun("ckpt", "list", r.path, check=0)
        expect("step-00000016" in ls.stdout, ls.stdout)
        dlrun("ckpt", "verify", ck, check=0)
        with open(os.path.join(ck, "optim.pt"), "ab") as f:
            f.write(b"x")
        v = dlrun("ckpt", "verify", ck, check=2)
        expect("optim.pt" in v.stdout, v.stdout)


if __name__ == "__main__":
    main([test_outputs])
