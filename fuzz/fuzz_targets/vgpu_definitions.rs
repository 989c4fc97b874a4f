//! A file of `vgpu`'s own store (`etc/vgpu/{sriov,vf-vgpus,bindings}/<address>.json`) from any
//! bytes, read as each of the three kinds: never panics, and a definition that reads is written
//! back as text that reads to the same definition.
#![no_main]

use std::fmt::Debug;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vgpu_core::fuzzing::{
    decode_binding, decode_sriov, decode_vf_vgpu, encode_binding, encode_sriov, encode_vf_vgpu,
};
use vgpu_core::{Result, model::pci::PciAddress};

fn round_trip<D: Debug + PartialEq>(
    text: &str,
    decode: impl Fn(&str) -> Result<D>,
    encode: impl Fn(&D) -> Result<Vec<u8>>,
) {
    let Ok(def) = decode(text) else {
        return;
    };
    let written = match encode(&def) {
        Ok(bytes) => String::from_utf8(bytes).expect("serde_json writes UTF-8"),
        Err(err) => panic!("{text:?} read as {def:?}, which cannot be written: {err}"),
    };
    match decode(&written) {
        Ok(again) => assert_eq!(again, def, "{text:?} written as {written:?}"),
        Err(err) => panic!("{text:?} written as {written:?}, which does not read: {err}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(address) = PciAddress::new(0, 0x41, 0, 4) else {
        return;
    };
    let path = Path::new("etc/vgpu/any/0000:41:00.4.json");
    round_trip(
        text,
        |t| decode_sriov(path, address, t),
        |d| encode_sriov(path, d),
    );
    round_trip(
        text,
        |t| decode_vf_vgpu(path, address, t),
        |d| encode_vf_vgpu(path, d),
    );
    round_trip(
        text,
        |t| decode_binding(path, address, t),
        |d| encode_binding(path, d),
    );
});
