#!/usr/bin/python3
"""Validates KubeVirt objects against KubeVirt's own OpenAPI definitions.

Usage: validate.py OPENAPI FILE...

OPENAPI is KubeVirt's swagger definitions (api/openapi-spec/swagger.json, or a subset of it).
Each FILE is JSON (`vgpuctl --json kubevirt-config`: its "kubevirt" object), YAML (one or
more documents), or Markdown, whose ```yaml blocks are read. Each KubeVirt CR is checked as
v1.KubeVirt; each VirtualMachine's spec.template.spec.domain.devices gpus[] and hostDevices[]
as v1.GPU and v1.HostDevice. Other kinds have no definition here and are counted as skipped.

The device definitions get additionalProperties: false, which KubeVirt's definitions leave
out: the API server prunes unknown fields, so a misspelt key would be dropped in silence.
Prints one line per file; exits 1 on the first object that does not validate.
"""

import json
import re
import sys

import jsonschema
import yaml

STRICT = [
    "v1.DeveloperConfiguration",
    "v1.GPU",
    "v1.HostDevice",
    "v1.MediatedDevicesConfiguration",
    "v1.MediatedHostDevice",
    "v1.PciHostDevice",
    "v1.PermittedHostDevices",
    "v1.USBHostDevice",
    "v1.VGPUDisplayOptions",
    "v1.VGPUOptions",
]


def validator(definitions, name):
    schema = {"$ref": "#/definitions/" + name, "definitions": definitions}
    return jsonschema.Draft4Validator(schema)


def documents(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        value = json.loads(text)
        return [value.get("kubevirt", value)]
    if path.endswith(".md"):
        blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S)
        return [d for b in blocks for d in yaml.safe_load_all(b) if d is not None]
    return [d for d in yaml.safe_load_all(text) if d is not None]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        definitions = json.load(f)["definitions"]
    for name in STRICT:
        definitions[name]["additionalProperties"] = False
    kubevirt = validator(definitions, "v1.KubeVirt")
    gpu = validator(definitions, "v1.GPU")
    hostdev = validator(definitions, "v1.HostDevice")
    for path in argv[2:]:
        counts = {"KubeVirt": 0, "GPU": 0, "HostDevice": 0, "skipped": 0}
        for doc in documents(path):
            kind = doc.get("kind") if isinstance(doc, dict) else None
            checks = []
            if kind == "KubeVirt":
                checks.append(("KubeVirt", kubevirt, doc))
            elif kind == "VirtualMachine":
                devices = doc["spec"]["template"]["spec"]["domain"].get("devices", {})
                checks += [("GPU", gpu, d) for d in devices.get("gpus", [])]
                checks += [("HostDevice", hostdev, d) for d in devices.get("hostDevices", [])]
            else:
                counts["skipped"] += 1
            for what, check, value in checks:
                errors = sorted(check.iter_errors(value), key=lambda e: list(e.path))
                if errors:
                    for e in errors:
                        where = "/".join(str(p) for p in e.absolute_path)
                        print(f"{path}: {what} /{where}: {e.message}")
                    return 1
                counts[what] += 1
        print(
            f"{path}: {counts['KubeVirt']} KubeVirt, {counts['GPU']} GPU, "
            f"{counts['HostDevice']} HostDevice valid; {counts['skipped']} skipped"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
