"""Build ik_llama.cpp's ``llama-server`` from the PyPI sdist ``ik-llama-cpp-python`` (its full tree in
``vendor/ik_llama.cpp``), through bakeoff's public sdist builder: one target, cached by version and backend.

CPU flags: ``GGML_NATIVE`` (ik's default) compiles its IQK kernels for this CPU; the AMX flags are switched off
as for llama.cpp (a VM may not grant the AMX tile state). ``GGML_IQK_FA_ALL_QUANTS`` is off: it instantiates
the CPU flash-attention kernels for every quantized KV type, a large share of the compile time, while f16,
bf16 and q8_0 KV caches keep their fast kernels.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import (
    NO_AMX_FLAGS,
    EngineUnavailable,
    Installer,
    Program,
    SdistBuild,
    build_from_sdist,
    cached_binary,
)

if TYPE_CHECKING:
    from .options import IkLlamaOptions

__all__ = ["DEFAULT_VERSION", "BACKENDS", "IkLlamaInstaller", "ik_llama_server_build"]

DEFAULT_VERSION = "0.1.5"
BACKENDS = ("cpu",)  # CUDA: add its flags here once bakeoff has a backend option to pick it

COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=ON",  # the server is an example in this tree; only its target is built
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_SERVER_SSL=OFF",
    "-DGGML_IQK_FA_ALL_QUANTS=OFF",
    # One self-contained binary: this tree puts its shared libraries (libllama, libggml, libmtmd) next to
    # their sources, not next to llama-server, so a shared build would not run from the cache.
    "-DBUILD_SHARED_LIBS=OFF",
)
# The sdist leaves out common/cmake/build-info-gen-cpp.cmake, which the build of common/build-info.cpp runs;
# this stand-in fills the template with the sdist's version (the tree has no git data to take it from).
BUILD_INFO_SCRIPT = """# written by bakeoff: the ik-llama-cpp-python sdist lacks this script
set(BUILD_NUMBER 0)
set(BUILD_COMMIT "ik-llama-cpp-python-{version}")
set(BUILD_COMPILER "${{CMAKE_C_COMPILER_ID}} ${{CMAKE_C_COMPILER_VERSION}}")
set(BUILD_TARGET "")
configure_file("${{CMAKE_CURRENT_LIST_DIR}}/../build-info.cpp.in" "${{CMAKE_CURRENT_LIST_DIR}}/../build-info.cpp")
"""
BACKEND_FLAGS = {
    "cpu": ("-DGGML_NATIVE=ON", *NO_AMX_FLAGS),
}


def ik_llama_server_build(version: str = DEFAULT_VERSION, backend: str = "cpu") -> SdistBuild:
    """The build of ik_llama.cpp's ``llama-server`` from ``ik-llama-cpp-python==version`` for ``backend``."""
    return SdistBuild(project="ik-llama-cpp-python", version=version,
                      source="ik_llama_cpp_python-*/vendor/ik_llama.cpp", target="llama-server",
                      cache_name="ik-llama-server", backend=backend,
                      cmake_flags=(*COMMON_FLAGS, *BACKEND_FLAGS[backend]),
                      extra_files=(("common/cmake/build-info-gen-cpp.cmake",
                                    BUILD_INFO_SCRIPT.format(version=version)),))


class IkLlamaInstaller(Installer["IkLlamaOptions"]):
    """ik_llama.cpp's llama-server: found through options, $BAKEOFF_IK_LLAMA_SERVER or bakeoff's cache; built
    from the PyPI sdist into that cache."""

    engine = "ikllama"

    def hint(self) -> str:
        return "Build it with `bakeoff engines install ikllama` (CPU, from the PyPI sdist ik-llama-cpp-python)."

    def locate(self, options: IkLlamaOptions) -> Program:
        binary = self.binary(options.binary, options.build_version)
        env = {}
        if any(binary.parent.glob("libllama.so*")):  # a shared build keeps its libraries beside the binary
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(binary.parent),
                                                                   os.environ.get("LD_LIBRARY_PATH")]))
        return Program((str(binary),), env=env)

    def binary(self, binary: str | None = None, build_version: str | None = None) -> Path:
        if binary:
            return Path(binary).expanduser()
        if env := os.environ.get("BAKEOFF_IK_LLAMA_SERVER"):
            return Path(env)
        cached = cached_binary(ik_llama_server_build(build_version or DEFAULT_VERSION))
        if cached:
            return cached
        raise EngineUnavailable(f"ik_llama.cpp's llama-server not found (options.binary, $BAKEOFF_IK_LLAMA_SERVER, "
                                f"bakeoff's cache). {self.hint()}")

    def installed(self) -> str | None:
        try:
            return f"cpu llama-server: {self.binary()}"
        except EngineUnavailable:
            return None

    def install(self, log: Callable[[str], None], backend: str | None = None) -> str:
        return str(build_from_sdist(ik_llama_server_build(), log=log))
