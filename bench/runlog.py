"""What the bench scripts read back from a dlrun run directory."""
import json
import os


def mean_samples_per_s(run_dir, after_step):
    """Mean samples/s of the train records of RUN_DIR/metrics.jsonl past `after_step` (warm-up)."""
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"samples_per_s"' in l]
    rows = [r for r in rows if "event" not in r and r["step"] > after_step]
    return sum(r["samples_per_s"] for r in rows) / len(rows)
