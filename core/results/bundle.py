"""A run as one file to share: ``bakeoff bundle RUN`` packs it, ``bakeoff verify BUNDLE`` checks it.

A bundle is a gzip tar holding ``manifest.json`` and the run directory under ``run/``. The manifest lists
every file of ``run/`` with its SHA-256 and size, and carries what a reader of someone else's numbers needs
before the numbers: each arm's configuration fingerprint (core/config/fingerprint.py), the engine build each
arm ran (version, binary and build flags as the arm records say), and the rig report of the machine that ran
it (core/host/rig.py; recorded in run.json when the run started).

Left out: the SQLite index (a copy of samples.jsonl, rebuilt by any reader) and anything that is not a
regular file. Secrets stay out as everywhere: every text file is passed through the masking bakeoff applies
when it writes (core/common/redact.py), with the keys named by ``api_key_env`` read from this environment, and
a file that changed on the way is named in ``manifest.masked``. Home directories are written as ``~``
(:func:`home_relative`: this user's, and any ``/home/NAME``, ``/Users/NAME`` or ``/root``), so a bundle does not
say whose account ran it, or where on that machine its engines and models live beyond the home.

:func:`verify_bundle` checks that the archive holds only ``manifest.json`` and ``run/`` files, every listed
file with its hash and size and no other, that run.json reads and names the manifest's run, that every sample
is this run's, that the fingerprints and builds are those of run.json and the arm records, and that no text
file holds something shaped like a credential. It reads the archive in chunks and refuses, unread, a member
past MAX_MEMBER_BYTES and an archive that unpacks past its bound, so a small bomb costs neither the memory
nor the minutes of what it unpacks to. A manifest can be rewritten along with the files it lists,
so the bundle's own SHA-256, which both commands print, is what to publish beside it to pin it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..common.errors import BakeoffError, BundleError
from ..common.redact import Redactor, credential_shapes
from ..config.fingerprint import ArmFingerprint
from ..host.hostinfo import host_id
from ..host.rig import rig_report
from .db import ARM_RECORDS, DB_NAME
from .record import ArmAttempt, RunRecord, parse_run_record
from .sample_lines import parse_sample
from .store import RunDir

__all__ = ["BUNDLE_SCHEMA", "MANIFEST", "BundleManifest", "FileEntry", "Verified", "arm_builds", "bundle_run",
           "extract_bundle", "home_relative", "verify_bundle"]

BUNDLE_SCHEMA = 1
MANIFEST = "manifest.json"
RUN_DIR = "run"
_SKIP_SUFFIXES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal", ".tmp")


class FileEntry(BaseModel):
    sha256: str
    bytes: int


class BundleManifest(BaseModel):
    """``manifest.json``: what the bundle holds and what a reader must know before its numbers."""

    schema_version: int = BUNDLE_SCHEMA
    kind: Literal["bakeoff-bundle"] = "bakeoff-bundle"
    tool: dict[str, Any] = Field(default_factory=dict, description="The bakeoff that made the bundle.")
    created_at: float = Field(description="time.time() when the bundle was made.")
    run_id: str
    name: str | None = None
    samples: int = Field(description="Lines of run/samples.jsonl.")
    files: dict[str, FileEntry] = Field(description="Every file under run/, by its path there.")
    fingerprints: dict[str, ArmFingerprint] = Field(default_factory=dict, description="Per arm, from run.json.")
    engines: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per arm: engine, the versions "
                                               "its starts reported, and the binary record (path, backend, flags).")
    rig: dict[str, Any] = Field(default_factory=dict, description="The rig report of the machine that ran it.")
    rig_source: str = Field("", description="Where the rig report comes from (run.json, or when it was taken).")
    masked: list[str] = Field(default_factory=list, description="Files in which secrets were masked on packing.")
    left_out: list[str] = Field(default_factory=list, description="Files of the run directory not in the bundle, "
                                "with why.")


@dataclass
class Verified:
    """What :func:`verify_bundle` found."""

    path: Path
    sha256: str
    manifest: BundleManifest | None = None
    problems: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # run/ path -> content

    @property
    def ok(self) -> bool:
        return not self.problems


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tool() -> dict[str, Any]:
    try:
        return {"name": "bakeoff", "version": version("bakeoff")}
    except PackageNotFoundError:
        return {"name": "bakeoff"}


def arm_builds(record: RunRecord, attempts: dict[str, list[ArmAttempt]]) -> dict[str, dict[str, Any]]:
    """Per arm: engine, the versions its starts reported (oldest first), the last binary record, and the build
    options it was configured with (those the adapter declared in ``capabilities.build_options``)."""
    out: dict[str, dict[str, Any]] = {}
    arms = {a.name: a for a in record.config.arms} if record.config else {}
    for name in list(arms) + sorted(set(attempts) - set(arms)):
        mine = attempts.get(name, [])
        engine = record.engines.get(name)
        entry: dict[str, Any] = {"engine": engine.engine if engine else (arms[name].engine if name in arms else None),
                                 "versions": list(dict.fromkeys(a.version for a in mine if a.version))}
        binary = next((a.effective["binary"] for a in reversed(mine) if isinstance(a.effective.get("binary"), dict)),
                      None)
        if binary:
            entry["binary"] = binary
        declared = (engine.capabilities.get("build_options") if engine else None) or []
        if name in arms:
            chosen = {k: v for k, v in arms[name].options.items() if k in declared and v is not None}
            if chosen:
                entry["build_options"] = chosen
        out[name] = entry
    return out


def _attempts(files: dict[str, bytes], record: RunRecord) -> dict[str, list[ArmAttempt]]:
    """The arm records of a run's files (arm_records.jsonl, or run.json's copy in older runs), typed; a damaged
    record says nothing about the build and is skipped."""
    raw: list[tuple[str, Any]] = []
    if ARM_RECORDS in files:
        for line in files[ARM_RECORDS].split(b"\n"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("record"), dict):
                raw.append((str(item.get("arm")), item["record"]))
    else:
        raw = [(arm, a.model_dump(by_alias=True)) for arm, got in record.arm_records.items() for a in got]
    out: dict[str, list[ArmAttempt]] = {}
    for arm, r in raw:
        try:
            out.setdefault(arm, []).append(ArmAttempt.model_validate(r))
        except ValidationError:
            continue
    return out


def _rig(record: RunRecord) -> tuple[dict[str, Any], str]:
    recorded = record.host.get("rig")
    if isinstance(recorded, dict):
        return recorded, "run.json (taken when the run started)"
    here = host_id()
    if record.host.get("host_id") and record.host.get("host_id") == here:
        return rig_report(), (f"taken when bundled, on the machine that ran it (host_id {here}); the run "
                              "recorded none (made before rig reports)")
    why = "not recorded by the bakeoff that made this run (before rig reports)"
    gpus = [{k: g.get(k) for k in ("index", "name", "driver", "power_limit_w", "power_limit_default_w", "pcie_gen",
                                    "pcie_width") if g.get(k) is not None} for g in record.gpus]
    return {"schema": 1, "gpus": gpus, "cpu": {"model": record.host.get("cpu_model"),
                                               "logical_cores": record.host.get("cpu_count")},
            "memory": {"total_gib": record.host.get("mem_total_gib")},
            "absent": {"cpu.freq_max_mhz": why, "cpu.governor": why, "memory.swap_gib": why,
                       **({} if gpus else {"gpus": why + "; run.json lists no GPU"})}}, \
        "run.json's host and gpus (the run recorded no rig report, and it was made on another machine)"


def _is_text(data: bytes) -> bool:
    if b"\0" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# a home directory as a path segment: not inside a longer name, not a later segment of another path
_HOMES = re.compile(r"(?<![\w.~/-])(?:/home/[^/\s\"':]+|/Users/[^/\s\"':]+|/root)(?![\w.-])")


def home_relative(text: str) -> str:
    """``text`` with home-directory paths written from ``~``: this user's home, whatever it is, and the usual
    homes of any machine (``/home/NAME``, ``/Users/NAME``, ``/root``), as a bundle from elsewhere holds them."""
    home = str(Path.home())
    if home.strip("/"):
        text = re.sub(r"(?<![\w.~/-])" + re.escape(home) + r"(?![\w.-])", "~", text)
    return _HOMES.sub("~", text)


def _masked(data: bytes, redactor: Redactor) -> bytes:
    if not _is_text(data):
        return data
    return home_relative(redactor.text(data.decode("utf-8"))).encode("utf-8")


def bundle_run(run_path: Path, target: Path) -> tuple[Path, str, BundleManifest]:
    """Pack ``run_path`` into the bundle ``target``; returns its path, its SHA-256 and the manifest.

    :raises BundleError: not a run directory, or a bundle cannot be written there.
    """
    if not (run_path / "samples.jsonl").is_file() or not (run_path / "run.json").is_file():
        raise BundleError(f"{run_path} is not a bakeoff run directory (it needs run.json and samples.jsonl)")
    run = RunDir.open(run_path)
    try:
        record = run.read_record()
    except BakeoffError as exc:
        raise BundleError(f"{run_path}: {exc}") from exc
    redactor = Redactor.for_config(record.to_json().get("config") or {})
    files: dict[str, bytes] = {}
    left_out: list[str] = []
    masked: list[str] = []
    for path in sorted(run_path.rglob("*")):
        rel = path.relative_to(run_path).as_posix()
        if path.is_symlink() or (not path.is_file() and not path.is_dir()):
            left_out.append(f"{rel}: not a regular file")
            continue
        if path.is_dir():
            continue
        if rel.endswith(_SKIP_SUFFIXES):
            if not rel.endswith(".tmp"):
                left_out.append(f"{rel}: the SQLite index, a copy of samples.jsonl that any reader rebuilds")
            continue
        data = path.read_bytes()
        clean = _masked(data, redactor)
        if clean != data:
            masked.append(rel)
        files[rel] = clean
    samples = [line for line in files["samples.jsonl"].split(b"\n") if line.strip()]
    record = parse_run_record(json.loads(files["run.json"]), str(run.run_json))  # as packed: secrets masked
    manifest = BundleManifest(
        tool=_tool(), created_at=time.time(), run_id=run.run_id, name=record.name, samples=len(samples),
        files={rel: FileEntry(sha256=_sha256(data), bytes=len(data)) for rel, data in files.items()},
        fingerprints=record.fingerprints, engines=arm_builds(record, _attempts(files, record)),
        masked=masked, left_out=left_out)
    manifest.rig, manifest.rig_source = _rig(record)
    payload = manifest.model_dump_json(indent=2).encode() + b"\n"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        with tmp.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            _add(tar, MANIFEST, payload, manifest.created_at)
            for rel, data in files.items():
                _add(tar, f"{RUN_DIR}/{rel}", data, (run_path / rel).stat().st_mtime)
        tmp.replace(target)
    except OSError as exc:
        raise BundleError(f"cannot write the bundle {target}: {exc.strerror or exc}") from exc
    return target, _file_sha256(target), manifest


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o600
    info.uid = info.gid = 0
    info.uname = info.gname = ""  # whose account packed it is nobody's business
    tar.addfile(info, io.BytesIO(data))


# What verify holds in memory (FAULTS-3 N25: a 1 MB bundle can unpack to a 1 GiB member of zeros). A run's
# largest file, samples.jsonl, is some kilobytes a request; bakeoff bundle itself holds the whole run in memory.
MAX_MEMBER_BYTES = 256 << 20
MAX_RUN_BYTES = 1 << 30
MAX_MEMBERS = 10_000
# the tar stream: the members verify reads, and their headers and padding (about 2 KiB each at most)
MAX_ARCHIVE_BYTES = MAX_RUN_BYTES + MAX_MEMBERS * 2048
_CHUNK = 1 << 20


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def _file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _gzip_problem(bundle: Path) -> str | None:
    """Why the gzip stream does not read to its end and CRC, chunk by chunk (tarfile stops at the first
    end-of-archive block, so a cut-off tail would otherwise pass unseen), or unpacks to more than verify
    reads (a bomb is refused at the bound, not unpacked for minutes); None when it reads."""
    unpacked = 0
    try:
        with gzip.open(bundle) as whole:
            while chunk := whole.read(_CHUNK):
                unpacked += len(chunk)
                if unpacked > MAX_ARCHIVE_BYTES:
                    return (f"unpacks to more than {_size(MAX_ARCHIVE_BYTES)}, more than verify reads (a run's "
                            f"files up to {_size(MAX_RUN_BYTES)}): not a run bakeoff bundled")
    except (EOFError, OSError, zlib.error) as exc:
        return f"not a readable bundle (a gzip tar archive): truncated or corrupt: {exc}"
    return None


def _too_big(name: str, size: int, kept: int) -> str | None:
    """Why a member is not read: over the bound for one file, or for the whole run; None to read it."""
    if size > MAX_MEMBER_BYTES:
        return f"{name}: {size} bytes, more than verify reads for one file ({_size(MAX_MEMBER_BYTES)})"
    if kept + size > MAX_RUN_BYTES:
        return f"{name}: the run's files pass {_size(MAX_RUN_BYTES)} with it, more than verify reads"
    return None


def _members(bundle: Path, out: Verified) -> tuple[bytes | None, dict[str, bytes]]:
    """The manifest's bytes and every run/ file, read from the archive; bad members become problems, and
    members past the size bounds are refused by their header, unread."""
    manifest: bytes | None = None
    files: dict[str, bytes] = {}
    kept = 0
    try:
        with tarfile.open(bundle, mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                name = member.name
                parts = PurePosixPath(name).parts
                if count > MAX_MEMBERS:
                    out.problems.append(f"more than {MAX_MEMBERS} members: not a run bakeoff bundled")
                    break
                if name.startswith("/") or ".." in parts or not parts:
                    out.problems.append(f"{name}: a path outside the bundle")
                    continue
                if member.isdir():
                    continue
                if not member.isfile():
                    out.problems.append(f"{name}: not a regular file (links and devices are refused)")
                    continue
                if why := _too_big(name, member.size, kept):
                    out.problems.append(why)
                    continue
                handle = tar.extractfile(member)
                data = handle.read() if handle is not None else b""
                kept += len(data)
                if name == MANIFEST:
                    manifest = data
                elif parts[0] == RUN_DIR and len(parts) > 1:
                    rel = "/".join(parts[1:])
                    if rel in files:
                        out.problems.append(f"run/{rel}: in the archive twice")
                    files[rel] = data
                else:
                    out.problems.append(f"{name}: neither manifest.json nor a file of run/")
    except (tarfile.TarError, OSError, EOFError, gzip.BadGzipFile) as exc:
        out.problems.append(f"not a readable bundle (a gzip tar archive): {exc}")
    return manifest, files


def verify_bundle(bundle: Path) -> Verified:
    """Check a bundle (see the module docstring); never raises for a bad bundle, it lists the problems.
    Reads in chunks and holds at most MAX_RUN_BYTES of members, whatever the archive unpacks to.

    :raises BundleError: the file cannot be read at all.
    """
    try:
        out = Verified(bundle, _file_sha256(bundle))
    except OSError as exc:
        raise BundleError(f"cannot read {bundle}: {exc.strerror or exc}") from exc
    if problem := _gzip_problem(bundle):
        out.problems.append(problem)
        return out
    try:
        manifest_bytes, files = _members(bundle, out)
    except MemoryError:  # the bounds keep this machine's memory for what they allow, but a smaller one runs out
        out.problems.append(f"ran out of memory reading the bundle's members (verify holds up to "
                            f"{_size(MAX_RUN_BYTES)} of them)")
        return out
    out.files = files
    if manifest_bytes is None:
        out.problems.append("no manifest.json")
        return out
    try:
        data = json.loads(manifest_bytes)
        if isinstance(data, dict) and isinstance(data.get("schema_version"), int) and \
                data["schema_version"] > BUNDLE_SCHEMA:
            out.problems.append(f"manifest.json: schema_version {data['schema_version']}, this bakeoff reads "
                                f"bundles up to {BUNDLE_SCHEMA}; upgrade bakeoff")
            return out
        manifest = BundleManifest.model_validate(data)
    except (ValueError, ValidationError) as exc:
        out.problems.append(f"manifest.json does not read as a bundle manifest: {str(exc).splitlines()[0]}")
        return out
    out.manifest = manifest
    for rel, entry in manifest.files.items():
        data = files.get(rel)
        if data is None:
            out.problems.append(f"run/{rel}: listed in the manifest, missing from the bundle")
        elif len(data) != entry.bytes or _sha256(data) != entry.sha256:
            out.problems.append(f"run/{rel}: changed since the bundle was made (sha256 {_sha256(data)[:16]}…, "
                                f"the manifest says {entry.sha256[:16]}…)")
    out.problems += [f"run/{rel}: in the bundle but not in the manifest" for rel in sorted(set(files) -
                                                                                           set(manifest.files))]
    try:
        _check_run(files, manifest, out.problems)
    except MemoryError:
        out.problems.append("ran out of memory checking run.json, the samples and the texts of run/")
    return out


def _check_run(files: dict[str, bytes], manifest: BundleManifest, problems: list[str]) -> None:
    """run.json, the samples, fingerprints, builds and secrets agree with the manifest."""
    if "run.json" not in files or "samples.jsonl" not in files:
        problems.append("run/ lacks run.json or samples.jsonl: not a run directory")
        return
    try:
        record = parse_run_record(json.loads(files["run.json"]), "run/run.json")
    except (ValueError, BakeoffError) as exc:
        problems.append(f"run/run.json does not read: {exc}")
        return
    if record.run_id != manifest.run_id:
        problems.append(f"run/run.json names run {record.run_id!r}, the manifest {manifest.run_id!r}")
    lines = [line for line in files["samples.jsonl"].split(b"\n") if line.strip()]
    if len(lines) != manifest.samples:
        problems.append(f"run/samples.jsonl has {len(lines)} lines, the manifest says {manifest.samples}")
    for number, line in enumerate(lines, start=1):
        try:
            sample = parse_sample(line.decode("utf-8"))
        except (ValueError, BakeoffError) as exc:
            problems.append(f"run/samples.jsonl line {number} does not read as a sample: {str(exc).splitlines()[0]}")
            break
        if sample.run_id and sample.run_id != manifest.run_id:
            problems.append(f"run/samples.jsonl line {number} is a sample of run {sample.run_id!r}")
            break
    recorded = {arm: fp.model_dump() for arm, fp in record.fingerprints.items()}
    if recorded != {arm: fp.model_dump() for arm, fp in manifest.fingerprints.items()}:
        problems.append("the manifest's fingerprints are not those of run/run.json")
    if arm_builds(record, _attempts(files, record)) != manifest.engines:
        problems.append("the manifest's engine builds are not those of run/run.json and the arm records")
    for rel, data in sorted(files.items()):
        if _is_text(data) and (shapes := credential_shapes(data.decode("utf-8"))):
            problems.append(f"run/{rel}: holds text shaped like a credential ({'; '.join(shapes)}): `bakeoff "
                            "bundle` masks these, so something else made or changed this file")


def extract_bundle(verified: Verified, dest: Path) -> Path:
    """Write a verified bundle's run directory into ``dest`` (created, owner-only); returns it.

    :raises BundleError: the bundle did not verify.
    """
    if not verified.ok:
        raise BundleError(f"{verified.path} does not verify: {verified.problems[0]}")
    run = RunDir(dest)  # creates it owner-only
    for rel, data in verified.files.items():
        target = run.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return run.path
