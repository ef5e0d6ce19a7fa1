"""Where llama-server is on this machine, and building it into bakeoff's cache (``bakeoff engines install``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.core import EngineUnavailable, Installer, Program

if TYPE_CHECKING:
    from .options import LlamaCppOptions

__all__ = ["LlamaCppInstaller", "library_env"]


def library_env(binary: Path) -> dict[str, str]:
    """LD_LIBRARY_PATH for a build that keeps its shared libraries beside the binary (bakeoff's cache)."""
    if not any(binary.parent.glob("libllama.so*")):
        return {}
    return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(binary.parent), os.environ.get("LD_LIBRARY_PATH")]))}


class LlamaCppInstaller(Installer["LlamaCppOptions"]):
    engine = "llamacpp"
    backends = ("auto", "cpu", "cuda")

    def hint(self) -> str:
        return ("Build it with `bakeoff engines install llamacpp` (CPU: about 13 minutes on 2 cores; "
                "`--backend cuda` where nvcc and a GPU are present).")

    def locate(self, options: LlamaCppOptions) -> Program:
        binary, source = self.binary_choice(options.binary, options.build_version)
        return Program((str(binary),), env=library_env(binary), found_in=source)

    def binary_choice(self, binary: str | None = None, build_version: str | None = None) -> tuple[Path, str]:
        """The llama-server to run and where it was found, in this order: the arm's ``options.binary``
        (or ``options.build_version`` of bakeoff's cache), ``$BAKEOFF_LLAMA_SERVER``, ``llama-server`` on
        PATH, bakeoff's cache (a CUDA build for this machine's GPUs before the CPU build)."""
        from .build import DEFAULT_VERSION, cached_binary

        if binary:
            return Path(binary).expanduser(), "arm option"
        if build_version:
            pinned = cached_binary(build_version)
            if pinned is None:
                raise EngineUnavailable(f"options.build_version {build_version!r}: no such build in "
                                        f"bakeoff's cache. {self.hint()}")
            return pinned, "cache (options.build_version)"
        if env := os.environ.get("BAKEOFF_LLAMA_SERVER"):
            return Path(env), "$BAKEOFF_LLAMA_SERVER"
        if on_path := shutil.which("llama-server"):
            return Path(on_path), "PATH"
        if cached := cached_binary(DEFAULT_VERSION):
            return cached, "cache"
        raise EngineUnavailable("llama-server not found (options.binary, $BAKEOFF_LLAMA_SERVER, PATH, bakeoff's "
                                f"cache). {self.hint()}")

    def binary_record(self, binary: str | None = None, build_version: str | None = None) -> dict[str, Any]:
        """What run.json says about the binary: path, where it was found, backend and build flags."""
        from .build import build_info

        path, source = self.binary_choice(binary, build_version)
        return {"path": str(path), "found_in": source, **build_info(path)}

    def installed(self) -> str | None:
        try:
            record = self.binary_record()
        except EngineUnavailable:
            return None
        arch = f" sm_{record['cuda_architectures']}" if record.get("cuda_architectures") else ""
        return f"{record['backend']}{arch} llama-server from {record['found_in']}: {record['path']}"

    def install(self, log: Callable[[str], None], backend: str | None = None) -> str:
        from .build import build_llama_server

        return str(build_llama_server(log=log, backend=backend or "auto"))
