"""Container plumbing every adapter shares, written once: model files mounted read-only, the engine's port
published on one host address, environment passed by name, GPUs reserved the same way.

An adapter says only what is its own (the image, the command, the port inside, how to probe health); these
build the rest for ``launch: docker`` (a ``docker run`` argv) and ``launch: compose`` (a compose service,
which core/engine/compose.py then checks and runs).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..config.schema import Arm

__all__ = ["GPU_RESERVATION", "ComposeImage", "ExitGuard", "Mounts", "compose_service_spec", "docker_run"]

# compose's way to give a service every NVIDIA GPU
GPU_RESERVATION: dict[str, Any] = {"resources": {"reservations": {"devices": [
    {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}}


class Mounts:
    """Host files a container reads, each bind-mounted read-only at its own path under ``root``."""

    def __init__(self, root: str = "/models") -> None:
        self.root = root
        self.paths: dict[str, str] = {}  # host path -> path in the container

    def place(self, host: str | Path) -> str:
        """The container path of ``host`` (mounted once, however often it is placed)."""
        source = Path(host).expanduser().resolve()
        return self.paths.setdefault(str(source), f"{self.root}/{len(self.paths)}/{source.name}")

    def inside(self, arg: str) -> str:
        """``arg`` with a placed host path replaced by its container path; any other argument as it is."""
        return self.paths.get(str(Path(arg).resolve()), arg) if arg.startswith("/") else arg

    def volumes(self) -> list[dict[str, Any]]:
        return [{"type": "bind", "source": host, "target": target, "read_only": True}
                for host, target in self.paths.items()]


def compose_service_spec(image: str, command: list[str], port: int, inner_port: int, health: list[str], *,
                    mounts: Mounts | None = None, env: Mapping[str, str] | None = None, gpus: bool = False,
                    **extra: Any) -> dict[str, Any]:
    """One compose service published on ``127.0.0.1:port``, with a healthcheck (boot time is measured to
    healthy), ``mounts`` read-only and, with ``gpus``, every GPU reserved; ``extra`` adds keys (``shm_size``)."""
    service: dict[str, Any] = {
        "image": image,
        "command": command,
        "ports": [{"target": inner_port, "published": str(port), "host_ip": "127.0.0.1", "protocol": "tcp"}],
        "volumes": mounts.volumes() if mounts else [],
        "environment": dict(env or {}),
        **extra,
        "healthcheck": {"test": health, "interval": "10s", "timeout": "5s", "retries": 3},
    }
    if gpus:
        service["deploy"] = GPU_RESERVATION
    return service


def docker_run(name: str, image: str, host: str, port: int, inner_port: int, *,
               volumes: Iterable[tuple[str, str, bool]] = (), env_names: Iterable[str] = (),
               flags: Iterable[str] = (), command: Iterable[str] = ()) -> list[str]:
    """``docker run --rm --name NAME`` publishing ``inner_port`` on ``host:port``, each volume
    ``(source, target, read_only)``, then ``flags``, the image and its ``command``. Environment variables go
    by name only: docker copies their values from its own environment (the launch spec's), so a value never
    reaches argv, argv.txt or ``ps``."""
    argv = ["docker", "run", "--rm", "--name", name, *flags, "-p", f"{host}:{port}:{inner_port}"]
    for source, target, read_only in volumes:
        argv += ["-v", f"{source}:{target}" + (":ro" if read_only else "")]
    for key in env_names:
        argv += ["-e", key]
    return [*argv, image, *command]


# The guard's whole program: wait for bakeoff's end of the pipe to close; unless bakeoff said "released" first,
# run the clean-up command.
_GUARD = ("import json, subprocess, sys\n"
          "if sys.stdin.buffer.read() != b'released\\n':\n"
          "    subprocess.run(json.loads(sys.argv[1]), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
          "                   stderr=subprocess.DEVNULL, timeout=300)\n")


class ExitGuard:
    """Runs ``argv`` (``compose down``, ``docker rm -f``) if bakeoff ends without :meth:`release`.

    A container is the Docker daemon's child, not bakeoff's: a parent-death signal cannot reach it, and a
    SIGKILLed bakeoff (or the OOM killer) runs no handler. The guard is a small process in its own session
    (Ctrl-C and a signal to bakeoff's group pass it by) reading a pipe that only bakeoff holds open: the
    kernel closes it however bakeoff ends, and the guard then cleans up unless bakeoff released it.

    :param env: the clean-up command's environment (compose reads the service's variables from it).
    """

    def __init__(self, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        self.argv = argv
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _GUARD, json.dumps(argv)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=dict(env) if env is not None else None, start_new_session=True)

    def release(self) -> None:
        """Bakeoff cleaned up itself: the guard exits without running anything. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.stdin is None:
            return
        with contextlib.suppress(OSError):  # a guard that is gone already has nothing left to do
            proc.stdin.write(b"released\n")
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@dataclass(frozen=True)
class ComposeImage:
    """How an engine runs under ``launch: compose``: a piece the adapter declares (``EngineAdapter.compose``), not a
    method. Core builds the service from the adapter's own ``launch_spec``, run for the inside of the container:
    models at their read-only mounts, :attr:`inner_port`, host ``0.0.0.0`` and :attr:`program` before the flags.

    :param image: the pinned image.
    :param inner_port: the port the engine listens on inside.
    :param health: the healthcheck test; it must pass only once the model is loaded.
    :param program: what starts the engine inside the image ahead of the flags (empty: the image's entrypoint).
    :param gpus: ``always`` reserves every GPU; ``with_gpu_layers`` only for an arm whose settings.gpu_layers is
        set and not 0, which then runs :attr:`gpu_image`.
    :param extra: further service keys (``shm_size``).
    """

    image: str
    inner_port: int
    health: tuple[str, ...]
    program: tuple[str, ...] = ()
    gpus: Literal["always", "with_gpu_layers"] = "always"
    gpu_image: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def uses_gpus(self, arm: Arm) -> bool:
        return self.gpus == "always" or arm.settings.gpu_layers not in (None, 0)

    def image_of(self, arm: Arm) -> str:
        """The image an arm runs (an engine whose options pick the image overrides this)."""
        return self.gpu_image if self.gpu_image and self.uses_gpus(arm) else self.image

    def hub_cache(self, arm: Arm) -> str | None:
        """Where a model given as a hub id is read from (mounted read-only, the engine offline); None: a hub id
        is passed as it is and the engine downloads it."""
        return None
