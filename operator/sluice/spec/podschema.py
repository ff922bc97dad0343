"""A `podTemplate` checked against Kubernetes' own PodTemplateSpec schema, as the API server does.

The schema (`podtemplate.schema.json`) is generated from Kubernetes' published
OpenAPI by `hack/pod-template-schema.py`, never written by hand; the CRD
carries the same schema (`handlers/crds.py`), so a typo is refused at
`kubectl apply` (kubectl's strict field validation) and here, for `sluice dags
validate` and the operator, in the same terms: an unknown field, a wrong type,
a missing required field, too many items.

This is the structural subset of OpenAPI a CRD schema may use (type,
properties, additionalProperties, items, required, maxItems, enum,
x-kubernetes-int-or-string), so a small walk over it says all a schema
validator would; a general JSON Schema library would not know the Kubernetes
extensions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

from sluice.spec.errors import did_you_mean

Schema = Mapping[str, Any]


@cache
def document() -> dict[str, Any]:
    """The generated file: `source` (the Kubernetes version) and `schema`."""
    text = resources.files("sluice.spec").joinpath("podtemplate.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def schema() -> dict[str, Any]:
    """PodTemplateSpec as a structural schema (a fresh copy: callers may add to it)."""
    copied: dict[str, Any] = json.loads(json.dumps(document()["schema"]))
    return copied


def problems(template: object) -> list[tuple[str, str]]:
    """(path, message) for every place the template does not fit the schema."""
    return list(_walk(document()["schema"], template, ""))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}
_NAMES = {"object": "a mapping", "array": "a list", "boolean": "true or false"}


def _walk(node: Schema, value: Any, path: str) -> Iterator[tuple[str, str]]:
    if value is None:
        return  # null is "not set", as the API server takes it in a CRD object
    if node.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            yield path, f"must be a number or a string, got {value!r}"
        return
    kind = node.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and not (
            kind in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            yield path, f"must be {_NAMES.get(kind, f'a {kind}')}, got {value!r}"
            return
    if "enum" in node and value not in node["enum"]:
        yield path, f"must be one of {', '.join(map(str, node['enum']))}, got {value!r}"
    if isinstance(value, dict):
        yield from _walk_object(node, value, path)
    elif isinstance(value, list):
        limit = node.get("maxItems")
        if limit is not None and len(value) > limit:
            yield path, f"has {len(value)} items, at most {limit} are allowed"
        items = node.get("items")
        if items is not None:
            for index, item in enumerate(value):
                yield from _walk(items, item, f"{path}[{index}]")


def _walk_object(node: Schema, value: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    properties: Schema = node.get("properties", {})
    extra: Schema | None = node.get("additionalProperties")
    for name in node.get("required", []):
        if name not in value:
            yield _join(path, name), f"required field is missing; add `{name}`"
    for key, item in value.items():
        if key in properties:
            yield from _walk(properties[key], item, _join(path, key))
        elif extra is not None:
            yield from _walk(extra, item, _join(path, key))
        elif properties:
            yield _join(path, key), f"unknown field {key!r}; {did_you_mean(key, properties)}"
