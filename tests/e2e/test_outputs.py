"""What a user does with a finished run: read TensorBoard, evaluate, export, load weights
in Python, inspect checkpoints."""
import glob
import os

from common import RunDir, cfg, dlrun, expect, main, train

TINY = cfg("tiny.yaml")


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
