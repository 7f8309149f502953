"""examples/slurm/dlrun.sbatch under a real single-node Slurm (tests/e2e/slurm_cluster.py), as a
user submits it: Slurm signals the job as a preemption or a time limit would, the job requeues
itself on exit 75 and the requeued job finishes at the uninterrupted run's params_sha256; when
rank 0 cannot commit the stop's checkpoint every rank exits 1 and the job ends, not requeued
forever. docs/distributed.md, "Slurm"."""
import os
import time

from common import DLRUN, SRC, RunDir, expect, main
from slurm_cluster import SlurmCluster, free_port
from test_dist import MLP, SAME, TINY, run_ranks

SBATCH = os.path.join(SRC, "examples", "slurm", "dlrun.sbatch")
# The recipe asks for 2 nodes x 8 GPUs; this cluster is one node with 2 CPUs and no GPU.
HERE = ("--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1")


def submit(cluster, r, overrides, fault):
    env = {"DLRUN": DLRUN, "RUN_DIR": r.path, "MASTER_PORT": str(free_port()), "DLRUN_FAULT": fault}
    job = cluster.sbatch(*HERE, f"--output={r.path}/slurm-%j.out", SBATCH, TINY, *overrides, env=env, cwd=r.path)
    deadline = time.time() + 120  # until the ranks train: then Slurm's signal finds them mid-run
    while time.time() < deadline:
        m = r.file("metrics.jsonl")
        if os.path.exists(m) and '"loss"' in open(m).read():
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job} never trained: {cluster.job(job)}\n{cluster.logs()}")


def job_log(r, job):
    with open(r.file(f"slurm-{job}.out"), errors="replace") as f:
        return f.read()


def test_a_signalled_job_requeues_and_finishes_at_the_uninterrupted_result():
    args = (*SAME, *MLP, "train.max_steps=200", "train.epochs=20")
    with RunDir() as ref, RunDir() as r, SlurmCluster() as cluster:
        run_ranks(2, TINY, ref.path, *args)
        # 40 ms per batch: the run lasts long enough for the signal to land in the middle.
        job = submit(cluster, r, args, "slow_batch:40")
        # As the time limit's --signal=B:USR1@120 would, or a preemption script.
        cluster.run("scancel", "--batch", "--signal=USR1", job)
        j = cluster.wait_job(job, lambda j: j.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"))
        log = job_log(r, job)
        expect(j["JobState"] == "COMPLETED" and j.get("Restarts") == "1", f"{j}\n{log[-3000:]}")
        expect("srun exited 75" in log and "requeueing job" in log and "resumed from" in log, log[-3000:])
        pre = [m for m in r.metrics() if m.get("event") == "preempt"]
        expect(len(pre) == 1 and 0 < pre[0]["step"] < 200, pre)
        want, got = ref.summary()["params_sha256"], r.summary()["params_sha256"]
        expect(got == want, f"requeued under Slurm: params_sha256 {got} != uninterrupted {want}")


def test_a_job_whose_rank_0_cannot_save_is_not_requeued():
    args = (*SAME, *MLP, "train.max_steps=100000", "train.epochs=100000", "checkpoint.every_steps=0")
    with RunDir() as r, SlurmCluster() as cluster:
        job = submit(cluster, r, args, "disk_error:ENOSPC")  # rank 0's checkpoint writes fail
        cluster.run("scancel", "--batch", "--signal=USR1", job)
        j = cluster.wait_job(job, lambda j: j.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"))
        log = job_log(r, job)
        expect(j["JobState"] == "FAILED" and j.get("Restarts") == "0" and j.get("ExitCode") == "1:0",
               f"{j}\n{log[-3000:]}")
        expect("srun exited 1" in log and "requeueing job" not in log, log[-3000:])
        expect("rank 0 did not commit the checkpoint of step" in log, log[-3000:])


if __name__ == "__main__":
    main([test_a_signalled_job_requeues_and_finishes_at_the_uninterrupted_result,
          test_a_job_whose_rank_0_cannot_save_is_not_requeued])
