#!/usr/bin/env bash
# tools/fingerprints.sh — the params_sha256 of the deterministic CPU configs, one line each.
#
# A change that should not change behaviour (a refactor, a moved seam) proves it by printing
# the same lines before and after:
#
#   tools/fingerprints.sh build/dlrun > /tmp/before.txt      # on the commit before
#   tools/fingerprints.sh build/dlrun > /tmp/after.txt       # on the change
#   diff /tmp/before.txt /tmp/after.txt
#
# Each line: the config's name, the final weights' params_sha256, and the averages' (EMA, SWA)
# where the run keeps one. The runs are short (a few seconds to a minute each on 2 cores), on
# the CPU, with run.deterministic; Fashion-MNIST comes from Debian's dataset-fashion-mnist.
# DLRUN_FINGERPRINT_ONLY=name[,name] runs a subset.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DLRUN="$(realpath "${1:-$ROOT/build/dlrun}")"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dlrun-fingerprints-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export DLRUN="$DLRUN"

PARITY="$ROOT/configs/parity/convnet.yaml"
SYN_RESNET="$ROOT/configs/synthetic/resnet18.yaml"
SYN_CONVNET="$ROOT/configs/synthetic/convnet.yaml"
COMMON=(run.device=cpu run.deterministic=true log.progress=none log.tensorboard=false)
SMALL_SYN=(data.synthetic_train_size=256 data.synthetic_eval_size=64 data.batch_size=32 data.workers=1)

run() {  # name, then the arguments of `dlrun train` (or a launcher command line after "launch")
  local name=$1; shift
  if [[ -n "${DLRUN_FINGERPRINT_ONLY:-}" && ",$DLRUN_FINGERPRINT_ONLY," != *",$name,"* ]]; then return; fi
  local dir="$WORK/$name"
  if [[ $1 == launch ]]; then
    shift
    "$ROOT/scripts/dlrun-launch" --standalone --nproc-per-node 2 -- "$DLRUN" train "$@" --run-dir "$dir" \
      >"$WORK/$name.log" 2>&1 || { echo "$name: FAILED (exit $?)"; tail -20 "$WORK/$name.log" >&2; return; }
  else
    "$DLRUN" train "$@" --run-dir "$dir" >"$WORK/$name.log" 2>&1 \
      || { echo "$name: FAILED (exit $?)"; tail -20 "$WORK/$name.log" >&2; return; }
  fi
  python3 - "$name" "$dir/summary.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))
parts = [name, s["params_sha256"]]
for avg in ("ema", "swa"):
    if isinstance(s.get(avg), dict):
        parts.append(f"{avg}={s[avg].get('params_sha256')}")
print(" ".join(parts))
PY
}

run plain "$PARITY" "${COMMON[@]}" train.max_steps=30
run adamw "$ROOT/configs/parity/convnet_adamw.yaml" "${COMMON[@]}" train.max_steps=30
run fused "$SYN_RESNET" "${COMMON[@]}" "${SMALL_SYN[@]}" data.synthetic_shape=[3,16,16] model.fused_conv_bn_relu=true \
  train.max_steps=6
run sync_bn launch "$PARITY" "${COMMON[@]}" train.max_steps=20 dist.sync_bn=true dist.backend=gloo
run ddp launch "$PARITY" "${COMMON[@]}" train.max_steps=20 dist.backend=gloo
run ema "$PARITY" "${COMMON[@]}" train.max_steps=30 train.ema_decay=0.9
run ema_schedule "$SYN_RESNET" "${COMMON[@]}" "${SMALL_SYN[@]}" data.synthetic_shape=[3,16,16] train.max_steps=12 \
  train.ema_decay=0.99 train.ema_warmup=true train.ema_every_steps=3 train.ema_start_step=4
run swa "$SYN_CONVNET" "${COMMON[@]}" "${SMALL_SYN[@]}" train.epochs=3 optim.swa_start_epoch=1 optim.swa_lr=0.01 \
  train.eval_every_epochs=1
run accum_clip_smooth "$PARITY" "${COMMON[@]}" train.max_steps=20 train.grad_accum=2 train.clip_grad_norm=0.5 \
  train.label_smoothing=0.1
run bf16 "$PARITY" "${COMMON[@]}" train.max_steps=10 amp.enabled=true amp.dtype=bf16
run recompute "$SYN_RESNET" "${COMMON[@]}" "${SMALL_SYN[@]}" data.synthetic_shape=[3,16,16] train.max_steps=6 \
  model.activation_checkpointing=blocks
DLRUN_FAULT=oom_at_step:3 run micro_batch "$PARITY" "${COMMON[@]}" train.max_steps=8 train.micro_batch=auto
DLRUN_FAULT=nonfinite_loss_at_step:3 run nonfinite_skip "$PARITY" "${COMMON[@]}" train.max_steps=8 train.nonfinite=skip
