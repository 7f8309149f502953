"""`dlrun check-resume`: an exact config is reported identical (exit 0), one process and two
ranks through the launcher; a resume made inexact on purpose (DLRUN_FAULT=forget_on_resume:PART:
the resumed process leaves that checkpoint part unloaded) is reported with the first differing
step and the state that differs (exit 1); bad flags are exit 2.
"""
import json
import os

from common import RunDir, cfg, dlrun, expect, main

TINY = cfg("tiny.yaml")
FAST = ["data.workers=0", "train.eval_every_epochs=0", "train.eval_at_end=false"]


def check(*args, env=None):
    p = dlrun("check-resume", TINY, *FAST, *args, "--json", env=env, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    expect(lines, p.stdout)
    return p, json.loads(lines[-1])


def test_an_exact_config_is_identical():
    p, r = check("--steps", "20", "--interruptions", "3", "--seed", "7")
    expect(p.returncode == 0 and r["identical"], p.stdout)
    expect(len(r["segments"]) == 4 and r["params_sha256"][0] == r["params_sha256"][1], r)
    expect({s["signal"] for s in r["segments"][:3]} == {"SIGTERM", "SIGUSR1", "SIGKILL"}, r["segments"])
    expect(all(s["at_step"] >= 1 for s in r["segments"][:3]), r["segments"])
    kill = [s for s in r["segments"] if s["signal"] == "SIGKILL"][0]
    expect(kill["outcome"] == "killed by signal 9", kill)
    expect(not os.path.exists(r["work_dir"]), "the work directory of an identical check is removed")


def test_mixing_and_a_policy_resume_exactly():
    """MixUp and CutMix (each micro-batch's choice, lambda and box keyed by the step) with
    label smoothing, over batches augmented by RandAugment on 3-channel images, on two micro-batches
    a step: killed and resumed three times, the uninterrupted weights."""
    p, r = check("--steps", "16", "--interruptions", "3", "--seed", "11", "train.mixup_alpha=0.2",
                 "train.cutmix_alpha=1.0", "train.mix_prob=0.8", "train.label_smoothing=0.1", "train.grad_accum=2",
                 "data.augment=[flip,rand_augment]", "data.synthetic_shape=[3,16,16]", "model.in_channels=3")
    expect(p.returncode == 0 and r["identical"], p.stdout)


def test_the_resnet_family_with_grouped_convolutions_resumes_exactly():
    """ResNeXt (a grouped 3x3 in every block): killed and resumed, the uninterrupted weights."""
    p, r = check("--steps", "6", "--interruptions", "2", "--seed", "5", "model.name=resnext50_32x4d",
                 "data.synthetic_shape=[3,32,32]", "model.in_channels=3", "data.batch_size=4",
                 "data.synthetic_train_size=64")
    expect(p.returncode == 0 and r["identical"], p.stdout)


def test_mobilenets_resume_exactly():
    """MobileNetV2 (depthwise convs, ReLU6, inverted residuals) and MobileNetV3 (squeeze-
    excitation, hard-swish): killed and resumed, the uninterrupted weights; dropout before the
    head (model.dropout) drawn the same after a resume."""
    for name in ("mobilenet_v2", "mobilenet_v3_small"):
        p, r = check("--steps", "6", "--interruptions", "2", "--seed", "9", f"model.name={name}",
                     "model.dropout=0.2", "data.synthetic_shape=[3,32,32]", "model.in_channels=3",
                     "data.batch_size=8", "data.synthetic_train_size=64")
        expect(p.returncode == 0 and r["identical"], f"{name}: {p.stdout}")


def test_efficientnet_with_stochastic_depth_resumes_exactly():
    """EfficientNet-B0 with stochastic depth (model.stochastic_depth: auto, torchvision's 0.2):
    each residual branch dropped per sample at random in training, the same draws after a resume."""
    p, r = check("--steps", "6", "--interruptions", "2", "--seed", "4", "model.name=efficientnet_b0",
                 "data.synthetic_shape=[3,32,32]", "model.in_channels=3", "data.batch_size=8",
                 "data.synthetic_train_size=64")
    expect(p.returncode == 0 and r["identical"], p.stdout)


def test_regnet_resumes_exactly_under_stage_checkpointing():
    """RegNetY-400MF (grouped 3x3, squeeze-excitation) with each stage recomputed in backward
    (model.activation_checkpointing: stages): killed and resumed, the uninterrupted weights."""
    p, r = check("--steps", "6", "--interruptions", "2", "--seed", "6", "model.name=regnet_y_400mf",
                 "model.activation_checkpointing=stages", "data.synthetic_shape=[3,32,32]", "model.in_channels=3",
                 "data.batch_size=8", "data.synthetic_train_size=64")
    expect(p.returncode == 0 and r["identical"], p.stdout)


def test_convnext_with_stochastic_depth_resumes_exactly_under_block_checkpointing():
    """ConvNeXt-T (LayerNorm, layer scale, GELU) with stochastic depth raised to 0.5 and each
    block recomputed in backward: the same per-sample drops after a resume, and in the recomputation."""
    p, r = check("--steps", "6", "--interruptions", "2", "--seed", "8", "model.name=convnext_tiny",
                 "model.stochastic_depth=0.5", "model.activation_checkpointing=blocks",
                 "data.synthetic_shape=[3,32,32]", "model.in_channels=3", "data.batch_size=8",
                 "data.synthetic_train_size=64", "optim.name=adamw", "optim.lr=0.001")
    expect(p.returncode == 0 and r["identical"], p.stdout)


def test_vit_resumes_exactly():
    """ViT-B/32 built for 32x32 images (model.image_size: one patch and the class token), with
    dropout before the head: killed and resumed, the uninterrupted weights (plain SGD: the
    checkpoints of 88M parameters are the cost here)."""
    p, r = check("--steps", "4", "--interruptions", "1", "--seed", "2", "model.name=vit_b_32", "model.image_size=32",
                 "model.dropout=0.1", "data.synthetic_shape=[3,32,32]", "model.in_channels=3", "data.batch_size=4",
                 "data.synthetic_train_size=32", "optim.momentum=0", "optim.lr=0.001")
    expect(p.returncode == 0 and r["identical"], p.stdout)


def test_swin_resumes_exactly_under_stage_checkpointing():
    """Swin-T and Swin-V2-T (shifted windows; a relative position bias, or V2's cosine attention
    with its bias MLP) with their stochastic depth (auto: 0.2) and each stage recomputed in
    backward: killed and resumed, the uninterrupted weights."""
    for name in ("swin_t", "swin_v2_t"):
        p, r = check("--steps", "4", "--interruptions", "1", "--seed", "3", f"model.name={name}",
                     "model.activation_checkpointing=stages", "data.synthetic_shape=[3,32,32]", "model.in_channels=3",
                     "data.batch_size=4", "data.synthetic_train_size=32", "optim.momentum=0", "optim.lr=0.001")
        expect(p.returncode == 0 and r["identical"], f"{name}: {p.stdout}")


def test_two_ranks_through_the_launcher():
    p, r = check("--steps", "16", "--interruptions", "3", "--seed", "3", "--nproc", "2", "train.ema_decay=0.9")
    expect(p.returncode == 0 and r["identical"], p.stdout)
    # It names what it compared: the losses, the weights and the moving average.
    expect(r["compared"] == ["losses", "params_sha256", "ema.params_sha256"], r.get("compared"))
    expect("the moving average's params_sha256" in r["verdict"], r["verdict"])
    expect(all(s["at_step"] >= 1 for s in r["segments"][:3]), r["segments"])
    expect({s["signal"] for s in r["segments"][:3]} == {"SIGTERM", "SIGUSR1", "SIGKILL"}, r["segments"])


def test_a_forgotten_part_is_named():
    for part, name, extra in (("rng", "RNG", []), ("data_position", "data position", []),
                              ("ema", "EMA", ["train.ema_decay=0.9"])):
        with RunDir() as work:
            p, r = check(*extra, "--steps", "16", "--interruptions", "2", "--seed", "11", "--work-dir", work.path,
                         env={"DLRUN_FAULT": f"forget_on_resume:{part}"})
            expect(p.returncode == 1 and not r["identical"], f"{part}: {p.stdout}")
            expect(name in r["differing_state"], f"{part}: {r}")
            if part == "ema":  # the training itself is unaffected: only the average differs
                expect(r["first_difference_step"] is None and "EMA" in r["verdict"], r)
            else:
                expect(r["first_difference_step"] is not None and "first difference at step" in r["verdict"], r)
            expect(os.path.isdir(os.path.join(work.path, "interrupted")), "the runs are kept for inspection")


def test_bad_flags():
    p = dlrun("check-resume", TINY, "--steps", "5", "--interruptions", "0")
    expect(p.returncode == 2 and "--interruptions" in p.stdout, p.stdout)
    p = dlrun("check-resume", TINY, "--steps", "5", "model.nonsense=1")
    expect(p.returncode == 2 and "model.nonsense" in p.stdout, p.stdout)


if __name__ == "__main__":
    main([test_an_exact_config_is_identical, test_mixing_and_a_policy_resume_exactly,
          test_the_resnet_family_with_grouped_convolutions_resumes_exactly,
          test_mobilenets_resume_exactly, test_efficientnet_with_stochastic_depth_resumes_exactly,
          test_regnet_resumes_exactly_under_stage_checkpointing,
          test_convnext_with_stochastic_depth_resumes_exactly_under_block_checkpointing, test_vit_resumes_exactly,
          test_swin_resumes_exactly_under_stage_checkpointing,
          test_two_ranks_through_the_launcher, test_a_forgotten_part_is_named,
          test_bad_flags])
