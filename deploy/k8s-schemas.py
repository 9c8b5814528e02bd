#!/usr/bin/env python3
"""Offline JSON schemas for kubeconform, from OpenAPI documents that Go modules ship.

    k8s-schemas.py OUT_DIR --swagger SWAGGER.json [--crd CRD.yaml ...]

Writes OUT_DIR/<kind>[-<group>]-<version>.json (the layout kubeconform's
`{{ .ResourceKind }}{{ .KindSuffix }}.json` template names), one standalone file per kind:
the kind's schema plus every definition it references under "definitions".

Strict, as kubectl validates: an object with "properties" admits no other property unless
it says otherwise (additionalProperties, x-kubernetes-preserve-unknown-fields);
int-or-string fields take a string or an integer, quantities a string or a number; the
root's apiVersion and kind must be the kind's own. CRDs (CustomResourceDefinition YAML, as
controller-gen writes them) get the same treatment, with metadata checked as ObjectMeta.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DRAFT = "http://json-schema.org/draft-07/schema#"
INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
SKIP_KINDS = {"DeleteOptions", "WatchEvent", "Status", "APIGroup", "APIResourceList"}


def strict(node: Any) -> Any:
    """Convert one schema node (swagger 2 or CRD OpenAPI v3) to strict JSON schema."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        return dict(INT_OR_STRING)
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return {"$ref": f"#/definitions/{name}"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: strict(sub) for name, sub in value.items()}
        elif key == "allOf" and len(value) == 1 and "$ref" in value[0]:
            out.update(strict(value[0]))  # OpenAPI v3's wrapper for a $ref with siblings
        else:
            out[key] = strict(value)
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def references(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for value in node.values():
            references(value, found)
    elif isinstance(node, list):
        for item in node:
            references(item, found)


def closure(root: Any, definitions: dict[str, Any]) -> dict[str, Any]:
    pending: set[str] = set()
    references(root, pending)
    done: dict[str, Any] = {}
    while pending:
        name = pending.pop()
        if name in done:
            continue
        if name not in definitions:
            raise SystemExit(f"k8s-schemas: unresolved reference {name}")
        done[name] = definitions[name]
        more: set[str] = set()
        references(definitions[name], more)
        pending |= more - done.keys()
    return dict(sorted(done.items()))


def file_name(group: str, version: str, kind: str) -> str:
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind}{suffix}.json".lower()


def pin_identity(schema: dict[str, Any], group: str, version: str, kind: str) -> None:
    api_version = f"{group}/{version}" if group else version
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "enum": [api_version]}
    props["kind"] = {"type": "string", "enum": [kind]}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind"})


def write(out: Path, name: str, schema: dict[str, Any], definitions: dict[str, Any]) -> None:
    document = {"$schema": DRAFT, **schema, "definitions": closure(schema, definitions)}
    (out / name).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


def swagger_definitions(path: Path) -> dict[str, Any]:
    spec = json.loads(path.read_text())
    raw = spec.get("definitions") or spec.get("components", {}).get("schemas")
    if not raw:
        raise SystemExit(f"k8s-schemas: no definitions in {path}")
    definitions = {name: strict(schema) for name, schema in raw.items()}
    if QUANTITY in definitions:
        definitions[QUANTITY] = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    return definitions


def crd_documents(paths: list[Path]) -> list[dict[str, Any]]:
    import yaml  # only CRDs need it (the project's dev extras have pyyaml)

    found = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found.append(doc)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--swagger", type=Path, required=True)
    parser.add_argument("--crd", type=Path, nargs="*", default=[])
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    definitions = swagger_definitions(args.swagger)
    written = 0
    spec = json.loads(args.swagger.read_text())
    raw = spec.get("definitions") or spec.get("components", {}).get("schemas")
    for name, source in raw.items():
        for gvk in source.get("x-kubernetes-group-version-kind", []):
            kind = gvk["kind"]
            if kind in SKIP_KINDS or kind.endswith("List"):
                continue
            schema = json.loads(json.dumps(definitions[name]))
            pin_identity(schema, gvk["group"], gvk["version"], kind)
            write(args.out, file_name(gvk["group"], gvk["version"], kind), schema, definitions)
            written += 1

    for crd in crd_documents(args.crd):
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            source = version.get("schema", {}).get("openAPIV3Schema")
            if not source:
                continue
            schema = strict(source)
            metadata = {"$ref": f"#/definitions/{OBJECT_META}"}
            schema.setdefault("properties", {})["metadata"] = metadata
            pin_identity(schema, group, version["name"], kind)
            write(args.out, file_name(group, version["name"], kind), schema, definitions)
            written += 1

    print(f"k8s-schemas: {written} schemas in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
