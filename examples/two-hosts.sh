#!/bin/bash
# Two hosts with 8 GPUs each, started by hand: one scripts/dlrun-launch per host, 16 ranks in all.
# Run the same script on both hosts, each with its node rank (docs/distributed.md, "Two hosts"):
#
#   hostA$ examples/two-hosts.sh 0      # node rank 0: ranks 0-7; rank 0 hosts the rendezvous store
#   hostB$ examples/two-hosts.sh 1      # node rank 1: ranks 8-15
#
# Extra arguments go to `dlrun train` (overrides, --resume ...). Start the second host within
# dist.timeout_s (300 s by default) of the first; a host that does not arrive in time is named
# in the rendezvous error on the others.
#
# Both hosts need the same build of dlrun (build/dlrun of this repository), the same config,
# and the data under data.root. Rank 0 alone writes the run directory: put it on a file system
# that outlives the machines (below: a shared mount) or set checkpoint.remote. The network:
# host B reaches MASTER_ADDR:MASTER_PORT over TCP, and the hosts reach each other on the TCP
# ports NCCL opens (allow all TCP between them).
#
# Stop both cleanly with one signal to either launcher (Ctrl-C, or kill -TERM <pid>): every rank
# saves the same step and the launchers exit 75; run the script again on both hosts to resume.
set -euo pipefail

NODE_RANK=${1:?usage: examples/two-hosts.sh NODE_RANK (0 on host A, 1 on host B) [train arguments ...]}
shift

# Ranks per host: one per GPU.
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
# Host A's address as host B reaches it (an IP address, or a name both hosts resolve the same way).
MASTER_ADDR=${MASTER_ADDR:-10.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
CONFIG=${CONFIG:-configs/imagenet/resnet50.yaml}
RUN_DIR=${RUN_DIR:-/shared/runs/resnet50-2x8}

# The global batch is 512 (32 per GPU on 16 GPUs); the learning rate is scaled from the
# config's 0.1 at 256 by hand: dlrun never rescales it (docs/distributed.md, "Batch size,
# learning rate and BatchNorm").
GLOBAL_BATCH=${GLOBAL_BATCH:-512}
LR=${LR:-0.2}

# First run on new machines: NCCL says which interface and transport (IB or sockets) it uses.
# export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
# Hosts with several interfaces (docker0, a management network): name the one between the hosts.
# export NCCL_SOCKET_IFNAME=eth0
# The same for gloo (CPU runs, run.device=cpu), which otherwise binds to what `hostname` resolves to.
# export GLOO_SOCKET_IFNAME=eth0

cd "$(dirname "$0")/.."   # the repository root: `train` below means its build/dlrun

# exec: the launcher replaces this shell, so a signal to this script's pid reaches the launcher
# and the launcher's exit code (0, 1, 2 or 75) is the script's.
# --shutdown-timeout: how long the ranks get after a forwarded stop signal before SIGKILL; above
# the time a synchronous save (plus an upload with checkpoint.remote) takes.
exec scripts/dlrun-launch \
  --nproc-per-node "$NPROC_PER_NODE" --nnodes 2 --node-rank "$NODE_RANK" \
  --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \
  --shutdown-timeout 120 \
  -- train "$CONFIG" --run-dir "$RUN_DIR" \
  data.batch_size="$GLOBAL_BATCH" optim.lr="$LR" "$@"
