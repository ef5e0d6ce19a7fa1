"""How long ``bakeoff demo`` takes after the build, with the machine's load beside it.

Runs the demo once (under ``flock /tmp/bakeoff-engines.lock`` when that lock file's folder exists, so it never
shares the cores with another engine run), into a temporary folder, and prints its wall time, exit code, the load
average before and after, and how many of its samples were flagged as taken under foreign CPU load: a demo
timed on a busy machine says so. The llama-server build and the SmolLM2 download must already be cached.

Usage::

    python benchmarks/demo_time.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOCK = Path("/tmp/bakeoff-engines.lock")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-c", "from bakeoff.core.cli import main; main()", "demo", "--out", tmp]
        if shutil.which("flock"):
            argv = ["flock", str(LOCK), *argv]
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        load_after = os.getloadavg()[0]
        samples = [json.loads(line) for run in Path(tmp).iterdir() if (run / "samples.jsonl").is_file()
                   for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    flagged = sum(any(f.startswith("foreign-load") for f in s.get("flags", [])) for s in samples)
    print(f"bakeoff demo: exit {done.returncode}, {wall:.0f} s wall (lock wait included), {len(samples)} samples, "
          f"{flagged} taken under foreign load; load average {load_before:.2f} before, {load_after:.2f} after "
          f"({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
