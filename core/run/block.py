"""One host's paired block, run where the engine runs (a Ray task calls :func:`run_block`; no Ray in here).

The block is planned and run by the same protocol as a local run, in a scratch run directory on this node.
Everything the driver must store comes back as messages, yielded the moment they exist: each sample as it
completes (the driver lands it through its run directory's single write path), each arm record, the new
bytes of the arm files (engine logs, argv, greedy outputs), and this host's facts (GPU, driver, CPU).
Losing the node loses only what had not been yielded yet: ``--resume`` re-runs exactly those points.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config.placement import Block, blocks_of
from ..config.schema import Arm, BakeoffFile
from ..engine.hardware import hardware_record
from ..engine.launcher import stop_all, stop_leftover_engines
from ..host.hostinfo import host_info
from ..results.record import ArmAttempt, RunRecord
from ..results.sample import Sample
from ..results.store import RunDir
from .events import RunEvents
from .plan import plan_run
from .protocol import run_plan

__all__ = ["APPENDED", "Message", "block_config", "run_block"]

# ("sample", json) | ("record", arm, record) | ("file", relpath, offset, bytes) | ("host", facts)
# | ("warning", text) | ("end", error or None)
Message = tuple[Any, ...]

APPENDED = (".log", ".jsonl")  # grow by appends (engine logs, outputs); other files are rewritten whole


def block_config(config: BakeoffFile, host: str) -> tuple[BakeoffFile, Block]:
    """The file as ``host`` runs it (its block's arms under their stored names, its baseline, no placement),
    and the block."""
    assert config.hosts is not None
    block = next(b for b in blocks_of(config.hosts, [a.name for a in config.arms], config.baseline_arm)
                 if b.host.name == host)
    arms: list[Arm] = [a.model_copy(update={"name": block.stored[a.name]}) for a in config.arms
                       if a.name in block.stored]
    own = config.model_copy(update={"arms": arms, "baseline": block.baseline, "hosts": None, "executor": None})
    return own, block


class _StreamingRunDir(RunDir):
    """A scratch run directory whose samples and arm records go to ``out`` instead of staying here."""

    def __init__(self, path: Path, run_id: str, out: queue.Queue[Message]) -> None:
        super().__init__(path)
        self._run_id = run_id
        self._out = out
        self._shipped: dict[Path, int] = {}

    def append(self, sample: Sample) -> Sample:
        sample = sample.model_copy(update={"run_id": self.run_id})
        self._out.put(("sample", sample.model_dump_json()))
        return sample

    def append_attempt(self, arm: str, attempt: ArmAttempt) -> None:
        self.ship_files()  # the arm's logs first: a record may point at them
        self._out.put(("record", arm, self.redactor.value(attempt.to_json())))

    def ship_files(self) -> None:
        """Send what the arm files gained since the last call (rewritten files whole)."""
        for path in sorted((self.path / "arms").rglob("*")) if (self.path / "arms").is_dir() else []:
            if not path.is_file() or path.name == "engine.pid":
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            start = self._shipped.get(path, 0) if path.suffix in APPENDED else 0
            if start > len(data):  # rewritten shorter: send it whole
                start = 0
            if data[start:] or start == 0:
                self._out.put(("file", str(path.relative_to(self.path)), start, data[start:]))
            self._shipped[path] = len(data)


def run_block(payload: dict[str, Any]) -> Iterator[Message]:
    """Plan and run one host's block; yield its messages as they happen (see the module docstring).

    ``payload``: ``config`` (the whole file, as JSON), ``host``, ``orders`` (pass orders of the whole file),
    ``done`` (stored measurement keys), ``run_id``, ``meta`` (the driver's run.json).
    """
    for line in stop_leftover_engines():  # engines a lost task on this node left behind
        yield ("warning", line)
    host = str(payload["host"])
    full = BakeoffFile.model_validate(payload["config"])
    config, block = block_config(full, host)
    plan = plan_run(config)  # preflight on this node: its engine binaries, its model cache or shared path
    plan.orders = [[block.stored[a] for a in order if a in block.stored] for order in payload["orders"]]
    done = {tuple(k) for k in payload["done"]}
    yield ("host", {"host": host_info(), **{k: v for k, v in hardware_record([a.arm for a in plan.arms]).items()
                                             if k in ("gpus", "bandwidth")}})
    out: queue.Queue[Message] = queue.Queue()
    scratch = Path(tempfile.mkdtemp(prefix=f"bakeoff-{host}-"))
    run = _StreamingRunDir(scratch, str(payload["run_id"]), out)
    run.write_record(RunRecord.model_validate(payload["meta"]))

    def measure() -> None:
        error = None
        try:
            run_plan(plan, run, RunEvents(on_warning=lambda msg: out.put(("warning", f"{host}: {msg}"))), done)
            run.ship_files()
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        out.put(("end", error))

    worker = threading.Thread(target=measure, name=f"bakeoff-block-{host}", daemon=True)
    worker.start()
    try:
        while True:
            message = out.get()
            yield message
            if message[0] == "end":
                break
    finally:  # cancelled or finished: no engine of this block outlives it
        stop_all()
        worker.join(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)  # everything in it went home
