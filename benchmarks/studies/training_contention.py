"""What does torch training pay under CPU contention, and which thread setting stops it?

A short demo fine-tune (the demo build's QA recipe, ``--max-steps`` steps) runs idle, then beside a CPU hog (as many
busy-looping processes as the machine has cores), with each thread setting in turn; each run reports its wall time
and CPU seconds. Threads that spin-wait for a core another process holds show as CPU seconds growing beyond the
idle run's while the steps stay the same.

    python -m benchmarks.studies.training_contention --steps 40 --out benchmarks/results/training_contention
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import load_average, write_report
from demo.build import DEMOS, OFFLINE_ENV, base_model_path
from demo.data import WRITERS

log = logging.getLogger("benchmarks.studies.training_contention")
HOG = "while True: pass"
SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "one thread (OMP_NUM_THREADS=1)": {"OMP_NUM_THREADS": "1"},
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def train(folder: Path, steps: int, env: dict[str, str]) -> dict[str, float]:
    spec = next(spec for spec in DEMOS if spec.name == "qa")
    data = folder / spec.data_file
    if not data.exists():
        WRITERS[spec.name](data, random.Random(42), spec.examples)
    args = list(spec.finetune_args)
    args[args.index("--max-steps") + 1] = str(steps)
    out = folder / "checkpoint"
    command = [sys.executable, "-m", "training", "finetune", "--task", spec.task, "--base", str(base_model_path()),
               "--train", str(data), "--out", str(out), "--overwrite", "--seed", "42", *args]  # fmt: skip
    started, cpu = time.monotonic(), children_cpu()
    subprocess.run(command, env={**os.environ, **OFFLINE_ENV, **env}, capture_output=True, check=True)
    return {"wall_s": round(time.monotonic() - started, 1), "cpu_s": round(children_cpu() - cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    at_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for label, env in SETTINGS.items():
            rows.append({"setting": label, "hog": 0, **train(folder, args.steps, env)})
            log.info("%s", rows[-1])
        hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 1)]
        try:
            for label, env in SETTINGS.items():
                rows.append({"setting": label, "hog": len(hogs), **train(folder, args.steps, env)})
                log.info("%s", rows[-1])
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    idle = {row["setting"]: row for row in rows if row["hog"] == 0}
    for row in rows:
        row["cpu_vs_idle_default"] = round(row["cpu_s"] / idle["default"]["cpu_s"], 2)
    report = {"steps": args.steps, "cores": os.cpu_count(), "load_avg": load_average(at_start), "rows": rows}
    lines = [
        "# Training under CPU contention: the demo's QA fine-tune, idle and beside a CPU hog",
        "",
        f"{args.steps} steps of the demo build's QA recipe per run; the hog is one busy-looping process per core "
        f"({os.cpu_count()}); load average at start {report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        "",
        "| thread setting | hog processes | wall s | CPU s | CPU vs idle default |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {r['setting']} | {r['hog']} | {r['wall_s']} | {r['cpu_s']} | {r['cpu_vs_idle_default']}x |"
            for r in rows
        ),
    ]
    write_report(args.out, report, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
