"""A run directory: ``run.json`` (what was run, on what), ``samples.jsonl`` (one line per request) and
``arm_records.jsonl`` (one line per arm start: boot time, effective settings, failure).

A run is identified by the ``run_id`` recorded in its run.json, not by its directory name: a copied or
renamed run directory is the same run, and resuming it continues it. Each sample is appended, flushed
and fsynced as it completes, and indexed in the run's SQLite database (core/results/db.py) in the same step, so a
resumed run skips what is stored and never stores a point twice. Arm records are appended the same way;
run.json is written at the start and the end of a run (and of each added pass), never once per arm.

samples.jsonl and the index are two copies of one truth, reconciled whenever the run is read: a line the
index lacks is indexed (on resume), a sample the file lost (a torn, corrupt or deleted file) is restored
from the index, and what could not be restored is reported, never silently dropped. The report and
resume read the same reconciled set. The directory is readable by its owner only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import (
    BakeoffError,
    DuplicateSampleError,
    NewerSchemaError,
    RunDirError,
    RunFileError,
    StoreError,
)
from ..common.redact import Redactor, redact_config
from .db import ARM_RECORDS, DB_NAME, RunDB, arm_records_of, done_key, point_of, slots_of, uid_of
from .record import RUN_SCHEMA_VERSION, ArmAttempt, RunRecord, parse_run_record
from .sample import Sample
from .sample_lines import parse_sample, read_json_lines, scan_lines

_log = logging.getLogger(__name__)

__all__ = [
    "ARM_RECORDS",
    "SET_ASIDE",
    "RunDir",
    "StoredSamples",
    "new_run_dir",
    "read_samples",
]

SET_ASIDE = "samples.set-aside.jsonl"  # lines taken out of samples.jsonl by a repair, kept byte for byte


def _fs_error(what: str, path: Path, exc: OSError) -> RunDirError:
    where = exc.filename if exc.filename and str(exc.filename) != str(path) else None
    return RunDirError(f"{what} {path}: {exc.strerror or exc}" + (f" ({where})" if where else ""))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def dir_safe(name: str) -> str:
    """A run's name as its directory name carries it, after the start stamp."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:40]


def new_run_dir(base: Path, name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = dir_safe(name)
    path = base / f"{stamp}-{safe}"
    n = 1
    try:
        while path.exists():
            n += 1
            path = base / f"{stamp}-{safe}-{n}"
    except OSError as exc:  # e.g. --out under a directory we may not read
        raise _fs_error("cannot create a run directory under", base, exc) from None
    return path


@dataclass
class StoredSamples:
    """A run's samples after reconciling samples.jsonl with the index, and what reconciling found."""

    samples: list[Sample] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unindexed: list[tuple[str, Sample]] = field(default_factory=list)  # file lines the index lacks
    restored: list[str] = field(default_factory=list)  # index rows whose line the file lost
    kept_lines: list[str] = field(default_factory=list)  # the file's lines that hold this run's samples
    set_aside: list[bytes] = field(default_factory=list)  # unreadable, other runs' or duplicate lines


class RunDir:
    """One run directory.

    :param create: make the directory (owner-only) if it does not exist; readers pass False.
    :param redactor: masks this run's secrets in everything it writes (set by the protocol).
    """

    def __init__(self, path: Path, *, create: bool = True, redactor: Redactor | None = None) -> None:
        self.path = path
        if create and not path.is_dir():
            old = os.umask(0o077)
            try:
                path.mkdir(parents=True, exist_ok=True)
                os.chmod(path, 0o700)
            except OSError as exc:
                raise _fs_error("cannot create the run directory", path, exc) from None
            finally:
                os.umask(old)
        self.samples_path = path / "samples.jsonl"
        self.run_json = path / "run.json"
        self.records_path = path / ARM_RECORDS
        self.redactor = redactor or Redactor()
        self.warnings: list[str] = []  # what reading run.json and the records found (reports show them)
        self._run_id: str | None = None
        # a writer pins the directory it opened: one deleted or moved mid-run is an error, never recreated
        self._identity = _identity(path) if create else None
        self._lock_fd: int | None = None

    def hold(self) -> None:
        """Hold this run directory for writing until the process ends: an exclusive lock on it (a second
        ``bakeoff run --resume`` of the same run is refused before it launches anything, FAULTS-2 R18),
        and its identity pinned, so its deletion or move is noticed (R3).

        :raises RunDirError: another process holds it, or it cannot be opened.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _fs_error("cannot open the run directory", self.path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RunDirError(f"the run directory {self.path} is in use by another bakeoff (a run or --resume of "
                              "it is still going); wait for it to end, or stop it first") from None
        self.release()
        self._lock_fd = fd
        self._unlock = weakref.finalize(self, os.close, fd)  # released at the latest when this RunDir goes
        st = os.fstat(fd)
        self._identity = (st.st_dev, st.st_ino)

    def release(self) -> None:
        """Give up the lock :meth:`hold` took (the run is over); the identity stays pinned."""
        if self._lock_fd is not None:
            self._unlock()
            self._lock_fd = None

    def _still_there(self) -> None:
        """:raises RunDirError: the directory this RunDir opened is gone or another one took its path."""
        if self._identity is not None and _identity(self.path) != self._identity:
            raise RunDirError(f"the run directory {self.path} was deleted or moved while the run wrote to it; "
                              "nothing more is written there (the samples stored before went with it)")

    @classmethod
    def open(cls, path: Path) -> RunDir:
        """An existing run directory, for reading: nothing is created or changed."""
        return cls(path, create=False)

    # -- identity ------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        """The id recorded in run.json; for a run from before ids were recorded, the id its index and
        samples carry (its original directory name); for a new directory, its name."""
        if self._run_id is None:
            self._run_id = self._recorded_id() or self.path.name
        return self._run_id

    def _recorded_id(self) -> str | None:
        try:
            recorded = self._load_run_json().get("run_id")
        except (OSError, ValueError, BakeoffError):
            recorded = None
        if isinstance(recorded, str) and recorded:
            return recorded
        if self.db.exists:
            try:
                ids = self.db.run_ids()
            except StoreError:
                ids = []
            if len(ids) == 1:
                return ids[0]
        if self.samples_path.exists():
            try:
                with self.samples_path.open("rb") as f:
                    for raw in f:
                        try:
                            found = json.loads(raw.decode("utf-8")).get("run_id")
                        except (ValueError, AttributeError):
                            continue
                        if isinstance(found, str) and found:
                            return found
            except OSError:
                return None
        return None

    @property
    def db(self) -> RunDB:
        return RunDB(self.path)

    def arm_dir(self, arm: str) -> Path:
        self._still_there()
        d = self.path / "arms" / arm
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fs_error(f"cannot create the directory of arm {arm[:60]!r}:", d, exc) from None
        return d

    def write_arm_text(self, arm: str, name: str, text: str) -> Path:
        """A small file in the arm's directory (argv.txt), with this run's secrets masked."""
        target = self.arm_dir(arm) / name
        try:
            target.write_text(self.redactor.text(text))
        except OSError as exc:
            raise _fs_error("cannot write", target, exc) from None
        return target

    # -- run.json ------------------------------------------------------------------------------
    def write_record(self, record: RunRecord) -> None:
        """Write run.json (atomically) and its copy in the index; configuration secrets are masked.

        The one way run.json is written: the record's own version and this run's id are stamped on it.
        """
        self._still_there()
        payload = record.to_json()
        payload.pop("run_id", None)
        if isinstance(payload.get("config"), dict):  # names kept, values masked
            payload["config"] = redact_config(payload["config"])
        if "arm_records" in payload:  # what engines said (errors, log tails, settings): by value and shape
            payload["arm_records"] = self.redactor.value(payload["arm_records"])
        payload = {"schema_version": RUN_SCHEMA_VERSION, "run_id": self.run_id,
                   **{k: v for k, v in payload.items() if k != "schema_version"}}
        tmp = self.run_json.with_suffix(".json.tmp")
        try:
            with tmp.open("w") as f:
                f.write(json.dumps(payload, indent=2, default=str) + "\n")
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self.run_json)
        except OSError as exc:
            raise _fs_error("cannot write", self.run_json, exc) from None
        try:
            self.db.put_run(self.run_id, record, payload)
        except StoreError as exc:  # run.json is the record; the index catches up on resume
            _log.warning("run index not updated: %s", exc)

    def _load_run_json(self) -> dict[str, Any]:
        data = json.loads(self.run_json.read_bytes().decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data

    def read_record(self, *, strict: bool = True) -> RunRecord:
        """run.json as a typed record (empty if the run never wrote one); when it is damaged, the index's copy.
        The one way run.json is read; nothing is written.

        :param strict: raise when run.json is damaged and the index has no copy; else return an empty
            record and warn.
        :raises RunFileError: damaged, no copy in the index (strict only).
        :raises NewerRunRecordError: written by a newer bakeoff.
        :raises RunRecordError: a field holds something this bakeoff cannot read (the message names it).
        """
        if not self.run_json.exists():
            return RunRecord()
        try:
            data = self._load_run_json()
        except (OSError, ValueError) as exc:
            why = f"{self.run_json} is damaged ({type(exc).__name__}: {exc}; truncated by a crash or a full disk?)"
        else:
            return parse_run_record(data, str(self.run_json), self.warnings)
        copy = self._index_meta()
        if copy is not None:
            self.warnings.append(f"{why}; read the copy kept in {DB_NAME}")
            return parse_run_record(copy, f"{DB_NAME} (copy of run.json)", self.warnings)
        if strict:
            raise RunFileError(f"{why}, and {DB_NAME} holds no copy of it")
        self.warnings.append(f"{why}; configuration, baseline and arm records are unknown")
        return RunRecord()

    def _index_meta(self) -> dict[str, Any] | None:
        if not self.db.exists:
            return None
        try:
            return self.db.run_meta(self.run_id)
        except StoreError:
            return None

    def update_record(self, **changes: Any) -> RunRecord:
        """Change some fields of run.json (validated like any record) and write it; returns the new record."""
        data = {**self.read_record().to_json(), **changes}
        record = parse_run_record(_jsonable(data), str(self.run_json))
        self.write_record(record)
        return record

    # -- arm records (append-only) -------------------------------------------------------------
    def arm_records(self) -> dict[str, list[ArmAttempt]]:
        """Per arm, one record per start (pass), oldest first: arm_records.jsonl, or run.json for a run
        written before records were appended."""
        if self.records_path.exists():
            try:
                bad = read_json_lines(self.records_path)[1]
            except OSError as exc:
                raise _fs_error("cannot read", self.records_path, exc) from None
            if bad:
                self.warnings.append(f"{self.records_path}: {bad} unreadable line(s) skipped")
        return arm_records_of(self.path, self.read_record(strict=False), self.warnings)

    def append_attempt(self, arm: str, attempt: ArmAttempt) -> None:
        """Append one arm attempt (secrets masked); a run's first append moves run.json's records over."""
        lines = []
        if not self.records_path.exists():
            for name, old in self.arm_records().items():
                lines += [json.dumps({"arm": name, "record": a.to_json()}, default=str) for a in old]
        lines.append(json.dumps({"arm": arm, "record": self.redactor.value(attempt.to_json())}, default=str))
        self._append(self.records_path, "".join(line + "\n" for line in lines))

    # -- samples -------------------------------------------------------------------------------
    def append(self, sample: Sample) -> Sample:
        """Store one sample: the jsonl line (fsynced) and its index row, or neither. Returns what was stored:
        the run's id filled in, secrets echoed in its error text masked.

        :raises DuplicateSampleError: its measurement point is already stored; nothing is written.
        :raises RunDirError: samples.jsonl cannot be written (disk full, read-only); samples already
            stored stay as they are.
        """
        self._still_there()  # before the index: SQLite would create a new one in a recreated directory
        sample = sample.model_copy(update={
            "run_id": sample.run_id or self.run_id,
            "error": None if sample.error is None else self.redactor.text(sample.error),
            # a server controls its finish_reason text too; a key echoed there must not reach a report (R6)
            "finish_reason": None if sample.finish_reason is None else self.redactor.text(sample.finish_reason),
            "flags": [self.redactor.text(f) for f in sample.flags]})
        line = sample.model_dump_json() + "\n"
        written = False

        def write_line() -> None:
            nonlocal written
            self._append(self.samples_path, line)
            written = True

        try:
            self.db.insert(sample, line, write_line)
        except DuplicateSampleError:
            raise
        except StoreError as exc:  # never lose a measured sample to the index: the jsonl is the record
            _log.warning("sample not indexed (%s); it is in samples.jsonl and is indexed on resume", exc)
            if not written:
                self._append(self.samples_path, line)
        return sample

    def _append(self, path: Path, text: str | bytes) -> None:
        """Append whole lines, fsynced; a failed write (disk full) is cut back, so no torn line is left."""
        data = text.encode() if isinstance(text, str) else text
        self._still_there()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise _fs_error("cannot write", path, exc) from None
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":  # a line torn by an earlier crash: end it
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:  # unbuffered: a short write is continued, a failed one cut back below
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):  # undo the partial line if the file lets us
                    os.ftruncate(fd, size)
                raise _fs_error("cannot write", path, exc) from None
        finally:
            os.close(fd)

    def stored_samples(self) -> StoredSamples:
        """The run's samples: samples.jsonl reconciled with the index, read only (nothing is written)."""
        out = StoredSamples()
        try:
            scan = scan_lines(self.samples_path, self.run_id)
        except OSError as exc:
            raise _fs_error("cannot read", self.samples_path, exc) from None
        rows: list[tuple[str, str, str]] | None = None  # (uid, point, data) of the index
        if self.db.exists:
            try:
                rows = self.db.rows(self.run_id)
            except StoreError as exc:
                out.warnings.append(f"the index is unreadable ({exc}); samples read from samples.jsonl alone")
        remaining = Counter(uid for uid, _, _ in rows or [])
        per_point = Counter(point for _, point, _ in rows or [])
        data_by_uid = {uid: data for uid, _, data in rows or []}
        kept: list[Sample] = []
        duplicates: list[bytes] = []
        for line in scan.good:
            uid = uid_of(line.text)
            if remaining[uid] > 0:
                remaining[uid] -= 1
            else:  # a line the index lacks: indexed on resume, unless its point is already full
                point = point_of(line.sample)
                if per_point[json.dumps(point)] >= slots_of(point):
                    duplicates.append(line.text.encode())
                    continue
                per_point[json.dumps(point)] += 1
                out.unindexed.append((line.text, line.sample))
            kept.append(line.sample)
            out.kept_lines.append(line.text)
        for uid, n in remaining.items():
            for _ in range(n):
                try:
                    kept.append(parse_sample(data_by_uid[uid]))
                except (ValueError, NewerSchemaError):
                    out.warnings.append(f"{DB_NAME}: a stored sample is unreadable and was skipped")
                    continue
                out.restored.append(data_by_uid[uid])
        out.samples = kept
        out.set_aside = scan.bad_bytes + scan.other_bytes + duplicates
        name = self.samples_path.name
        if scan.bad:
            shown = ", ".join(str(n) for n in scan.bad[:5]) + (", …" if len(scan.bad) > 5 else "")
            if rows is None:
                fate = f"no index to restore them from ({DB_NAME} missing or unreadable)"
            elif out.restored:
                fate = f"{len(out.restored)} sample(s) missing from the file were restored from {DB_NAME}"
            else:  # the line of a request the crash cut off: the index never committed it
                fate = f"{DB_NAME} holds no sample for them (a point cut off by a crash is measured on resume)"
            out.warnings.append(f"{name}: {len(scan.bad)} unreadable line(s) (line {shown}; torn by a crash, "
                                f"or not UTF-8); {fate}")
        elif out.restored:
            out.warnings.append(f"{name}: {len(out.restored)} sample(s) missing from the file were restored "
                                f"from {DB_NAME}")
        for other, n in scan.other_runs.items():
            out.warnings.append(f"{name}: {n} line(s) of another run ({other}) left out; this run is {self.run_id}")
        if duplicates:
            out.warnings.append(f"{name}: {len(duplicates)} line(s) repeat a measurement point already stored; "
                                "left out")
        if scan.unknown_fields:
            out.warnings.append(f"{name}: fields this bakeoff does not know were ignored "
                                f"({', '.join(sorted(scan.unknown_fields))}; written by a newer bakeoff)")
        return out

    def reconcile(self) -> StoredSamples:
        """Make samples.jsonl and the index agree (resume): index lines the index lacks; when the file lost
        samples or holds lines that are not this run's samples, rewrite it from the reconciled set and keep
        the lines taken out, byte for byte, in samples.set-aside.jsonl.

        :raises StoreError: the index cannot be used.
        """
        stored = self.stored_samples()
        self.db.add_lines(self.run_id, stored.unindexed)
        if stored.restored or stored.set_aside:
            texts = stored.kept_lines + stored.restored
            self._rewrite_samples(texts, stored.set_aside)
            stored.warnings.append(f"{self.samples_path.name} repaired: {len(stored.restored)} sample(s) restored "
                                   f"from {DB_NAME}, {len(stored.set_aside)} line(s) moved to {SET_ASIDE}")
        self.warnings += stored.warnings
        return stored

    def _rewrite_samples(self, texts: list[str], set_aside: list[bytes]) -> None:
        if set_aside:
            self._append(self.path / SET_ASIDE, b"".join(raw + b"\n" for raw in set_aside))
        tmp = self.samples_path.with_suffix(".jsonl.tmp")
        try:
            with tmp.open("wb") as f:
                f.write("".join(t.strip() + "\n" for t in texts).encode())
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self.samples_path)
        except OSError as exc:
            raise _fs_error("cannot rewrite", self.samples_path, exc) from None

    def done_keys(self) -> set[tuple[Any, ...]]:
        """Resume keys of every stored sample, after reconciling samples.jsonl with the index."""
        self.reconcile()
        return {done_key(p) for p in self.db.points(self.run_id)}

    def samples(self) -> list[Sample]:
        return self.stored_samples().samples


def _jsonable(data: dict[str, Any]) -> Any:
    """A dict as JSON would hold it (models, paths and tuples turned into plain values)."""
    return json.loads(json.dumps(data, default=_plain))


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    return str(value)


def read_samples(path: Path) -> list[Sample]:
    """All samples of a run directory, reconciled with its index (see :meth:`RunDir.stored_samples`)."""
    return RunDir(path, create=False).stored_samples().samples
