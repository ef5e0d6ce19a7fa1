"""A run directory: ``run.json`` (what was run, on what) and ``samples.jsonl`` (one line per request).

Each sample is appended, flushed and fsynced as it completes, so a crash or Ctrl-C loses nothing that
was already measured, and indexed in the run's SQLite database (core/db.py) in the same step, so a
resumed run skips what is stored and never stores a point twice. The directory is readable by its
owner only.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from .db import DuplicateSampleError, RunDB, StoreError, done_key
from .sample import SCHEMA_VERSION, Sample

_log = logging.getLogger(__name__)

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

    @property
    def db(self) -> RunDB:
        return RunDB(self.path)

    def write_run(self, data: dict[str, Any]) -> None:
        payload = {"schema_version": SCHEMA_VERSION, **data}
        tmp = self.run_json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        tmp.replace(self.run_json)
        try:
            self.db.put_run(self.run_id, payload)
        except StoreError as exc:  # run.json is the record; the index catches up on resume
            _log.warning("run index not updated: %s", exc)

    def read_run(self) -> dict[str, Any]:
        return json.loads(self.run_json.read_text()) if self.run_json.exists() else {}

    def update_run(self, **changes: Any) -> None:
        data = self.read_run()
        data.update(changes)
        self.write_run(data)

    def append(self, sample: Sample) -> None:
        """Store one sample: the jsonl line (fsynced) and its index row, or neither.

        :raises DuplicateSampleError: its measurement point is already stored; nothing is written.
        """
        line = sample.model_dump_json() + "\n"
        written = False

        def write_line() -> None:
            nonlocal written
            self._write_line(line)
            written = True

        try:
            self.db.insert(sample, line, write_line)
        except DuplicateSampleError:
            raise
        except StoreError as exc:  # never lose a measured sample to the index: the jsonl is the record
            _log.warning("sample not indexed (%s); it is in samples.jsonl and is indexed on resume", exc)
            if not written:
                self._write_line(line)

    def _write_line(self, line: str) -> None:
        with self.samples_path.open("ab") as f:
            if f.tell() > 0:
                with self.samples_path.open("rb") as r:
                    r.seek(-1, os.SEEK_END)
                    if r.read(1) != b"\n":  # a line torn by a crash: end it, so this one stays whole
                        line = "\n" + line
            f.write(line.encode())
            f.flush()
            os.fsync(f.fileno())

    def done_keys(self) -> set[tuple[Any, ...]]:
        """Resume keys of every stored sample, after indexing any line the database missed."""
        lines = self.samples_path.read_text().splitlines() if self.samples_path.exists() else []
        self.db.reconcile(self.run_id, lines)
        return {done_key(p) for p in self.db.points(self.run_id)}

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
