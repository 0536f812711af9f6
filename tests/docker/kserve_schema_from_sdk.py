"""Writes ``kserve_schema.json``: the fields of KServe's custom resources, read from the kserve SDK's model classes.

The kserve package is not a dev dependency (it pins protobuf < 7 and python-dateutil < 3 and pulls in grpcio,
pandas and the kubernetes client): this reads its wheel without installing it, and the tests check the manifests
against the JSON it writes. Each generated class (``openapi_types``, ``attribute_map``, and the setters that refuse
None) becomes ``{json field: type}`` plus its required fields; types outside the SDK (``V1Container``,
``V1ObjectMeta``, ...) are Kubernetes core types that the tests check with kubernetes-validate.

    pip download kserve==VERSION --no-deps -d DIR
    python -m tests.docker.kserve_schema_from_sdk DIR/kserve-VERSION-py3-none-any.whl > tests/docker/kserve_schema.json
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from typing import Any

ROOTS = ("V1beta1InferenceService", "V1alpha1ServingRuntime")
CLASS = re.compile(r"^class (\w+)\(object\):", re.MULTILINE)
REQUIRED = re.compile(r"Invalid value for `(\w+)`, must not be `None`")
TYPE_NAMES = re.compile(r"[A-Z]\w+")


def dict_literal(source: str, name: str) -> dict[str, str]:
    start = source.index(f"    {name} = {{")
    end = source.index("\n    }", start) + len("\n    }")
    value = ast.literal_eval(source[start:end].split("=", 1)[1].strip())
    assert isinstance(value, dict)
    return value


def read_classes(wheel: str) -> tuple[str, dict[str, dict[str, Any]]]:
    classes: dict[str, dict[str, Any]] = {}
    version = "unknown"
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith(".dist-info/METADATA"):
                found = re.search(r"^Version: (\S+)", archive.read(member).decode(), re.MULTILINE)
                version = found.group(1) if found else version
            if not (member.startswith("kserve/models/") and member.endswith(".py")):
                continue
            source = archive.read(member).decode()
            match = CLASS.search(source)
            if match is None or "openapi_types = {" not in source:
                continue
            types, names = dict_literal(source, "openapi_types"), dict_literal(source, "attribute_map")
            classes[match.group(1)] = {
                "fields": {names[attribute]: kind for attribute, kind in types.items()},
                "required": sorted(names[attribute] for attribute in set(REQUIRED.findall(source))),
            }
    return version, classes


def reachable(classes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kept: dict[str, dict[str, Any]] = {}
    pending = list(ROOTS)
    while pending:
        name = pending.pop()
        if name in kept or name not in classes:
            continue
        kept[name] = classes[name]
        for kind in classes[name]["fields"].values():
            pending.extend(TYPE_NAMES.findall(kind))
    return dict(sorted(kept.items()))


def main(wheel: str) -> None:
    version, classes = read_classes(wheel)
    schema = {"source": f"kserve {version} SDK model classes", "roots": list(ROOTS), "classes": reachable(classes)}
    json.dump(schema, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
