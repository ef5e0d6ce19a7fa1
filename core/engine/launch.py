"""What core does with the adapter contract to launch an arm: find what the launch needs, build its command or
compose service, and say whether two arms launch the same thing.

The contract itself (what a plugin implements) is core/engine/contract.py; these functions call it and are
never overridden.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..common.errors import CapabilityNotSupported, PreflightError
from ..config.schema import Arm, Workload
from .container import Mounts, compose_service_spec
from .contract import EngineAdapter, LaunchInputs, LaunchSpec
from .install import Program

__all__ = [
    "PLAN_PORT",
    "PLAN_WORKDIR",
    "build_launch",
    "check_program",
    "compose_service",
    "install_hint",
    "launch_identity",
    "resolve_launch",
]


PLAN_PORT = 18000
PLAN_WORKDIR = Path("/nonexistent/bakeoff-plan")


def launch_identity(adapter: EngineAdapter, arm: Arm, workload: Workload) -> str:
    """What an arm would launch and send, independent of its name and port, as one comparable string.

    The adapter's launch spec (or compose service) and request fields for a copy of the arm renamed to a
    fixed name; the adapter keeps no state, so it is used as it is. Calling it before launch also proves the
    adapter can build the launch: any ConfigError it raises surfaces at plan time. Attached arms launch nothing
    and fingerprint only their requests.
    """
    plain = arm.model_copy(update={"name": "arm"})
    port = arm.settings.port or PLAN_PORT
    launch: Any
    if arm.attached:
        launch = {"url": arm.url}
    elif arm.launch == "compose":
        launch = compose_service(adapter, plain, resolve_launch(adapter, plain, port, PLAN_WORKDIR))
    else:
        spec = build_launch(adapter, plain, port, PLAN_WORKDIR)
        launch = {"argv": spec.argv, "env": spec.env, "cwd": str(spec.cwd), "files": spec.files,
                  "ready": spec.ready_path}
    request: dict[str, Any] = {
        "stream_options": adapter.reader.stream_options(adapter.capabilities.token_counts),
        "fields": adapter.request_fields(plain, workload), "workload": workload.model_dump(mode="json")}
    if every := adapter.witness.every(plain):  # one request in so many asks more of the engine
        request["witness"] = {"every": every, "fields": adapter.witness.fields(plain)}
    return json.dumps({"launch": launch, "request": request}, sort_keys=True, default=str)


def install_hint(adapter: EngineAdapter) -> str:
    """How to install the adapter's engine, for errors about a missing one."""
    if adapter.installer is not None:
        return adapter.installer.hint()
    return f"see `bakeoff engines` for how to install {adapter.name}"


def resolve_launch(adapter: EngineAdapter, arm: Arm, port: int, workdir: Path) -> LaunchInputs:
    """Everything a launch needs from this machine, found once before it: the engine's program (a native
    launch of an engine with an installer) and the models as the engine loads them.

    :raises EngineUnavailable: the program is not installed (naming where it was looked for).
    :raises ConfigError: a model is neither a built-in nor an existing path (naming it).
    """
    model = arm.launched_model  # first: "launching an engine needs 'model'" before anything is looked for
    program = None
    if arm.launch == "native" and adapter.installer is not None:
        program = adapter.installer.locate(adapter.options(arm))
    draft = arm.speculative.draft_model
    return LaunchInputs(port=port, workdir=workdir, model=adapter.model_ref(model),
                        draft_model=adapter.model_ref(draft) if draft else None, program=program)


def check_program(adapter: EngineAdapter, arm: Arm) -> None:
    """Refuse a native arm whose engine program is not on this machine (an ``options.binary`` naming no file)
    before any arm launches: found only at its launch, the other arms would be measured first, pass after pass.

    :raises EngineUnavailable: the engine is nowhere to be found (its installer says where it looked).
    :raises PreflightError: the program's path names no file (naming the option it came from, and the path).
    """
    if arm.launch != "native" or adapter.installer is None:
        return
    program = adapter.installer.locate(adapter.options(arm))
    command = program.argv[0]
    path = Path(command)
    if path.is_file() or (os.sep not in command and shutil.which(command)):
        return
    option = next((f"options.{k}" for k, v in arm.options.items()
                   if isinstance(v, str) and Path(v).expanduser() == path), None)
    where = option or f"the {adapter.name} program from {program.found_in or 'its installer'}"
    raise PreflightError(f"arm {arm.name!r}: {where} {command!r} does not exist"
                         + (" (correct the path, or leave it out to use an installed build)" if option else ""))


def compose_service(adapter: EngineAdapter, arm: Arm, launch: LaunchInputs) -> dict[str, Any]:
    """The arm as one docker compose service (``launch: compose``), published on ``127.0.0.1:launch.port``: the
    adapter's own launch spec for the inside of its :class:`ComposeImage`, each local model bind-mounted read-only
    at the path the command names, a hub id read from the image's hub cache, GPUs reserved as the image says.

    :raises CapabilityNotSupported: the adapter declares no compose image.
    """
    image = adapter.compose
    if image is None:
        raise CapabilityNotSupported(f"arm {arm.name!r}: {adapter.name} has no docker compose service "
                                     f"(launch: compose)")
    mounts, cache = Mounts(), image.hub_cache(arm)
    hub = [ref for ref in (launch.model, launch.draft_model) if ref is not None and not Path(ref).is_absolute()]

    def inside(ref: str) -> str:
        return ref if ref in hub else mounts.place(ref)

    model = inside(launch.model)  # first: the model is /models/0
    draft = inside(launch.draft_model) if launch.draft_model is not None else None
    inner = LaunchInputs(port=image.inner_port, workdir=launch.workdir, model=model, draft_model=draft,
                         program=Program(image.program))
    there = arm.model_copy(update={"settings": arm.settings.model_copy(update={"host": "0.0.0.0"})})
    spec = adapter.launch_spec(there, inner)
    gpus = image.uses_gpus(arm)
    env = dict(spec.env)
    service = compose_service_spec(image.image_of(arm), spec.argv, launch.port, image.inner_port, list(image.health),
                                   mounts=mounts, env=env, gpus=gpus, **image.extra)
    if hub and cache is not None:
        service["volumes"].append({"type": "bind", "source": str(Path(cache).expanduser()),
                                   "target": "/root/.cache/huggingface", "read_only": True})
        env.setdefault("HF_HUB_OFFLINE", "1")
        service["environment"] = env
    return service


def build_launch(adapter: EngineAdapter, arm: Arm, port: int, workdir: Path) -> LaunchSpec:
    """The arm's launch spec: :func:`resolve_launch`, then the adapter's pure translation."""
    return adapter.launch_spec(arm, resolve_launch(adapter, arm, port, workdir))
