"""examples/skypilot/dlrun-spot.yaml, the SkyPilot managed-job recipe:

- SkyPilot's own task schema accepts it, validating as SkyPilot's API server does (unknown fields
  refused: the skypilot package, pinned in scripts/versions.sh, in the virtual environment
  scripts/setup.sh makes for it); damaged copies (a misspelled recovery field, a wrong type, an
  exit code out of range) are refused;
- its run: block, run by bash in the synced repository as SkyPilot runs it on each node -- two
  "nodes" here, two processes on this host each with a home of its own, with the variables
  SkyPilot sets (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS, SKYPILOT_NUM_NODES,
  SKYPILOT_NUM_GPUS_PER_NODE, SKYPILOT_TASK_ID) and the recipe's envs overridden as
  `sky jobs launch --env` would (a tiny config, no bucket, no cloud notice) -- trains one job
  across both nodes to the end.
"""
import copy
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

import yaml

from common import SRC, cfg, expect, main

RECIPE = os.path.join(SRC, "examples", "skypilot", "dlrun-spot.yaml")


def sky_python():
    """The skypilot venv's python (scripts/setup.sh; DLRUN_SKY_VENV overrides its place)."""
    with open(os.path.join(SRC, "scripts", "versions.sh")) as f:
        version = re.search(r"^SKYPILOT_VERSION=(\S+)", f.read(), re.M).group(1)
    venv = os.environ.get("DLRUN_SKY_VENV") or os.path.expanduser(f"~/.cache/dlrun/venv-skypilot-{version}")
    python = os.path.join(venv, "bin", "python")
    expect(os.access(python, os.X_OK), f"no skypilot venv at {venv}: scripts/setup.sh makes it")
    return python


# Validates each task given on stdin (a JSON list) with SkyPilot's task schema, strictly as its API
# server does once its plugins are loaded; prints one line per task: "ok" or the error.
VALIDATE = r"""
import json, os, sys
from sky.skylet import constants
os.environ[constants.ENV_VAR_IS_SKYPILOT_SERVER] = "1"
from sky.server import plugins
plugins.plugins_loaded = lambda: True
from sky.utils import common_utils, schemas
for task in json.load(sys.stdin):
    try:
        # The task, then the parts SkyPilot validates apart: resources and storage mounts.
        common_utils.validate_schema(task, schemas.get_task_schema(), "Invalid task YAML: ")
        common_utils.validate_schema(task.get("resources") or {}, schemas.get_resources_schema(),
                                     "Invalid resources YAML: ")
        for mount in (task.get("file_mounts") or {}).values():
            if isinstance(mount, dict):
                common_utils.validate_schema(mount, schemas.get_storage_schema(), "Invalid storage YAML: ")
        print("ok")
    except ValueError as e:
        print(str(e).replace("\n", " "))
"""


def validate(tasks):
    p = subprocess.run([sky_python(), "-c", VALIDATE], input=json.dumps(tasks), capture_output=True, text=True,
                       timeout=120)
    expect(p.returncode == 0, f"the validator failed:\n{p.stderr[-3000:]}")
    return p.stdout.splitlines()


def recipe():
    with open(RECIPE) as f:
        return yaml.safe_load(f)


def test_the_recipe_passes_skypilots_schema_and_damage_does_not():
    task = recipe()
    recovery = task["resources"]["job_recovery"]
    expect(recovery.get("recover_on_exit_codes") == [75] and task["resources"].get("use_spot") is True, task)
    damaged = []
    misspelled = copy.deepcopy(task)
    misspelled["resources"]["job_recovery"]["recover_on_exit_code"] = \
        misspelled["resources"]["job_recovery"].pop("recover_on_exit_codes")
    damaged.append(("a misspelled recover_on_exit_codes", misspelled))
    wrong = copy.deepcopy(task)
    wrong["num_nodes"] = "two"
    damaged.append(("num_nodes: two", wrong))
    out_of_range = copy.deepcopy(task)
    out_of_range["resources"]["job_recovery"]["recover_on_exit_codes"] = [75, 300]
    damaged.append(("exit code 300", out_of_range))
    unknown = copy.deepcopy(task)
    unknown["resources"]["spot"] = True
    damaged.append(("resources.spot", unknown))
    results = validate([task] + [t for _, t in damaged])
    expect(results[0] == "ok", f"SkyPilot refuses the recipe: {results[0]}")
    for (what, _), result in zip(damaged, results[1:]):
        expect(result != "ok", f"SkyPilot accepted the recipe with {what}")
        print(f"  refused, {what}: {result[:120]}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_run_block_trains_across_two_nodes():
    task = recipe()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dlrun-sky-") as tmp:
        procs = []
        for rank in (0, 1):
            home = os.path.join(tmp, f"node{rank}")
            os.mkdir(home)
            env = dict(os.environ, HOME=home, **{k: str(v) for k, v in task["envs"].items()})
            env.update({  # `sky jobs launch --env` overrides, for a CPU test without a bucket or a cloud
                "DLRUN_CONFIG": cfg("tiny.yaml"), "CHECKPOINT_REMOTE": "", "PREEMPTION_WATCH": "none",
                "DLRUN_ARGS": "train.max_steps=6 run.threads=1", "MASTER_PORT": str(port),
                # what SkyPilot sets on each node
                "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.1",
                "SKYPILOT_NUM_NODES": str(task["num_nodes"]), "SKYPILOT_NUM_GPUS_PER_NODE": "1",
                "SKYPILOT_TASK_ID": "sky-managed-2026-11-29-12-00-00-000000_dlrun-resnet50_1-0"})
            procs.append(subprocess.Popen(["bash", "-c", task["run"]], cwd=SRC, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, start_new_session=True))
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=240)[0])
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                    p.communicate()
        for rank, (p, out) in enumerate(zip(procs, outs)):
            expect(p.returncode == 0, f"node {rank} exited {p.returncode}:\n{out[-3000:]}")
        expect("world size 2" in outs[0] and "node-rank 1" in outs[1], outs[0][-2000:] + outs[1][-2000:])
        with open(os.path.join(tmp, "node0", "dlrun-run", "summary.json")) as f:
            summary = json.load(f)
        expect(summary["status"] == "completed" and summary["steps"] == 6 and summary["world_size"] == 2, summary)
        print(f"  two nodes, world size {summary['world_size']}: {summary['status']} after {summary['steps']} steps")


if __name__ == "__main__":
    sys.exit(main([test_the_recipe_passes_skypilots_schema_and_damage_does_not,
                   test_the_run_block_trains_across_two_nodes]))
