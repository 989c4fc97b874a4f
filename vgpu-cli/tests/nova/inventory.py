"""Runs Nova's own vGPU inventory code on a nova.conf and a (simulated) host tree.

Usage: /usr/bin/python3 inventory.py NOVA_CONF ROOT STATE_ROOT (Debian's python3-nova).

Loads NOVA_CONF with Nova's option definitions (oslo.config), makes a LibvirtDriver without
its constructor (LibvirtDriver.__new__) but with the attributes its constructor sets for
vGPUs, in the constructor's order (`_get_supported_vgpu_types` runs before the compute
manager's init_host registers the [mdev_*] groups), and a fake `_host` that answers like
libvirt's node-device driver for the host at ROOT:

- one `pci_<addr>` device per mdev parent (ROOT/sys/class/mdev_bus/*), with every type of its
  mdev_supported_types and that type's available_instances;
- one `mdev_<uuid>_<parent>` device per mediated device, active (ROOT/sys/bus/mdev/devices)
  or only defined in mdevctl's store (STATE_ROOT/etc/mdevctl.d/<parent>/<uuid>): libvirt lists
  both, and so does Nova's count.

Then calls Nova's `_get_gpu_inventories` unmodified and prints JSON: Nova's release, its
supported types, the inventory per libvirt parent name, and the totals per physical GPU (a VF's
totals go to its PF, through its `physfn` link). Exits 1 (with the traceback) when Nova raises.
"""

import collections
import json
import os
import sys
import xml.sax.saxutils as saxutils

import nova.conf
import nova.version
import os_resource_classes
from nova.virt.libvirt import driver as libvirt_driver

CONF = nova.conf.CONF


def libvirt_name(address):
    return "pci_" + address.replace(":", "_").replace(".", "_")


def pci_fields(address):
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16)


def read(path):
    with open(path) as f:
        return f.read().strip()


class FakeNodeDevice:
    def __init__(self, xml):
        self.xml = xml

    def XMLDesc(self, flags):
        return self.xml


class FakeHost:
    """The node devices libvirt would list for the host at ROOT with mdevctl's store."""

    def __init__(self, root, state_root):
        self.devices = {}
        self.parents = []
        self.mdevs = []
        bus = os.path.join(root, "sys/class/mdev_bus")
        for parent in sorted(os.listdir(bus)) if os.path.isdir(bus) else []:
            self._add_parent(os.path.join(bus, parent), parent)
        active = set()
        mdev_devices = os.path.join(root, "sys/bus/mdev/devices")
        for uuid in sorted(os.listdir(mdev_devices)) if os.path.isdir(mdev_devices) else []:
            path = os.path.realpath(os.path.join(mdev_devices, uuid))
            parent = os.path.basename(os.path.dirname(path))
            mdev_type = os.path.basename(os.readlink(os.path.join(path, "mdev_type")))
            group = os.path.basename(os.readlink(os.path.join(path, "iommu_group")))
            self._add_mdev(uuid, parent, mdev_type, group)
            active.add((uuid, parent))
        store = os.path.join(state_root, "etc/mdevctl.d")
        for parent in sorted(os.listdir(store)) if os.path.isdir(store) else []:
            for uuid in sorted(os.listdir(os.path.join(store, parent))):
                if (uuid, parent) in active:
                    continue
                with open(os.path.join(store, parent, uuid)) as f:
                    definition = json.load(f)
                # An inactive mdev has no IOMMU group yet; Nova's parser needs a number.
                self._add_mdev(uuid, parent, definition["mdev_type"], "0")

    def _add_parent(self, path, address):
        domain, bus, slot, function = pci_fields(address)
        types = []
        types_dir = os.path.join(path, "mdev_supported_types")
        for type_id in sorted(os.listdir(types_dir)):
            type_dir = os.path.join(types_dir, type_id)
            name_path = os.path.join(type_dir, "name")
            name = read(name_path) if os.path.exists(name_path) else None
            types.append(
                "<type id=%s>%s<deviceAPI>%s</deviceAPI>"
                "<availableInstances>%s</availableInstances></type>"
                % (
                    saxutils.quoteattr(type_id),
                    "<name>%s</name>" % saxutils.escape(name) if name else "",
                    saxutils.escape(read(os.path.join(type_dir, "device_api"))),
                    read(os.path.join(type_dir, "available_instances")),
                )
            )
        name = libvirt_name(address)
        self.parents.append(name)
        self.devices[name] = FakeNodeDevice(
            "<device><name>%s</name><capability type='pci'>"
            "<domain>%d</domain><bus>%d</bus><slot>%d</slot><function>%d</function>"
            "<product id='0x%s'/><vendor id='0x%s'/>"
            "<capability type='mdev_types'>%s</capability></capability></device>"
            % (
                name,
                domain,
                bus,
                slot,
                function,
                read(os.path.join(path, "device"))[2:],
                read(os.path.join(path, "vendor"))[2:],
                "".join(types),
            )
        )

    def _add_mdev(self, uuid, parent, mdev_type, group):
        parent_name = libvirt_name(parent)
        # libvirt 7.7+ names: mdev_<uuid>_<parent address>.
        name = "mdev_%s_%s" % (uuid.replace("-", "_"), parent_name[len("pci_"):])
        self.mdevs.append(name)
        self.devices[name] = FakeNodeDevice(
            "<device><name>%s</name><parent>%s</parent><capability type='mdev'>"
            "<type id=%s/><uuid>%s</uuid><iommuGroup number='%s'/></capability></device>"
            % (name, parent_name, saxutils.quoteattr(mdev_type), uuid, group)
        )

    def list_mdev_capable_devices(self, flags=0):
        return list(self.parents)

    def list_mediated_devices(self, flags=0):
        return list(self.mdevs)

    def device_lookup_by_name(self, name):
        return self.devices[name]


def make_driver(host):
    drv = libvirt_driver.LibvirtDriver.__new__(libvirt_driver.LibvirtDriver)
    drv._host = host
    # What LibvirtDriver.__init__ sets before calling _get_supported_vgpu_types; the last two
    # exist from 2024.1 (Caracal) on, older releases never read them.
    drv.pgpu_type_mapping = collections.defaultdict(str)
    drv.mdev_class_mapping = collections.defaultdict(lambda: os_resource_classes.VGPU)
    drv.mdev_classes = set()
    drv.mdev_type_max_mapping = collections.defaultdict(str)
    drv.pgpu_type_default = None
    drv.supported_vgpu_types = drv._get_supported_vgpu_types()
    # Then the compute manager's init_host registers the groups for every type.
    nova.conf.devices.register_dynamic_opts(CONF)
    return drv


def physical_gpu(root, address):
    physfn = os.path.join(root, "sys/bus/pci/devices", address, "physfn")
    if os.path.islink(physfn):
        return os.path.basename(os.readlink(physfn))
    return address


def main(conf_path, root, state_root):
    CONF(["--config-file", conf_path], project="nova")
    drv = make_driver(FakeHost(root, state_root))
    inventories = drv._get_gpu_inventories()
    per_gpu = {}
    for name, inventory in inventories.items():
        _, domain, bus, slot, function = name.split("_")
        address = "%s:%s:%s.%s" % (domain, bus, slot, function)
        gpu = physical_gpu(root, address)
        per_gpu[gpu] = per_gpu.get(gpu, 0) + inventory["total"]
    json.dump(
        {
            "nova": nova.version.version_string(),
            "supported_vgpu_types": list(drv.supported_vgpu_types),
            "inventories": inventories,
            "total_per_gpu": per_gpu,
        },
        sys.stdout,
        indent=2,
        sort_keys=True,
    )
    print()


if __name__ == "__main__":
    main(*sys.argv[1:4])
