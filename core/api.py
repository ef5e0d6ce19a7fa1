"""The Python API: run a bakeoff file, or read a run directory, and get its typed summary.

::

    import bakeoff

    summary = bakeoff.run("examples/head-to-head-cpu.yaml", out="runs")
    for c in summary.comparisons:
        print(c.arm, f"{c.ratio.estimate:.2f}x", c.verdict)
    again = bakeoff.read_run(summary.path)  # any run directory, e.g. one `bakeoff run` made

``bakeoff run`` is a thin shell over the same calls (core/run/bakeoff.py, then the reports): the same plan,
the same run directory, the same report files and the same summary.
"""

from __future__ import annotations

from pathlib import Path

from .config.loader import load_bakeoff
from .config.schema import BakeoffFile
from .reports import write_reports
from .reports.model import RunSummary, require_run_dir, summarize_run
from .run.bakeoff import measured_nothing, run_bakeoff
from .run.events import RunEvents
from .run.executor import executor_for

__all__ = ["RunSummary", "read_run", "run"]


def run(file: str | Path | BakeoffFile, out: str | Path = "runs", *, until_ci: float | None = None,
        max_passes: int = 10, stop_on_verdict: bool = False, executor: str | None = None,
        events: RunEvents | None = None, reports: bool = True) -> RunSummary:
    """Run a bakeoff file (a path, or a loaded :class:`~bakeoff.core.config.schema.BakeoffFile`) into a new run
    directory under ``out``, write its report files, and return its summary (``summary.path`` says where).

    :param until_ci: add passes until every ratio's 95 % interval half-width is at most this fraction (0.03),
        between 0 and 1 as ``--until-ci`` takes it.
    :param max_passes: the most passes ``until_ci`` runs, at least 1 (``--max-passes``).
    :param executor: ``local`` (default) or ``ray`` (the file's ``hosts:``).
    :raises BakeoffError: a file that cannot run, or a stopping rule the command line would refuse
        (ConfigError, in its words, before any engine starts), or a run directory that cannot be written.
        Failed arms are not exceptions: they are in the summary's ``failures``; a run that measured nothing
        valid writes no report files (the summary still says why).
    """
    config = file if isinstance(file, BakeoffFile) else load_bakeoff(file)
    directory = run_bakeoff(config, Path(out), until_ci=until_ci, max_passes=max_passes,
                            executor=executor_for(config, executor), stop_on_verdict=stop_on_verdict,
                            events=events)
    summary = read_run(directory.path)
    if reports and not measured_nothing(directory):  # nothing measured: no report; summary.failures say why
        write_reports(directory.path, summary)
    return summary


def read_run(run_dir: str | Path) -> RunSummary:
    """The summary of a run directory (finished or interrupted); nothing in it is written.

    :raises ConfigError: ``run_dir`` holds no run (a mistyped path is an error, never an empty summary).
    """
    require_run_dir(Path(run_dir))
    return summarize_run(Path(run_dir))
