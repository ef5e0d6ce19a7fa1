"""Exit codes of ``bakeoff``: a script or CI job can tell a good run from a dead one without reading it.

0 only when every arm produced at least one valid sample (status ok with a decode rate and no flag that leaves
it out: what the statistics use) and the run measured every pass it planned (core/reports/completeness.py). The
numbers are documented in ``bakeoff run --help`` and the README.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import TYPE_CHECKING

from ..common.errors import BakeoffError, RunDirError

if TYPE_CHECKING:  # the boundary imports this module for every command, --help included: keep it light
    from ..results.sample import Sample

__all__ = ["ExitCode", "EXIT_CODES_HELP", "exit_code_for", "run_outcome", "is_valid"]


class ExitCode(IntEnum):
    OK = 0
    CRASH = 1  # an unexpected error in bakeoff itself (a traceback): please report it
    CONFIG = 2  # a BakeoffError: the file, an option, a preflight check, --out or an engine is wrong (run: nothing ran)
    NOTHING_MEASURED = 3  # the run ended without one valid sample (and writes no report)
    PARTIAL = 4  # some arm produced no valid sample, or failed (or the run ended) before all its points were measured
    WRITE_FAILED = 5  # the run directory could not be written (disk full, read-only): stored samples are kept
    INCONCLUSIVE = 6  # gate: after its passes the interval still straddles the limit; neither green nor red
    NONCONFORMING = 7  # conform: an applicable check failed, or an arm could not be tested (docs/conform.md)
    INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP: engines stopped, samples kept, --resume finishes it
    BROKEN_PIPE = 141  # the reader of the output went away (`| head`): 128 + SIGPIPE, as a shell reports it


EXIT_CODES_HELP = (
    "Exit codes: 0 every arm produced valid samples; 2 configuration error, nothing ran; "
    "3 nothing valid measured; 4 partial: some arm has no valid sample or failed midway, or the run ended short "
    "of its plan; "
    "5 the run directory could not be written (stopped; --resume after fixing); "
    "6 (bakeoff gate) inconclusive; 7 (bakeoff conform) a check failed or an arm could not be tested; "
    "130 interrupted (--resume finishes it); 141 the output's reader went away "
    "(e.g. `| head`); 1 a bakeoff bug."
)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code of a command that ended with ``exc`` (the CLI boundary's one table)."""
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    if isinstance(exc, RunDirError):
        return ExitCode.WRITE_FAILED
    if isinstance(exc, BakeoffError):
        return ExitCode.CONFIG
    return ExitCode.CRASH


def is_valid(sample: Sample) -> bool:
    """A sample the statistics use (core/analysis/stats.py ``enters_statistics``): no error, a positive decode
    rate, and no flag that leaves it out (a count-witness mismatch, a burst): a run of only such samples measured
    nothing."""
    from ..analysis.stats import enters_statistics  # here: --help must not load numpy

    return enters_statistics(sample)


def run_outcome(samples: Iterable[Sample], arms: list[str], failed: Iterable[str] = ()
                ) -> tuple[ExitCode, list[str]]:
    """The exit code of a finished run and the arms that have no valid sample (in the given order).

    :param failed: arms that failed midway (their engine died, an unexpected error): partial at best.
    """
    valid = {s.arm for s in samples if is_valid(s)}
    empty = [a for a in arms if a not in valid]
    if len(empty) == len(arms):
        return ExitCode.NOTHING_MEASURED, empty
    if empty or set(failed) & set(arms):
        return ExitCode.PARTIAL, empty
    return ExitCode.OK, []
