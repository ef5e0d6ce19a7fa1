"""Where TabbyAPI is on this machine: a checkout (its main.py) and the python that runs it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import EngineUnavailable, Installer, Program

from .options import DOCKER_IMAGE

if TYPE_CHECKING:
    from .options import ExllamaOptions

__all__ = ["DOCKER_IMAGE", "TabbyInstaller"]



class TabbyInstaller(Installer["ExllamaOptions"]):
    """TabbyAPI is set up by hand (a GPU machine's torch and exllamav3); bakeoff only finds it."""

    engine = "exllama"

    def hint(self) -> str:
        return ("Clone TabbyAPI, install its requirements with torch and exllamav3 into a Python, and set "
                "options.tabby_dir / options.python (or $BAKEOFF_TABBY_DIR / $BAKEOFF_TABBY_PYTHON); or use "
                f"launch: docker with {DOCKER_IMAGE}. See docs/exllama-h200.md.")

    def locate(self, options: ExllamaOptions) -> Program:
        """``[python, <checkout>/main.py]``: options first, then $BAKEOFF_TABBY_DIR / $BAKEOFF_TABBY_PYTHON."""
        where = options.tabby_dir or os.environ.get("BAKEOFF_TABBY_DIR")
        if not where:
            raise EngineUnavailable(f"exllama: no TabbyAPI checkout configured. {self.hint()}")
        main = Path(where).expanduser() / "main.py"
        if not main.is_file():
            raise EngineUnavailable(f"exllama: {main} does not exist. {self.hint()}")
        python = options.python or os.environ.get("BAKEOFF_TABBY_PYTHON") or sys.executable
        return Program((python, str(main)), found_in="options.tabby_dir" if options.tabby_dir else "$BAKEOFF_TABBY_DIR")
