"""The JSON Schemas structured answers are judged against: one way to build their validator, and their check at load.

A schema that passes the meta-schema (which also compiles each ``pattern``) can still be one no answer can be
judged against: a ``$ref`` to nowhere, a remote ``$ref`` (bakeoff fetches nothing while it measures: answers
would be judged by whatever a server says that day), or a ``$ref`` loop that never reads into the answer.
:func:`schema_problem` finds those when the file is loaded (so ``bakeoff check`` refuses them, naming the field);
:func:`validator_for` builds the validator every answer is judged with, on a registry that resolves only the
schema's own references and the JSON Schema meta-schemas.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["schema_problem", "validator_for"]

# keywords whose values are data, not subschemas: a const {"$ref": "x"} is an answer to match, not a reference
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# keywords applying their subschemas to the same instance: a $ref loop through these alone never ends
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def _no_retrieval(uri: str) -> Any:
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # bakeoff fetches no schema while measuring


def _registry() -> Any:
    from jsonschema_specifications import REGISTRY as META_SCHEMAS
    from referencing import Registry

    return META_SCHEMAS.combine(Registry(retrieve=_no_retrieval))  # type: ignore[call-arg]


def validator_for(schema: Any) -> Any:
    """A Draft 2020-12 validator resolving only ``schema``'s own references and the meta-schemas, never the
    network (jsonschema's default registry fetches remote ``$ref`` URLs)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema, registry=_registry())


def _nodes(schema: Any, path: str, resolver: Any) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Every subschema with its path and the resolver its references are read with (``$id`` moves the base)."""
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from _nodes(item, f"{path}[{i}]", resolver)
        return
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$id"), str):
        from referencing.jsonschema import DRAFT202012

        resolver = resolver.in_subresource(DRAFT202012.create_resource(schema))
    yield path, schema, resolver
    for key, value in schema.items():
        if key not in _DATA_KEYWORDS:
            yield from _nodes(value, f"{path}.{key}", resolver)


def _in_place(schema: Any) -> Iterator[dict[str, Any]]:
    """``schema`` and the subschemas applied to the same instance as it (no property or item entered)."""
    if not isinstance(schema, dict):
        return
    yield schema
    for key in _IN_PLACE_ONE:
        yield from _in_place(schema.get(key))
    for key in _IN_PLACE_MANY:
        subs = schema.get(key)
        for sub in subs if isinstance(subs, list) else []:
            yield from _in_place(sub)
    dependent = schema.get("dependentSchemas")
    for sub in dependent.values() if isinstance(dependent, dict) else []:
        yield from _in_place(sub)


def _ref_loop(target: Any, chain: list[str], seen: set[int]) -> list[str] | None:
    """The chain of ``$ref`` that comes back to a schema already on it without reading into the instance."""
    from referencing.exceptions import Unresolvable

    for sub in _in_place(target.contents):
        ref = sub.get("$ref")
        if not isinstance(ref, str):
            continue
        try:
            nxt = target.resolver.lookup(ref)
        except Unresolvable:
            continue  # reported where that $ref itself is walked
        if id(nxt.contents) in seen:
            return [*chain, ref]
        if loop := _ref_loop(nxt, [*chain, ref], seen | {id(nxt.contents)}):
            return loop
    return None


def _ref_problem(where: str, ref: str, resolver: Any) -> str | None:
    from referencing.exceptions import Unresolvable

    try:
        target = resolver.lookup(ref)
    except Unresolvable as exc:
        remote = "" if ref.startswith("#") else " (bakeoff fetches no remote schema: put it under $defs)"
        return f"{where}.$ref {ref!r} resolves to nothing{remote}: {type(exc).__name__}"
    if loop := _ref_loop(target, [ref], {id(target.contents)}):
        return f"{where}.$ref {ref!r} loops back without reading into the answer ({' -> '.join(loop)})"
    return None


def schema_problem(where: str, schema: Any) -> str | None:
    """Why no answer can be judged against ``schema`` (named from ``where``, e.g. ``tools[0].function.parameters``),
    or None. The meta-schema is jsonschema's; references, loops and patterns are checked here."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from referencing.jsonschema import DRAFT202012

    try:
        Draft202012Validator.check_schema(schema)
        resolver = _registry().resolver_with_root(DRAFT202012.create_resource(schema))  # as validator_for's
        for path, node, node_resolver in _nodes(schema, where, resolver):
            ref = node.get("$ref")
            why = _ref_problem(path, ref, node_resolver) if isinstance(ref, str) else None
            if why:
                return why
    except SchemaError as exc:  # its path names the field (a pattern that is no regex: its .pattern)
        at = exc.json_path.removeprefix("$")
        return f"{where}{at} is not a valid JSON Schema: {exc.message}"
    except RecursionError:
        return f"{where} is nested deeper than Python's recursion limit lets it be checked"
    return None
