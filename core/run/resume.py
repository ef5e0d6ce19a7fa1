"""``bakeoff run --resume RUN_DIR``: finish an interrupted run in its own directory.

A resumed run uses the configuration recorded in run.json, not whatever the bakeoff file says today:
mixing two configurations in one run would compare arms that were not measured the same way. Samples
already stored (samples.jsonl, indexed in the run's SQLite database) are skipped point by point, and
the database refuses a second sample for a point, so nothing is measured or counted twice. The pass
orders recorded in run.json are reused, so the interleaving is the one the run started with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..common.errors import ConfigError, RunDirError, RunFileError, RunRecordError
from ..common.redact import masked_settings, redact_config
from ..config.loader import load_bakeoff
from ..config.schema import BakeoffFile
from ..config.sessions import load_sessions
from ..measure.points import DoneKeys
from ..results.record import RunRecord
from ..results.store import RunDir
from .plan import Plan

__all__ = ["Resume", "load_resume"]


@dataclass
class Resume:
    """What a resumed run continues from."""

    run: RunDir
    config: BakeoffFile
    done: DoneKeys
    record: RunRecord
    warnings: list[str] = field(default_factory=list)  # what reading and repairing the run found

    def apply(self, plan: Plan) -> None:
        """Reuse the recorded pass orders and mark the run as resumed (unfinished, no stop recorded) in run.json.

        :raises ConfigError: the recorded orders name arms the plan does not have.
        """
        orders = self.record.orders
        if orders:
            names = {a.arm.name for a in plan.arms}
            extra = set(self.record.extra_launches.passes) if self.record.extra_launches else set()
            # a pass of extra launches (core/run/passes.py ExtraLaunches) runs only some arms
            if any(set(order) != names if i not in extra else not set(order) <= names
                   for i, order in enumerate(orders)):
                raise ConfigError(f"{self.run.path}: the pass orders in run.json do not match its arms; "
                                  f"this run directory cannot be resumed")
            plan.orders = [list(order) for order in orders]
        self.run.update_record(resumed_at=[*self.record.resumed_at, time.time()], finished_at=None,
                               stopped=None)


def load_resume(run_dir: Path, file: Path | None = None) -> Resume:
    """Read an interrupted run's configuration and what it already stored.

    :param file: the bakeoff file, if the user gave one; it must resolve to the recorded configuration.
    :raises ConfigError: not a run directory, an unreadable configuration, or a file that differs.
    """
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        raise ConfigError(f"--resume {run_dir}: not a bakeoff run directory (no run.json)")
    run = RunDir(run_dir, create=False)
    try:
        run.hold()  # before reading what is done: a second resume of this run is refused here
    except RunDirError as exc:
        raise ConfigError(f"--resume {run_dir}: {exc}") from None
    try:
        record = run.read_record()  # a damaged run.json is read from the index's copy (and rewritten on resume)
    except (RunFileError, RunRecordError) as exc:
        raise ConfigError(f"--resume {run_dir}: {exc}") from None
    if record.config is None:
        raise ConfigError(f"--resume {run_dir}: run.json records no configuration")
    config = record.config
    if config.workload.sessions is not None:  # a conversations file edited since the start is refused by name
        try:
            load_sessions(config.workload.sessions)
        except ConfigError as exc:
            raise ConfigError(f"--resume {run_dir}: {exc}") from None
    recorded = redact_config(config.model_dump(mode="json"))
    if file is not None:
        given = load_bakeoff(file)
        if redact_config(given.model_dump(mode="json")) != recorded:
            raise ConfigError(f"--resume: {file} differs from the configuration recorded in {run_json}; a resumed "
                              f"run keeps its own configuration. Leave out FILE, or start a new run.")
        config = given  # the file holds the values run.json masks (env values, URL credentials)
    elif masked := masked_settings(recorded):
        raise ConfigError(f"--resume {run_dir}: run.json does not record secret values ({', '.join(masked)}); "
                          f"give the bakeoff file as well: bakeoff run FILE --resume {run_dir}")
    done = run.done_keys()
    return Resume(run=run, config=config, done=done, record=record, warnings=list(run.warnings))
