"""bakeoff's error tree. No third-party exception leaks out of the public API::

    BakeoffError
    ├── ConfigError                 bad bakeoff file, unknown key, impossible combination
    ├── EngineError
    │   ├── EngineStartupError      the engine did not come up; quotes the log line that says why
    │   ├── EngineUnavailable       the adapter or the engine binary cannot be loaded or found
    │   │   └── UnknownEngineError  no engine of that name is registered
    │   ├── CapabilityNotSupported  the arm asks for something this engine cannot do
    │   └── PreflightError          refused before launch (e.g. MTP on a GGUF without NextN layers)
    ├── MeasurementError            a run could not be measured as defined (not a failed request:
    │                               a failed request is a sample with status "error")
    ├── RunDirError                 the run directory or one of its files cannot be created or written
    ├── RunFileError                run.json is damaged and the index holds no copy of it
    ├── RunRecordError              run.json holds something that is not a run record
    │   └── NewerRunRecordError     ... written by a newer bakeoff (also a NewerSchemaError)
    ├── NewerSchemaError            a record written by a newer bakeoff whose schema this one cannot read
    ├── StoreError                  the run's SQLite index cannot be read or written
    │   └── DuplicateSampleError    a sample for a point that already has all its samples
    ├── PromoteError                a promotion or revert that did not complete
    └── BundleError                 a bundle that does not verify, or bundles that cannot be merged

The command line maps each to an exit code in one place (``core/cli/exit_codes.py:exit_code_for``).
"""

from __future__ import annotations

import errno

__all__ = [
    "BakeoffError",
    "ConfigError",
    "EngineError",
    "EngineStartupError",
    "EngineUnavailable",
    "UnknownEngineError",
    "CapabilityNotSupported",
    "PreflightError",
    "MeasurementError",
    "RunDirError",
    "RunFileError",
    "RunRecordError",
    "NewerRunRecordError",
    "NewerSchemaError",
    "StoreError",
    "DuplicateSampleError",
    "PromoteError",
    "BundleError",
]


class BakeoffError(Exception):
    """Base of every error bakeoff raises on purpose."""


class ConfigError(BakeoffError):
    """The bakeoff file or a command-line option is wrong; the message names the field."""


class EngineError(BakeoffError):
    """Something about an engine prevents the arm from running."""


class EngineStartupError(EngineError):
    """The engine exited or never became ready.

    :param reason: a short classification (``missing-mtp-layers``, ``out-of-memory``, ``unknown-flag``, ...).
    :param log_line: the engine's own log line that shows the reason, quoted verbatim.
    :param log_tail: the last lines of the engine log, for the arm's failure record.
    """

    def __init__(self, message: str, *, reason: str = "unknown", log_line: str | None = None,
                 log_tail: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.log_line = log_line
        self.log_tail = log_tail


class EngineUnavailable(EngineError):
    """The adapter failed to import, or the engine's binary/interpreter is not installed."""


class UnknownEngineError(EngineUnavailable):
    """No engine of that name is registered."""


class CapabilityNotSupported(EngineError):
    """The arm needs a feature (speculative method, knob, split mode) this engine lacks."""


class PreflightError(EngineError):
    """A check before launch refused the arm; the message says what and why."""


class MeasurementError(BakeoffError):
    """The measurement protocol cannot be carried out as defined."""


class RunDirError(BakeoffError):
    """The run directory or one of its files cannot be created or written; the message names the path."""


class RunFileError(BakeoffError):
    """run.json is damaged and the index holds no copy of it."""


class NewerSchemaError(BakeoffError):
    """A record was written by a newer bakeoff whose schema this one cannot read."""


class RunRecordError(BakeoffError):
    """run.json holds something that is not a run record; the message names the field."""


class NewerRunRecordError(RunRecordError, NewerSchemaError):
    """run.json was written by a newer bakeoff whose record this one cannot read."""


class StoreError(BakeoffError):
    """The run's SQLite index cannot be read or written."""


class DuplicateSampleError(StoreError):
    """A sample for a measurement point that already has all its samples: storing it would count it twice."""


class PromoteError(BakeoffError):
    """A promotion or revert that did not complete (the message says what is serving now)."""


class BundleError(BakeoffError):
    """A result bundle that does not verify (a file changed, missing or added), or bundles that cannot be
    merged (the same samples twice); the message names the bundle and the file."""


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOTDIR}


def is_write_failure(exc: BaseException) -> bool:
    """An OSError that means the run directory cannot be written: the whole run stops, not one arm."""
    return isinstance(exc, OSError) and (exc.errno in _DISK_ERRNOS
                                         or (exc.errno in _PATH_ERRNOS and exc.filename is not None))
