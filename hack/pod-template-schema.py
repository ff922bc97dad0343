#!/usr/bin/env python3
"""Generate operator/sluice/spec/podtemplate.schema.json from Kubernetes' own OpenAPI.

A task's `podTemplate` is a PodTemplateSpec. Its schema is not written by hand:
it is Kubernetes' published OpenAPI v3 document (`api/openapi-spec/v3/
api__v1_openapi.json` of the `k8s.io/kubernetes` module, the version the local
cluster is built from), made structural the way CRD generators do it:

- every `$ref` is inlined; Quantity and IntOrString become
  `x-kubernetes-int-or-string`; Time becomes a date-time string;
- descriptions, defaults (the API server would apply them to the stored DAG),
  and the list/map merge annotations (a template is merged by Sluice, not by
  server-side apply) are dropped;
- `metadata` takes labels and annotations only (the rest means nothing in a
  Job's pod template), `ephemeralContainers` is left out (no pod can be created
  with them), and `containers` is not required (the task gives `main`);
- every list gets a `maxItems` (`MAX_ITEMS`), so the API server can bound the
  cost of the CEL rules that walk them (handlers/crds.py).

Usage: `make pod-template-schema` (runs `go mod download` for the module, a
no-op when the local cluster was built), or
`hack/pod-template-schema.py [--openapi FILE] [--version v1.34.4]`.
tests/unit/test_spec_podtemplate.py checks the committed file is this output.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

VERSION = "v1.34.4"
MEMBER = "k8s.io/kubernetes@{version}/api/openapi-spec/v3/api__v1_openapi.json"
OUT = Path(__file__).resolve().parent.parent / "operator/sluice/spec/podtemplate.schema.json"
ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
INT_OR_STRING = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
}
TIME = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
}
KEEP = {"type", "format", "enum", "required", "properties", "items", "additionalProperties"}
# Bounds for the CEL cost estimate: generous for a pod, small enough to multiply.
MAX_ITEMS = {"containers": 16, "initContainers": 16, "volumes": 64, "env": 256, "sources": 16}
MAX_ITEMS_DEFAULT = 64


def openapi_from_module(version: str) -> dict[str, Any]:
    info = json.loads(
        subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    with zipfile.ZipFile(info["Zip"]) as archive:
        loaded: dict[str, Any] = json.loads(archive.read(MEMBER.format(version=version)))
        return loaded


def structural(
    schemas: dict[str, Any], node: dict[str, Any], field: str, seen: tuple[str, ...]
) -> Any:
    refs = [part["$ref"] for part in node.get("allOf", []) if "$ref" in part]
    if "$ref" in node:
        refs.append(node["$ref"])
    if refs:
        (ref,) = refs
        name = ref.rsplit("/", 1)[-1]
        if name in INT_OR_STRING:
            return {"x-kubernetes-int-or-string": True}
        if name in TIME:
            return {"type": "string", "format": "date-time"}
        if name in seen:
            raise SystemExit(f"{name} refers to itself ({' -> '.join(seen)}): not structural")
        return structural(schemas, schemas[name], field, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in KEEP:
            continue
        if key == "properties":
            out[key] = {
                name: structural(schemas, child, name, seen)
                for name, child in sorted(value.items())
            }
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = structural(schemas, value, field, seen)
        else:
            out[key] = value
    if out.get("type") == "array":
        out["maxItems"] = MAX_ITEMS.get(field, MAX_ITEMS_DEFAULT)
    return out


def pod_template_schema(openapi: dict[str, Any], version: str) -> dict[str, Any]:
    schemas = openapi["components"]["schemas"]
    template = structural(schemas, schemas[ROOT], "", (ROOT,))
    spec = template["properties"]["spec"]
    spec["properties"].pop("ephemeralContainers")
    spec.pop("required", None)  # `containers`: the task's own fields make `main`
    labels = {"type": "object", "additionalProperties": {"type": "string"}}
    template["properties"]["metadata"] = {
        "type": "object",
        "properties": {"labels": labels, "annotations": dict(labels)},
    }
    return {"source": f"k8s.io/kubernetes {version} {ROOT}", "schema": template}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--openapi", type=Path, help="api__v1_openapi.json (default: from the Go module)"
    )
    parser.add_argument("--version", default=VERSION)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    openapi = (
        json.loads(args.openapi.read_text()) if args.openapi else openapi_from_module(args.version)
    )
    document = pod_template_schema(openapi, args.version)
    args.out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
