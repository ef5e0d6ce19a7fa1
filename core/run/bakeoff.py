"""Running a bakeoff as a library call: plan, run every pass (and the adaptive ones), guard the live box.

:func:`run_bakeoff` is what ``bakeoff run`` does, without a terminal: the CLI (core/cli/run.py) adds only its
flags, signal handling and progress bar, and ``bakeoff.run`` (core/api.py) adds the reports. Engines are
stopped on every way out; every sample is on disk the moment it completes.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ..analysis.stats import enters_statistics, needs_more_passes
from ..common.errors import BakeoffError, ConfigError, RunDirError
from ..common.redact import redact_text
from ..config.checks import check_phases_config
from ..config.schema import BakeoffFile
from ..engine.launcher import stop_leftover_engines
from ..results.record import StopRecord
from ..results.store import RunDir, new_run_dir
from .events import RunEvents
from .executor import Executor, LocalExecutor
from .live import LiveRun
from .passes import ExtraLaunches, PassPolicy, UntilDecided, run_passes
from .phases import run_phases
from .plan import Plan, plan_run, run_record
from .resume import Resume

__all__ = ["StopSignal", "check_stopping_rule", "measured_nothing", "new_run", "run_bakeoff", "stop_record"]


class StopSignal(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGHUP) ending a run like Ctrl-C; it keeps the signal's name for run.json, since
    SIGTERM is how a deadline (``timeout``, the live watchdog) ends a run."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"signal {signum}")


def stop_record(exc: BaseException) -> StopRecord:
    """What run.json says about a run that ``exc`` ended before its plan did."""
    if isinstance(exc, StopSignal):
        return StopRecord(at=time.time(), why="signal", detail=exc.signal_name)
    if isinstance(exc, KeyboardInterrupt):
        return StopRecord(at=time.time(), why="signal", detail="Ctrl-C")
    line = next(iter(str(exc).splitlines()), "")
    return StopRecord(at=time.time(), why="error", detail=redact_text(f"{type(exc).__name__}: {line}")[:300])


def _record_stop(run: RunDir, exc: BaseException) -> None:
    # a directory that cannot be written (maybe the error itself): the report then says it cannot tell why
    with contextlib.suppress(OSError, BakeoffError):
        run.update_record(stopped=stop_record(exc).model_dump(mode="json"))


def new_run(out: Path, plan: Plan) -> RunDir:
    """The run directory under ``out``; a path that cannot hold it is a one-line error, before any launch."""
    try:
        run = RunDir(new_run_dir(out, plan.config.name))
        run.hold()
        run.write_record(run_record(plan))
    except RunDirError as exc:
        raise ConfigError(f"--out {out}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create the run directory: {exc.strerror or exc} "
                          f"({exc.filename or out})") from None
    return run


def measured_nothing(run: RunDir) -> bool:
    """No stored sample enters the statistics: a run with nothing to report (the CLI exits 3 and neither it nor
    the Python API writes a report; its failures were said as they happened)."""
    return not any(enters_statistics(s) for s in run.samples())


def check_stopping_rule(until_ci: float | None, max_passes: int, stop_on_verdict: bool = False) -> None:
    """The adaptive passes' settings, checked once for the command line and the Python API alike.

    :raises ConfigError: ``until_ci`` outside (0, 1), fewer than one pass, or ``stop_on_verdict`` alone.
    """
    if until_ci is not None and not 0 < until_ci < 1:  # NaN fails the comparison too
        raise ConfigError(f"--until-ci {until_ci:g} (until_ci): the interval half-width to stop at is a fraction "
                          "between 0 and 1, e.g. 0.03 (3% on the command line)")
    if max_passes < 1:
        raise ConfigError(f"--max-passes {max_passes} (max_passes): at least 1 pass")
    if stop_on_verdict and until_ci is None:
        raise ConfigError("--stop-on-verdict ends the passes --until-ci adds: give --until-ci too (e.g. 20%)")


def _until_ci(config: BakeoffFile, until_ci: float, max_passes: int, stop_on_verdict: bool, run: RunDir,
              passes: int) -> tuple[bool, str]:
    """The ``--until-ci`` rule on the run's samples after ``passes`` passes."""
    return needs_more_passes(run.samples(), passes, until_ci, max_passes, baseline=config.baseline_arm,
                             seed=config.workload.seed, stop_on_verdict=stop_on_verdict,
                             margin=config.workload.equivalence_margin)


def _policies(config: BakeoffFile, executor: Executor, events: RunEvents, until_ci: float | None,
              max_passes: int, stop_on_verdict: bool,
              more_passes: Callable[[RunDir, int], tuple[bool, str]] | None) -> list[PassPolicy]:
    """The passes after the planned ones that the arguments of :func:`run_bakeoff` ask for, in this order."""
    policies: list[PassPolicy] = []
    if until_ci is not None:
        policies.append(UntilDecided(partial(_until_ci, config, until_ci, max_passes, stop_on_verdict),
                                     events.on_note))
    if more_passes is not None:
        policies.append(UntilDecided(more_passes, events.on_note))
    if executor.name == "local":  # Ray blocks are placed once; their launches are not redrawn here
        policies.append(ExtraLaunches(events))
    return policies


def run_bakeoff(config: BakeoffFile, out: Path, *, until_ci: float | None = None, max_passes: int = 10,
                resume: Resume | None = None, executor: Executor | None = None, stop_on_verdict: bool = False,
                events: RunEvents | None = None,
                more_passes: Callable[[RunDir, int], tuple[bool, str]] | None = None,
                policy: PassPolicy | None = None) -> RunDir:
    """Plan and run one bakeoff (or finish ``resume``'s) into a new run directory under ``out``.

    :param until_ci: add passes until every ratio's 95 % interval half-width is at most this fraction.
    :param stop_on_verdict: with ``until_ci``, also stop once every verdict is clear.
    :param events: progress callbacks; ``on_warning`` also receives the adaptive-pass decisions.
    :param more_passes: a caller's own stopping rule, asked after the planned passes with the run and the passes
        done: (another pass?, the line saying why); the regression gate's "until decided" (core/cli/regression.py).
    :param policy: the one policy that adds passes after the planned ones (core/run/passes.py), in place of those
        the arguments above and the launch states add: the tuning race (core/run/tune.py).
    :raises ConfigError: a file or flag combination that cannot run, before any engine starts.
    """
    executor = executor or LocalExecutor()
    events = events or RunEvents()
    check_stopping_rule(until_ci, max_passes, stop_on_verdict)
    if until_ci is not None and executor.name != "local":
        raise ConfigError("--until-ci adds passes on this machine; it cannot be combined with --executor ray")
    check_phases_config(config)
    plan = plan_run(config)
    for line in stop_leftover_engines():  # engines a killed bakeoff could not stop (its port, its memory)
        events.on_warning(line)
    if resume is None:
        run = new_run(out, plan)
    else:  # same directory, recorded orders, stored samples skipped
        run = resume.run
        resume.apply(plan)
    done = resume.done if resume else set()
    events.on_run_start(run, plan.requests_total, len(done))
    live = LiveRun(config, run, events.on_note)  # live: and phases: (docs/live.md); a no-op without them
    try:
        live.open()
        if config.phases is not None:
            assert live.guard is not None  # open() arms the undo guard whenever phases: is set
            run_phases(plan, run, events, live.guard)
            return run
        policies = [policy] if policy is not None else _policies(config, executor, events, until_ci, max_passes,
                                                                 stop_on_verdict, more_passes)
        run_passes(plan, run, events, executor, done, policies)
    except BaseException as exc:  # Ctrl-C, a stop signal, an error: the report says why the plan was cut short
        _record_stop(run, exc)
        raise
    finally:
        live.close()
        run.release()  # the run is over: a later --resume (or a report) of it may take the directory
    return run
