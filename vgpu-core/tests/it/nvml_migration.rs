//! NVIDIA's migration calls through the production path (`vgpu-nvml-ext::migration`,
//! `Nvml::raw_vgpu_metadata`, `Nvml::compatibility`) against the test NVML: the source's
//! metadata, read whole, judged on a destination by the rule its data states.

#![cfg(feature = "nvml")] // the NVML path (a default feature)

use vgpu_core::model::migration::{Compatibility, Limit, Move};
use vgpu_core::model::nvml::{Cause, Fact, Unavailable};
use vgpu_core::nvml::{Nvml, RawVgpuMetadata};
use vgpu_testing::addr;
use vgpu_testing::fake_nvml::FakeNvml;

use crate::nvml::{ONE_VGPU, with_function};

/// The destination: the source's L40S with `driver`, and `rest` (a `[migration]` table or
/// `[functions]`) after it.
fn destination(driver: &str, rest: &str) -> FakeNvml {
    let data = ONE_VGPU.replace(
        "driver_version = \"550.90.05\"",
        &format!("driver_version = \"{driver}\""),
    );
    FakeNvml::new(&format!("{data}\n{rest}")).unwrap()
}

#[test]
fn source_metadata_is_read_whole_and_judged_by_the_destination_s_rule() {
    let source = FakeNvml::new(&ONE_VGPU.replace(
        "fb_usage_mib = 3072",
        "fb_usage_mib = 3072\nguest_driver = \"550.90.07\"",
    ))
    .unwrap();
    let raw = match Nvml::load_from(source.library()).raw_vgpu_metadata(7) {
        Fact::Value(raw) => raw,
        Fact::Unavailable(why) => panic!("{why:?}"),
    };
    assert_eq!(
        (
            raw.host_driver.as_str(),
            raw.guest_driver.as_deref(),
            raw.bytes.len(),
            RawVgpuMetadata::decode(raw.bytes.clone()).as_ref()
        ),
        ("550.90.05", Some("550.90.07"), 255, Some(&raw))
    );
    let gpu = addr("0000:41:00.0");
    let verdict = |fake: &FakeNvml| Nvml::load_from(fake.library()).compatibility(gpu, &raw.bytes);

    let taken = destination(
        "550.127.05",
        "[migration]\nhost_drivers = [\"550.90.05\"]\n",
    );
    assert_eq!(
        verdict(&taken),
        Fact::Value(Compatibility {
            moves: vec![Move::Cold, Move::Live],
            limits: Vec::new()
        })
    );
    let limited = destination(
        "550.127.05",
        "[migration]\nguest_drivers = [\"535.183.01\"]\n",
    );
    assert_eq!(
        verdict(&limited),
        Fact::Value(Compatibility {
            moves: Vec::new(),
            limits: vec![Limit::HostDriver, Limit::GuestDriver]
        })
    );
    let refusing = FakeNvml::new(&with_function(
        ONE_VGPU,
        "nvmlDeviceGetVgpuMetadata",
        "not-supported",
    ))
    .unwrap();
    assert_eq!(
        verdict(&refusing),
        Fact::Unavailable(Unavailable {
            cause: Cause::NotSupported,
            reason: "nvmlDeviceGetVgpuMetadata: not supported by this GPU or its mode \
                     (NVML_ERROR_NOT_SUPPORTED)"
                .to_owned()
        })
    );
    // Bytes that are not whole metadata never reach NVML.
    assert_eq!(
        Nvml::load_from(taken.library()).compatibility(gpu, &raw.bytes[..100]),
        Fact::Unavailable(Unavailable {
            cause: Cause::Error,
            reason: "nvmlGetVgpuCompatibility: a supplied argument was invalid".to_owned()
        })
    );
}

#[test]
fn metadata_of_no_running_vgpu_is_not_found() {
    let fake = FakeNvml::new(ONE_VGPU).unwrap();
    let read = Nvml::load_from(fake.library()).raw_vgpu_metadata(99);
    assert!(
        matches!(&read, Fact::Unavailable(why) if why.cause == Cause::NotFound
            && why.reason.starts_with("nvmlVgpuInstanceGetMetadata: ")),
        "{read:?}"
    );
}
