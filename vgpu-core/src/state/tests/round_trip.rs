//! Properties of the definition files: what the store writes, it reads back as the same
//! definition, for any definition it accepts. The text alone first (`format`, many cases), then
//! through the store's files (fewer cases: every write is flushed to disk).

use proptest::prelude::*;

use super::*;

use crate::error::StateError;
use crate::model::pci::PciAddress;
use crate::state::format::{
    decode_binding, decode_mdev, decode_sriov, decode_vf_vgpu, encode_binding, encode_mdev,
    encode_sriov, encode_vf_vgpu,
};
use crate::state::store::MIB;

/// Any PCI address, over the whole range of each part.
fn address() -> impl Strategy<Value = PciAddress> {
    (any::<u32>(), any::<u8>(), 0u8..0x20, 0u8..8)
        .prop_filter_map("in range", |(d, b, s, f)| PciAddress::new(d, b, s, f))
}

/// A name the store takes as one path component: not empty, no `/` or NUL, not `.` or `..`;
/// half of them of the characters sysfs and driver names have, dots included, the others of
/// any character.
fn file_name() -> impl Strategy<Value = String> {
    prop_oneof!["[.a-z0-9:_-]{1,12}", "[^/\u{0}]{1,12}"]
        .prop_filter("not . or ..", |n| n != "." && n != "..")
}

fn start() -> impl Strategy<Value = Start> {
    prop_oneof![Just(Start::Auto), Just(Start::Manual)]
}

fn mdev(parent: impl Strategy<Value = String>) -> impl Strategy<Value = MdevDefinition> {
    (
        any::<u128>(),
        parent,
        file_name(),
        start(),
        proptest::collection::vec((file_name(), any::<String>()), 0..4),
    )
        .prop_map(|(uuid, parent, mdev_type, start, attrs)| MdevDefinition {
            uuid: Uuid::from_u128(uuid),
            parent,
            mdev_type,
            start,
            attrs,
        })
}

/// Any SR-IOV definition, with local-memory quotas for some of its VFs (any VF number of
/// `1..=num_vfs`, any size from 1 MiB up to what fits `lmem_quota`'s bytes).
fn sriov() -> impl Strategy<Value = SriovDefinition> {
    (
        address(),
        any::<u32>(),
        any::<Option<bool>>(),
        proptest::collection::btree_map(1u32..=u32::MAX, 1u64..=u64::MAX / MIB, 0..4),
    )
        .prop_map(|(pf, num_vfs, drivers_autoprobe, quotas)| SriovDefinition {
            pf,
            num_vfs,
            drivers_autoprobe,
            lmem_quota_mib: quotas
                .into_iter()
                .filter(|(vf, _)| *vf <= num_vfs)
                .collect(),
        })
}

fn vf_vgpu() -> impl Strategy<Value = VfVgpuDefinition> {
    (
        address(),
        address(),
        any::<u32>(),
        proptest::option::of("[A-Za-z0-9 -]{1,24}"),
        start(),
    )
        .prop_map(|(vf, gpu, type_id, type_name, start)| VfVgpuDefinition {
            placement: None,
            vf,
            gpu,
            type_id,
            type_name,
            start,
        })
}

fn binding() -> impl Strategy<Value = BindingDefinition> {
    (
        address(),
        file_name(),
        proptest::option::of(file_name()),
        start(),
    )
        .prop_map(
            |(address, driver, previous_driver, start)| BindingDefinition {
                address,
                driver,
                previous_driver,
                start,
            },
        )
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

proptest! {
    #[test]
    fn mdev_text_written_reads_back_the_same(def in mdev(file_name())) {
        let path = Path::new("etc/mdevctl.d/p/u");
        let written = text(encode_mdev(path, &def).unwrap());
        prop_assert_eq!(decode_mdev(path, def.uuid, &def.parent, &written).unwrap(), def);
    }

    #[test]
    fn sriov_text_written_reads_back_the_same(def in sriov()) {
        let path = Path::new("etc/vgpu/sriov/x.json");
        let written = text(encode_sriov(path, &def).unwrap());
        prop_assert_eq!(decode_sriov(path, def.pf, &written).unwrap(), def);
    }

    #[test]
    fn vf_vgpu_text_written_reads_back_the_same(def in vf_vgpu()) {
        let path = Path::new("etc/vgpu/vf-vgpus/x.json");
        let written = text(encode_vf_vgpu(path, &def).unwrap());
        prop_assert_eq!(decode_vf_vgpu(path, def.vf, &written).unwrap(), def);
    }

    #[test]
    fn binding_text_written_reads_back_the_same(def in binding()) {
        let path = Path::new("etc/vgpu/bindings/x.json");
        let written = text(encode_binding(path, &def).unwrap());
        prop_assert_eq!(decode_binding(path, def.address, &written).unwrap(), def);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn mdev_defined_reads_back_from_the_store(def in mdev(file_name())) {
        let (_dir, paths) = host();
        let store = Store::new(&paths);
        match store.define_mdev(&def) {
            // mdevctl's scripts directory is no parent, and names the listing skips are refused.
            Err(Error::State(StateError::Definition { .. }))
                if def.parent == "scripts.d" || def.parent.starts_with('.') => {}
            other => {
                prop_assert!(other.is_ok(), "{other:?}");
                prop_assert_eq!(store.mdev(def.uuid).unwrap(), Some(def.clone()));
                prop_assert_eq!(store.mdevs().unwrap(), vec![def]);
            }
        }
    }

    #[test]
    fn own_definitions_read_back_from_the_store(
        sriov in sriov(),
        vf_vgpu in vf_vgpu(),
        binding in binding(),
    ) {
        let (_dir, paths) = host();
        let store = Store::new(&paths);
        store.define_sriov(&sriov).unwrap();
        store.define_vf_vgpu(&vf_vgpu).unwrap();
        store.define_binding(&binding).unwrap();
        prop_assert_eq!(
            (store.sriov().unwrap(), store.vf_vgpus().unwrap(), store.bindings().unwrap()),
            (vec![sriov], vec![vf_vgpu], vec![binding])
        );
    }
}
