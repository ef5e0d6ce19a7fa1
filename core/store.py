"""A run directory: ``run.json`` (what was run, on what) and ``samples.jsonl`` (one line per request).

Each sample is appended, flushed and fsynced as it completes, so a crash or Ctrl-C loses nothing that
was already measured. The directory is readable by its owner only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .sample import SCHEMA_VERSION, Sample

__all__ = ["RunDir", "new_run_dir", "read_samples"]


def new_run_dir(base: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40]
    path = base / f"{stamp}-{safe}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{safe}-{n}"
    return path


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        old = os.umask(0o077)
        try:
            path.mkdir(parents=True, exist_ok=True)
        finally:
            os.umask(old)
        os.chmod(path, 0o700)
        self.samples_path = path / "samples.jsonl"
        self.run_json = path / "run.json"

    @property
    def run_id(self) -> str:
        return self.path.name

    def arm_dir(self, arm: str) -> Path:
        d = self.path / "arms" / arm
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_run(self, data: dict[str, Any]) -> None:
        payload = {"schema_version": SCHEMA_VERSION, **data}
        tmp = self.run_json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        tmp.replace(self.run_json)

    def read_run(self) -> dict[str, Any]:
        return json.loads(self.run_json.read_text()) if self.run_json.exists() else {}

    def update_run(self, **changes: Any) -> None:
        data = self.read_run()
        data.update(changes)
        self.write_run(data)

    def append(self, sample: Sample) -> None:
        line = sample.model_dump_json() + "\n"
        with self.samples_path.open("a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def samples(self) -> list[Sample]:
        return read_samples(self.path)


def read_samples(path: Path) -> list[Sample]:
    """All samples of a run directory (a torn last line from a crash is skipped)."""
    out: list[Sample] = []
    file = path / "samples.jsonl"
    if not file.exists():
        return out
    for line in file.read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(Sample.model_validate_json(line))
        except ValueError:
            continue
    return out
