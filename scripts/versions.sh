# scripts/versions.sh — the ONE place the Python-side versions are pinned.
# torch 2.11.0 is also what the GPU host runs (2.11.0+cu130), so CI and the GPU build
# compile against the same LibTorch.
TORCH_VERSION=2.11.0
PY_PINS=(
  "torch==$TORCH_VERSION"
  "torchvision==0.26.0"
  "numpy==2.3.5"
  "tensorboard==2.20.0"
  "safetensors==0.7.0"
  "pyyaml==6.0.3"
  "moto[server]==5.2.5"  # a local S3 implementation for the remote-checkpoint tests
  "onnx==1.23.2"         # onnx.checker: the ONNX export's tests
  "onnxruntime==1.32.0"  # runs the exported models against dlrun's logits
  "webdataset==0.2.111"  # Python's webdataset and wids (its last release with wids): the shard interop tests
  "timm==1.0.31"         # the reference for rmsprop_tf, lamb, lars, layer decay and the recipes' data tricks
  "kubernetes-validate==1.37.0"  # Kubernetes' own JSON schemas (1.25 to 1.37): the manifests in examples/k8s/
)
# SkyPilot, in a virtual environment of its own (tests/skypilot: its task schema); its sixty-odd
# dependencies (a web server, databases) stay out of torch's.
SKYPILOT_VERSION=0.14.1
