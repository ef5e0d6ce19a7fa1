"""How long ``bakeoff --help`` (and ``--version``) takes on this machine, and what it imports.

Each command runs ``--repeat`` times as a fresh process (the console script's own entry point); the median
wall time is printed beside that of a bare ``python -c pass`` started the same way, so a busy machine shows
as a slow baseline rather than a slow bakeoff. ``--importtime`` adds the slowest top-level imports that
``python -X importtime`` reports for ``--help``.

Usage::

    python benchmarks/help_time.py [--repeat 15] [--importtime]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

MAIN = "from bakeoff.core.cli import main; main()"


def wall_times(argv: list[str], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - start)
    return out


def slowest_imports(count: int = 8) -> list[tuple[float, str]]:
    """Top-level imports of ``bakeoff --help`` by cumulative microseconds (``python -X importtime``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", MAIN, "--help"], capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("   "):
            rows.append((int(parts[1]) / 1e6, parts[2].strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--importtime", action="store_true", help="also list the slowest top-level imports")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; median of {args.repeat} runs")
    for label, argv in (("python -c pass", [sys.executable, "-c", "pass"]),
                        ("bakeoff --version", [sys.executable, "-c", MAIN, "--version"]),
                        ("bakeoff --help", [sys.executable, "-c", MAIN, "--help"])):
        times = wall_times(argv, args.repeat)
        print(f"{label:<18} {statistics.median(times):.3f} s  (min {min(times):.3f} s)")
    if args.importtime:
        for seconds, module in slowest_imports():
            print(f"  import {module:<40} {seconds:.3f} s cumulative")


if __name__ == "__main__":
    main()
