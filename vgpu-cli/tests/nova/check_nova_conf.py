"""Checks a nova.conf written by `vgpuctl nova-config` with Nova's own code.

Usage: /usr/bin/python3 check_nova_conf.py NOVA_CONF (Debian's python3-nova). Loads the file
with Nova's option definitions (oslo.config), parses every [pci] device_spec with
nova.pci.devspec.PciDeviceSpec (through nova.pci.whitelist.Whitelist, as the compute service
does), every [pci] alias with nova.pci.request's alias parser, checks that resource classes
and traits are custom names already in Placement's normal form (os_resource_classes, os_traits), and that
every [mdev_<type>] group Nova registers for enabled_mdev_types has device_addresses. Prints
one line per check and exits 1 on the first failure.
"""

import json
import sys

import nova.conf
import os_resource_classes
import os_traits
from nova.pci import request as pci_request
from nova.pci import whitelist

CONF = nova.conf.CONF


def main(path):
    CONF(["--config-file", path], project="nova")
    specs = CONF.pci.device_spec
    whitelist.Whitelist(specs)
    for text in specs:
        spec = json.loads(text)
        for name in [spec["resource_class"]] + spec["traits"].split(","):
            # Already a custom name in normal form: Placement takes it as it is.
            bare = name.removeprefix(os_resource_classes.CUSTOM_NAMESPACE)
            if not os_traits.is_custom(name) or os_resource_classes.normalize_name(bare) != name:
                raise SystemExit(f"{name} is not a custom resource class and trait in normal form")
    print(f"device_spec: {len(specs)} accepted by nova.pci.devspec.PciDeviceSpec")

    schema = pci_request._ALIAS_SCHEMA["properties"]
    placement_keys = [k for k in ("resource_class", "traits") if k not in schema]
    aliases = []
    for text in CONF.pci.alias:
        alias = json.loads(text)
        for key in placement_keys:
            alias.pop(key, None)
        aliases.append(json.dumps(alias))
    CONF.set_override("alias", aliases, group="pci")
    parsed = pci_request._get_alias_from_config()
    note = ""
    if placement_keys:
        note = (
            f" (this Nova's alias schema predates PCI in Placement: checked without "
            f"{', '.join(placement_keys)})"
        )
    print(f"alias: {len(parsed)} accepted by nova.pci.request{note}")

    nova.conf.devices.register_dynamic_opts(CONF)
    for mdev_type in CONF.devices.enabled_mdev_types:
        group = getattr(CONF, f"mdev_{mdev_type}")
        if not group.device_addresses:
            raise SystemExit(f"[mdev_{mdev_type}] has no device_addresses")
        print(f"mdev_{mdev_type}: {len(group.device_addresses)} device address(es)")


if __name__ == "__main__":
    main(sys.argv[1])
