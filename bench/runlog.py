"""What the bench scripts read back from a dlrun run directory."""
import json
import os


def mean_samples_per_s(run_dir, after_step):
    """Samples/s of RUN_DIR/metrics.jsonl's train records past `after_step` (the warm-up), as
    samples over seconds: each record's rate weighted by the time since the record before it,
    which is what the window's images divided by its wall time give (a plain mean of the rates
    would over-weight the fast intervals)."""
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"samples_per_s"' in l]
    rows = sorted((r for r in rows if "event" not in r), key=lambda r: r["step"])
    num = den = 0.0
    for prev, r in zip(rows, rows[1:]):
        if r["step"] > after_step and r["time"] > prev["time"]:
            num += r["samples_per_s"] * (r["time"] - prev["time"])
            den += r["time"] - prev["time"]
    if den > 0:
        return num / den
    late = [r["samples_per_s"] for r in rows if r["step"] > after_step]
    return sum(late) / len(late)
