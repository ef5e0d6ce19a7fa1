"""An embedded SQLite index of a run, beside its ``samples.jsonl``: what resume and ``bakeoff runs`` read.

``samples.jsonl`` stays the record (one line per request, fsynced); the database indexes the same
samples by their measurement point so that a resumed run can skip what is stored and can never store
a point twice. One file per run directory (``bakeoff.sqlite``, owner-only), in WAL mode so a reader
(``bakeoff runs`` while a run is going) never blocks the writer. Readers open it read-only and leave the
run directory exactly as they found it (see :meth:`RunDB._read`).

Write order for one sample: a transaction checks the point and inserts the row, the JSON line is
appended and fsynced, then the transaction commits. A crash between the last two leaves a line the
index lacks; :meth:`RunDB.reconcile` adds it back from ``samples.jsonl`` before anything is resumed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ..common.errors import BakeoffError, DuplicateSampleError, StoreError
from .record import ArmAttempt, RunRecord, failed_arms, parse_run_record
from .sample import Sample
from .sample_lines import parse_sample, read_json_lines

__all__ = [
    "DB_NAME",
    "RunDB",
    "RunSummary",
    "done_key",
    "point_of",
    "slots_of",
    "uid_of",
]

DB_NAME = "bakeoff.sqlite"
ARM_RECORDS = "arm_records.jsonl"  # one line per arm start, beside samples.jsonl
DB_SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id       TEXT PRIMARY KEY,
    name         TEXT,
    started_at   REAL,
    finished_at  REAL,
    tool_version TEXT,
    meta         TEXT NOT NULL,          -- run.json as written
    updated_at   REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    id                INTEGER PRIMARY KEY,
    run_id            TEXT NOT NULL,
    point             TEXT NOT NULL,      -- JSON [arm, prompt, mode, rep, pass, depth, concurrency]
    slot              INTEGER NOT NULL,   -- 0 .. concurrency-1: streams of one batch share a point
    uid               TEXT NOT NULL,      -- sha256 of the samples.jsonl line (equal lines may repeat)
    arm               TEXT NOT NULL,
    engine            TEXT,
    prompt            TEXT NOT NULL,
    mode              TEXT NOT NULL,
    rep               INTEGER NOT NULL,
    pass_index        INTEGER NOT NULL,
    status            TEXT NOT NULL,
    error             TEXT,
    flags             TEXT NOT NULL,
    completion_tokens INTEGER,
    decode_tps        REAL,
    ttft_s            REAL,
    started_at        REAL,
    data              TEXT NOT NULL,      -- the Sample as JSON
    UNIQUE (run_id, point, slot)
);
CREATE INDEX IF NOT EXISTS samples_by_arm ON samples (run_id, arm, status);
CREATE INDEX IF NOT EXISTS samples_by_uid ON samples (run_id, uid);
"""


# (arm, prompt, mode, rep, pass, depth, concurrency), and the rate last for an open-loop request
Point = tuple[Any, ...]
T = TypeVar("T")


def point_of(sample: Sample) -> Point:
    """The measurement point a sample belongs to: (arm, prompt, mode, rep, pass, depth, concurrency), and
    the rate after them for an open-loop request (whose rep is its place in the point's schedule)."""
    point = (sample.arm, sample.prompt, sample.mode, sample.rep, sample.pass_index,
             getattr(sample, "depth", None), getattr(sample, "concurrency", None))
    rate = getattr(sample, "rate", None)
    return point if rate is None else (*point, rate)


def done_key(point: Point) -> tuple[Any, ...]:
    """The protocol's resume key for a point: 5 fields for plain points, 7 when depth or concurrency is set."""
    return point[:5] if len(point) == 7 and point[5] is None and point[6] is None else point


def slots_of(point: Point) -> int:
    """Samples a point holds: one per stream of a concurrency batch, else one."""
    return max(1, point[6] or 1)


@dataclass
class RunSummary:
    """One run as ``bakeoff runs`` lists it."""

    run_id: str
    path: Path
    name: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    samples: int = 0
    errors: int = 0
    flagged: int = 0
    arms: list[str] = field(default_factory=list)
    failed_arms: list[str] = field(default_factory=list)
    indexed: bool = True  # False: read from samples.jsonl (no database yet)


class RunDB:
    """The SQLite index of one run directory.

    Every call opens its own short connection: a run writes one sample every few seconds at most, and
    nothing has to be closed on Ctrl-C.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / DB_NAME

    @property
    def exists(self) -> bool:
        return self.path.exists()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for writing: creates the file and the schema when they are missing."""
        if not self.path.exists():
            # Created owner-only; SQLite gives the -wal and -shm files the same mode.
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                conn.executescript(_SCHEMA)
                conn.execute(f"PRAGMA user_version={DB_SCHEMA_VERSION}")
            yield conn
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
        finally:
            conn.close()

    def _read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``query`` on a read-only connection that writes nothing into the run directory.

        In WAL mode even a read-only connection creates -wal and -shm files beside the database (and
        leaves them) when it may. A database no writer has open has no -wal file: its last writer
        checkpointed and removed it, so the file is complete and is read as immutable, which touches
        nothing. If a writer opened it meanwhile (a -wal file appeared, or the file changed), the read
        is done again through the WAL, like any reader of a running run.

        :raises StoreError: no database, or it cannot be read.
        """
        if not self.path.exists():
            raise StoreError(f"{self.path} does not exist")
        wal = self.path.with_name(self.path.name + "-wal")
        if not wal.exists():
            before = _file_state(self.path)
            try:
                result = self._query(query, immutable=True)
            except StoreError:
                if wal.exists() or _file_state(self.path) != before:
                    return self._query(query, immutable=False)
                raise
            if not wal.exists() and _file_state(self.path) == before:
                return result
        return self._query(query, immutable=False)

    def _query(self, query: Callable[[sqlite3.Connection], T], *, immutable: bool) -> T:
        uri = self.path.resolve().as_uri() + "?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=30)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        try:
            return query(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
        finally:
            conn.close()

    # -- writing ---------------------------------------------------------------------------
    def put_run(self, run_id: str, record: RunRecord, meta: dict[str, Any]) -> None:
        """Insert or replace the run's row: its name, times and tool version from the record, and ``meta``,
        the JSON written as run.json (its copy, read back when run.json is damaged)."""
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO runs (run_id, name, started_at, finished_at, tool_version, meta, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET name=excluded.name, "
                "started_at=excluded.started_at, finished_at=excluded.finished_at, "
                "tool_version=excluded.tool_version, meta=excluded.meta, updated_at=excluded.updated_at",
                (run_id, record.name, record.started_at, record.finished_at, record.tool.version,
                 json.dumps(meta, default=str), time.time()))

    def insert(self, sample: Sample, line: str, write_line: Callable[[], None] | None = None) -> None:
        """Index one sample; ``write_line`` (the samples.jsonl append) runs inside the transaction.

        :param line: the exact samples.jsonl line, whose hash identifies the sample.
        :raises DuplicateSampleError: the point already holds all its samples; nothing is written.
        """
        point = point_of(sample)
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                taken = self._count(conn, sample.run_id, point)
                if taken >= slots_of(point):
                    raise DuplicateSampleError(
                        f"arm {sample.arm!r} prompt {sample.prompt!r} mode {sample.mode!r} rep {sample.rep} "
                        f"pass {sample.pass_index} is already stored; refusing to count it twice")
                self._insert_row(conn, sample.run_id, sample, line, point, taken)
                if write_line is not None:
                    write_line()
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _count(conn: sqlite3.Connection, run_id: str, point: Point) -> int:
        row = conn.execute("SELECT count(*) FROM samples WHERE run_id=? AND point=?",
                           (run_id, json.dumps(point))).fetchone()
        return int(row[0])

    @staticmethod
    def _insert_row(conn: sqlite3.Connection, run_id: str, sample: Sample, line: str, point: Point,
                    slot: int) -> None:
        conn.execute(
            "INSERT INTO samples (run_id, point, slot, uid, arm, engine, prompt, mode, rep, pass_index, status, "
            "error, flags, completion_tokens, decode_tps, ttft_s, started_at, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, json.dumps(point), slot, uid_of(line), sample.arm, sample.engine, sample.prompt,
             sample.mode, sample.rep, sample.pass_index, sample.status, sample.error, json.dumps(sample.flags),
             sample.completion_tokens, sample.decode_tps, sample.ttft_s, sample.started_at, line.strip()))

    def reconcile(self, run_id: str, lines: Iterable[str]) -> int:
        """Index every samples.jsonl line the database lacks (a crash between append and commit).

        Lines are matched to rows by content, as a multiset: two streams of one batch can write equal
        lines. Unreadable lines (torn by a crash) and other runs' lines are skipped. Returns how many rows
        were added.
        """
        with self._connect() as conn:  # the writer's connection: it creates the schema of a new index
            indexed = Counter(row[0] for row in conn.execute("SELECT uid FROM samples WHERE run_id=?", (run_id,)))
        missing: list[tuple[str, Sample]] = []
        for line in lines:
            if not line.strip():
                continue
            if indexed[uid_of(line)] > 0:
                indexed[uid_of(line)] -= 1
                continue
            try:
                sample = parse_sample(line)
            except ValueError:
                continue
            if sample.run_id in ("", run_id):
                missing.append((line, sample))
        return self.add_lines(run_id, missing)

    def add_lines(self, run_id: str, lines: Iterable[tuple[str, Sample]]) -> int:
        """Index samples.jsonl lines the database lacks, each in its point's next free slot; a line whose
        point is already full would count a point twice and is not indexed. Returns how many were added."""
        lines = list(lines)
        if not lines:
            return 0
        added = 0
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for line, sample in lines:
                    point = point_of(sample)
                    taken = self._count(conn, run_id, point)
                    if taken >= slots_of(point):
                        continue
                    self._insert_row(conn, run_id, sample, line, point, taken)
                    added += 1
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return added

    # -- reading (nothing is written: see _read) -----------------------------------------------
    def points(self, run_id: str) -> list[Point]:
        """The point of every stored sample (one entry per sample)."""
        rows = self._read(lambda conn: conn.execute(
            "SELECT point FROM samples WHERE run_id=? ORDER BY id", (run_id,)).fetchall())
        return [tuple(json.loads(r[0])) for r in rows]

    def samples(self, run_id: str) -> list[Sample]:
        return [parse_sample(data) for _, _, data in self.rows(run_id)]

    def rows(self, run_id: str) -> list[tuple[str, str, str]]:
        """(uid, point, data) of every stored sample of the run, in the order they were stored."""
        rows = self._read(lambda conn: conn.execute(
            "SELECT uid, point, data FROM samples WHERE run_id=? ORDER BY id", (run_id,)).fetchall())
        return [(str(u), str(p), str(d)) for u, p, d in rows]

    def run_ids(self) -> list[str]:
        """Every run id the index holds (one, unless samples of another run were indexed here)."""
        def query(conn: sqlite3.Connection) -> set[str]:
            ids = {r[0] for r in conn.execute("SELECT run_id FROM runs")}
            return ids | {r[0] for r in conn.execute("SELECT DISTINCT run_id FROM samples")}
        return sorted(i for i in self._read(query) if i)

    def run_meta(self, run_id: str) -> dict[str, Any] | None:
        """The copy of run.json kept in the index (the run's own, or the only one there)."""
        rows = self._read(lambda conn: conn.execute("SELECT run_id, meta FROM runs").fetchall())
        chosen = [m for r, m in rows if r == run_id] or ([rows[0][1]] if len(rows) == 1 else [])
        if not chosen:
            return None
        try:
            meta = json.loads(chosen[0])
        except ValueError:
            return None
        return meta if isinstance(meta, dict) else None

    def summary(self, run_id: str, path: Path) -> RunSummary:
        """Counts for ``bakeoff runs``."""
        def query(conn: sqlite3.Connection) -> tuple[Any, Any]:
            run = conn.execute("SELECT name, started_at, finished_at, meta FROM runs WHERE run_id=?",
                               (run_id,)).fetchone()
            counts = conn.execute(
                "SELECT count(*), coalesce(sum(status='error'), 0), coalesce(sum(flags != '[]'), 0) "
                "FROM samples WHERE run_id=?", (run_id,)).fetchone()
            return run, counts
        run, counts = self._read(query)
        out = RunSummary(run_id=run_id, path=path, samples=counts[0], errors=counts[1], flagged=counts[2])
        if run is not None:
            out.name, out.started_at, out.finished_at = run[0], run[1], run[2]
            try:
                record = parse_run_record(json.loads(run[3]), f"{self.path} (copy of run.json)")
            except BakeoffError:  # written by a newer bakeoff: listed with its counts, arms unknown
                record = RunRecord()
            out.arms = record.arm_names
            out.failed_arms = failed_arms(arm_records_of(path, record))
        return out


def _file_state(path: Path) -> tuple[int, int, int] | None:
    """What changes when a writer checkpoints into the file or replaces it (None: it is gone)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def arm_records_of(run_dir: Path, record: RunRecord, warnings: list[str] | None = None
                   ) -> dict[str, list[ArmAttempt]]:
    """Per arm, its attempts: the append-only arm_records.jsonl, or run.json's copy in older runs.

    :param warnings: receives a line per record that does not read as an attempt (left out, never a crash).
    """
    file = run_dir / ARM_RECORDS
    if not file.exists():
        return record.arm_records
    out: dict[str, list[ArmAttempt]] = {}
    for item in read_json_lines(file)[0]:
        if not isinstance(item.get("record"), dict):
            continue
        arm = str(item.get("arm"))
        try:
            out.setdefault(arm, []).append(ArmAttempt.model_validate(item["record"]))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            if warnings is not None:
                warnings.append(f"arm {arm}: record {len(out[arm]) + 1} left out ({where}: {first['msg']})")
    return out


def uid_of(line: str) -> str:
    """Identity of a samples.jsonl line: the hash of its text."""
    return hashlib.sha256(line.strip().encode()).hexdigest()


__all__ += ["ARM_RECORDS", "arm_records_of"]
