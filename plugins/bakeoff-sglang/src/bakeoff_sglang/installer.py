"""Where SGLang is: a python with the ``sglang`` package (installed by hand, in a GPU environment)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from bakeoff.core import Installer, Program

if TYPE_CHECKING:
    from .options import SglangOptions

__all__ = ["SglangInstaller"]


class SglangInstaller(Installer["SglangOptions"]):
    engine = "sglang"

    def hint(self) -> str:
        return ("install SGLang in a GPU environment (`pip install sglang`) and point options.python or "
                "$BAKEOFF_SGLANG_PYTHON at it, or use launch: compose")

    def python(self, options: SglangOptions) -> str:
        return options.python or os.environ.get("BAKEOFF_SGLANG_PYTHON") or sys.executable

    def locate(self, options: SglangOptions) -> Program:
        """``python -m sglang.launch_server`` (whether that python has sglang, preflight checks)."""
        return Program((self.python(options), "-m", "sglang.launch_server"))
