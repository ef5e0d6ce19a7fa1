"""Reading a bakeoff file: YAML text to a validated, sweep-expanded :class:`~bakeoff.core.config.schema.BakeoffFile`.

The models live in core/config/schema.py; this module only loads. YAML is read with a loader that refuses a key
given twice and aliases that expand past :data:`MAX_YAML_VALUES`; the composed tree is kept so that every
error names its line. Sweeps (core/config/sweep.py) and calibration sections (core/config/calibration.py) are
expanded here, so everything downstream sees plain arms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..common.errors import ConfigError
from .calibration import expand_calibration
from .schema import BakeoffFile, format_validation_error
from .sweep import expand_sweeps

__all__ = ["MAX_YAML_VALUES", "load_bakeoff", "parse_bakeoff"]

MAX_YAML_VALUES = 200_000  # nodes a file may expand to through aliases: far above any real bakeoff


def parse_bakeoff(text: str, source: str = "<string>") -> BakeoffFile:
    """Validate a bakeoff file's text.

    :raises ConfigError: naming each bad key with its line.
    """
    try:
        data, root = _load_yaml(text, source)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a bakeoff file is a mapping with 'arms:' and 'workload:'")
    try:
        config = BakeoffFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, root)) from exc
    return expand_calibration(expand_sweeps(config, source, root), source)


def load_bakeoff(path: str | Path) -> BakeoffFile:
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
    return parse_bakeoff(text, str(p))


class _BakeoffLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last one silently)."""

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
