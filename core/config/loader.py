"""Reading a bakeoff file: YAML text to a validated, sweep-expanded :class:`~bakeoff.core.config.schema.BakeoffFile`.

The models live in core/config/schema.py; this module only loads. YAML is read with a loader that refuses a key
given twice and aliases that expand past :data:`MAX_YAML_VALUES`; the composed tree is kept so that every
error names its line. Sweeps (core/config/sweep.py) and calibration sections (core/config/calibration.py) are
expanded here, so everything downstream sees plain arms. A relative ``model:`` or ``draft_model:`` path is read
from the bakeoff file's folder, not from wherever the command was started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..common.errors import ConfigError
from .builtin_models import BUILTIN_MODELS
from .calibration import expand_calibration
from .prompts import resolve_prompts
from .schema import Arm, ArmOrigin, BakeoffFile, format_validation_error, yaml_line
from .sessions import check_context, load_sessions, pin_conversations
from .sweep import expand_sweeps

__all__ = ["MAX_YAML_VALUES", "load_bakeoff", "parse_bakeoff", "read_bakeoff", "resolve_model_paths"]

MAX_YAML_VALUES = 200_000  # nodes a file may expand to through aliases: far above any real bakeoff
MAX_YAML_DEPTH = 100  # nesting levels a file may have: a bakeoff file needs under 10, Python's stack ~300


def read_bakeoff(text: str, source: str = "<string>", base: Path | None = None) -> BakeoffFile:
    """Validate a bakeoff file's text and expand its sweeps, on paper: calibration sections are left as they are
    (``bakeoff check`` plans them without building their models).

    :param base: the folder relative ``model:`` paths are read from (the file's own; None: leave them).
    :raises ConfigError: naming each bad key with its line.
    """
    try:
        data, root = _load_yaml(text, source)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_problem(exc, source)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a bakeoff file is a mapping with 'arms:' and 'workload:'")
    try:
        config = BakeoffFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, root, model=BakeoffFile)) from exc
    for index, arm in enumerate(config.arms):
        arm.set_origin(ArmOrigin(source, _arm_node(root, index), index))
    try:
        resolve_prompts(config.workload)
    except ConfigError as exc:  # an unknown prompt or suite, with the line it is on
        line = yaml_line(root, ("workload", "prompts" if config.workload.prompts else "suite"))
        raise ConfigError(f"{source}:{line}: {exc}" if line else f"{source}: {exc}") from None
    config = expand_sweeps(config, source, root)
    config = resolve_model_paths(config, base) if base is not None else config
    return _check_sessions(config, base)


def _check_sessions(config: BakeoffFile, base: Path | None) -> BakeoffFile:
    """A sessions file read from the bakeoff file's folder and its content's hash recorded (a resume replays
    that content or nothing), and every session checked before anything starts."""
    spec = config.workload.sessions
    if spec is None:
        return config
    if spec.file is not None and base is not None and not Path(spec.file).expanduser().is_absolute():
        spec = spec.model_copy(update={"file": str((base / spec.file).resolve())})
        config = config.model_copy(update={"workload": config.workload.model_copy(update={"sessions": spec})})
    config = pin_conversations(config)
    assert config.workload.sessions is not None
    check_context(load_sessions(config.workload.sessions), config.arms, config.workload)
    return config


def parse_bakeoff(text: str, source: str = "<string>", base: Path | None = None) -> BakeoffFile:
    """Validate a bakeoff file's text, expand its sweeps and add its calibration arms.

    :param base: the folder relative ``model:`` paths are read from (the file's own; None: leave them).
    :raises ConfigError: naming each bad key with its line.
    """
    return expand_calibration(read_bakeoff(text, source, base), source)


def load_bakeoff(path: str | Path, *, calibrate: bool = True) -> BakeoffFile:
    """Read a bakeoff file; relative model paths in it are read from its folder.

    :param calibrate: add the calibration arms (``False``: leave ``calibrate:`` sections on paper).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read bakeoff file {p}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{p}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8") from None
    config = read_bakeoff(text, str(p), p.resolve().parent)
    return expand_calibration(config, str(p)) if calibrate else config


def _is_path(value: str, base: Path) -> bool:
    """Whether a model value is a path to read from the file's folder: ``./x``, ``../x``, ``x.gguf``, or a
    relative name that exists there (anything else, such as a hub id ``org/name``, stays as written)."""
    if value.startswith(("/", "~")):
        return False
    return value.startswith(("./", "../")) or value.endswith(".gguf") or (base / value).exists()


def resolve_model_paths(config: BakeoffFile, base: Path) -> BakeoffFile:
    """The config with relative model and draft-model paths made absolute against ``base`` (the file's folder).

    Built-in model names (``smollm2``) and hub ids are left alone; run.json then records the absolute path, so a
    run resumes from any folder.
    """
    def fix(value: str | None) -> str | None:
        if value is None or value in BUILTIN_MODELS or not _is_path(value, base):
            return value
        return str((base / value).resolve())

    arms: list[Arm] = []
    for arm in config.arms:
        spec = arm.speculative
        new = arm.model_copy(update={"model": fix(arm.model),
                                     "speculative": spec.model_copy(update={"draft_model": fix(spec.draft_model)})})
        arms.append(new)
    sections = [c.model_copy(update={"model": fix(c.model)}) for c in config.calibrate or []]
    return config.model_copy(update={"arms": arms, **({"calibrate": sections} if config.calibrate else {})})


def _arm_node(root: yaml.Node | None, index: int) -> yaml.Node | None:
    if not isinstance(root, yaml.MappingNode):
        return None
    arms = next((v for k, v in root.value if k.value == "arms"), None)
    if isinstance(arms, yaml.SequenceNode) and index < len(arms.value):
        node: yaml.Node = arms.value[index]
        return node
    return None


def _yaml_problem(exc: yaml.MarkedYAMLError, source: str) -> str:
    """``file:3:5: expected <block end>, but found '-' (while parsing a block collection that starts at 2:3)``."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    text = exc.problem or exc.context or "not valid YAML"
    if exc.problem and exc.context:
        ctx = exc.context_mark
        at = f" that starts at {ctx.line + 1}:{ctx.column + 1}" if ctx is not None and ctx is not mark else ""
        text += f" ({exc.context}{at})"
    if "\t" in text or "found character '\\t'" in text:
        text += "; indent with spaces, not tabs"
    return f"{where}: not valid YAML: {text}"


class _BakeoffLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last one silently),
    nesting deeper than :data:`MAX_YAML_DEPTH` (PyYAML composes recursively: a deep file would end in a
    RecursionError) and text that is not Unicode (a lone surrogate such as ``"\\uD800"`` cannot be stored)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_YAML_DEPTH} levels deep; a bakeoff file needs far fewer",
                    self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.ScalarNode):
            node.value = _whole_characters(node.value, node.start_mark)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key.value!r} is given twice (lines {seen[key.value]} and {line}); "
                        "keep one", key.start_mark)
                seen[key.value] = line
        return super().construct_mapping(node, deep)


def _whole_characters(value: str, mark: yaml.Mark) -> str:
    """``value`` with each escaped surrogate pair (``"\\uD83D\\uDE00"``) joined into its character; a lone
    surrogate is refused (it cannot be stored as UTF-8: the run name, a sample, the report would fail)."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    try:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError as exc:
        half = exc.object[exc.start:exc.end].decode("utf-16-le", "surrogatepass")
        raise yaml.composer.ComposerError(
            None, None, f"{half!r} is half of a UTF-16 surrogate pair, not a character; write the character "
            "itself", mark) from None


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes the tree holds once every alias is expanded, counted without expanding (each node once)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 0  # a recursive alias adds nothing more
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


def _load_yaml(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """The document and its composed tree (for line numbers). Aliases that would expand the file beyond
    MAX_YAML_VALUES nodes (an alias bomb) are refused before anything is built from them."""
    loader = _BakeoffLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        try:
            size = _expanded_size(root, {})
        except RecursionError:
            raise ConfigError(f"{source}: nested too deeply") from None
        if size > MAX_YAML_VALUES:
            raise ConfigError(f"{source}: through its aliases (*name) the file expands to {size:,} values, more "
                              f"than the {MAX_YAML_VALUES:,} a bakeoff file may hold; write the values out")
        return loader.construct_document(root), root
    finally:
        loader.dispose()
