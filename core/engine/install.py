"""Where an engine is on this machine, and how it gets there: the optional installer piece of an adapter.

An adapter that runs a program of its own (llama-server, a vLLM venv's python) declares an :class:`Installer`
(``EngineAdapter.installer``). Core asks it, once and before launch, for the engine's :class:`Program`, and
hands that to ``launch_spec`` (which only translates); ``bakeoff engines`` lists what it finds and
``bakeoff engines install`` goes through :meth:`Installer.install`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic

from pydantic import BaseModel
from typing_extensions import TypeVar

from ..common.errors import CapabilityNotSupported, EngineUnavailable

__all__ = ["Installer", "Program"]

# Invariant: an installer reads its own engine's options (llama.cpp's binary, vLLM's python).
InstallOptionsT = TypeVar("InstallOptionsT", bound=BaseModel, default=BaseModel)


@dataclass(frozen=True)
class Program:
    """The engine's own program, found before launch.

    :param argv: what starts it (``[llama-server]``, ``[python, -m, module]``, ``[python, main.py]``).
    :param env: what it needs in its environment (a cached build's shared libraries on LD_LIBRARY_PATH).
    :param found_in: where it was found, for errors and the run record ("arm option", "PATH", "cache").
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    found_in: str = ""


class Installer(Generic[InstallOptionsT]):
    """How one engine is found on this machine and installed into bakeoff's cache.

    Subclasses name the adapter's options model as the type parameter and override :meth:`locate`; an
    engine bakeoff can build or set up overrides :meth:`install` (and :attr:`backends` when it builds for
    more than one).
    """

    engine: str = "?"
    backends: tuple[str, ...] = ()  # ``bakeoff engines install --backend``: the builds it can make

    def hint(self) -> str:
        """One sentence saying how to install the engine (ends errors about a missing engine)."""
        return f"see `bakeoff engines` for how to install {self.engine}"

    def locate(self, options: InstallOptionsT) -> Program:
        """The program a native launch with these options runs. Looks only: nothing is built or downloaded.

        :raises EngineUnavailable: it is nowhere to be found (the message says where it looked).
        """
        raise EngineUnavailable(f"{self.engine} is not installed. {self.hint()}")

    def installed(self) -> str | None:
        """A line saying which program a run with default options would use (``bakeoff engines``); None: none."""
        return None

    def install(self, log: Callable[[str], None], backend: str | None = None) -> str:
        """Install or build the engine into bakeoff's cache; returns where it is.

        :param backend: one of :attr:`backends` (None: the installer picks).
        :raises CapabilityNotSupported: this engine has no installer.
        """
        raise CapabilityNotSupported(f"{self.engine} has no installer; {self.hint()}")
