//! A file of mdevctl's store (`etc/mdevctl.d/<parent>/<uuid>`) from any bytes: never panics,
//! and a definition that reads is written back as text that reads to the same definition,
//! and is written the same way again.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use uuid::Uuid;
use vgpu_core::fuzzing::{decode_mdev, encode_mdev};

const UUID: Uuid = Uuid::from_u128(0x6a8f_0a3c_1111_4d2e_9b7a_0000_0000_0001);
const PARENT: &str = "0000:41:00.0";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("etc/mdevctl.d/0000:41:00.0/6a8f0a3c-1111-4d2e-9b7a-000000000001");
    let Ok(def) = decode_mdev(path, UUID, PARENT, text) else {
        return;
    };
    let written = match encode_mdev(path, &def) {
        Ok(bytes) => bytes,
        Err(err) => panic!("{text:?} read as {def:?}, which cannot be written: {err}"),
    };
    let written = String::from_utf8(written).expect("serde_json writes UTF-8");
    match decode_mdev(path, UUID, PARENT, &written) {
        Ok(again) => assert_eq!(again, def, "{text:?} written as {written:?}"),
        Err(err) => panic!("{text:?} written as {written:?}, which does not read: {err}"),
    }
    assert_eq!(
        encode_mdev(path, &def).ok().map(String::from_utf8),
        Some(Ok(written))
    );
});
