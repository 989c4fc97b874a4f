//! NVIDIA's kernel-module parameters as `/proc/driver/nvidia/params` shows them (one
//! `Name: value` line each), and the registry keys set through them: `RegistryDwords` for
//! every GPU, `RegistryDwordsPerDevice` per GPU (`pci=DDDD:BB:DD.F;Key=Value;...`), as the
//! driver's README ("Configuring the NVIDIA kernel module") describes. The one key read is
//! `RMDisableScrubOnFree`: set to a non-zero value, the driver does not clear a vGPU's frame
//! buffer when the vGPU is freed.

use crate::pci::PciAddress;

/// The registry key that turns frame-buffer scrubbing on free off.
pub const SCRUB_KEY: &str = "RMDisableScrubOnFree";

/// The registry settings of `/proc/driver/nvidia/params`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    /// `RegistryDwords`: (key, value) for every GPU, in order.
    pub global: Vec<(String, u32)>,
    /// `RegistryDwordsPerDevice`: (GPU, key, value), in order.
    pub per_device: Vec<(PciAddress, String, u32)>,
}

/// Where a registry value was set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `RegistryDwords`: every GPU.
    Global,
    /// `RegistryDwordsPerDevice`: this GPU.
    Device,
}

impl Registry {
    /// The value of `key` for `gpu`: its `RegistryDwordsPerDevice` setting, else its
    /// `RegistryDwords` one (the last of each, as the driver reads them in order).
    pub fn value(&self, key: &str, gpu: PciAddress) -> Option<(u32, Scope)> {
        let device = self
            .per_device
            .iter()
            .rev()
            .find(|(at, k, _)| *at == gpu && k.eq_ignore_ascii_case(key))
            .map(|(_, _, v)| (*v, Scope::Device));
        device.or_else(|| {
            self.global
                .iter()
                .rev()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| (*v, Scope::Global))
        })
    }

    /// Whether `gpu`'s frame buffer is left uncleared when a vGPU is freed
    /// (`RMDisableScrubOnFree` non-zero), and where that was set; `(false, None)` for the
    /// driver's default, scrubbing.
    pub fn scrub_disabled(&self, gpu: PciAddress) -> (bool, Option<Scope>) {
        match self.value(SCRUB_KEY, gpu) {
            Some((value, scope)) => (value != 0, Some(scope)),
            None => (false, None),
        }
    }
}

/// The value of the `name` line of a params text, unquoted.
fn line<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == name).then(|| value.trim().trim_matches('"'))
    })
}

/// A registry value: decimal or `0x` hex.
fn number(text: &str) -> Option<u32> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// The registry settings of a `/proc/driver/nvidia/params` text. A setting that is not
/// `Key=number` is left out, as is a per-device one before any `pci=` or under a `pci=` that
/// is not a PCI address: the driver ignores them too.
pub fn parse_registry(text: &str) -> Registry {
    let pairs = |value: &str| -> Vec<(String, String)> {
        value
            .split(';')
            .filter_map(|item| {
                let (key, value) = item.split_once('=')?;
                Some((key.trim().to_owned(), value.trim().to_owned()))
            })
            .collect()
    };
    let global = line(text, "RegistryDwords")
        .map(pairs)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| Some((k, number(&v)?)))
        .collect();
    let mut per_device = Vec::new();
    let mut device: Option<PciAddress> = None;
    for (key, value) in line(text, "RegistryDwordsPerDevice")
        .map(pairs)
        .unwrap_or_default()
    {
        if key.eq_ignore_ascii_case("pci") {
            device = value.parse().ok();
            continue;
        }
        if let (Some(gpu), Some(value)) = (device, number(&value)) {
            per_device.push((gpu, key, value));
        }
    }
    Registry { global, per_device }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The start of a 550-series host's `/proc/driver/nvidia/params`.
    const DEFAULTS: &str = "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\n\
        DeviceFileUID: 0\nRegistryDwords: \"\"\nRegistryDwordsPerDevice: \"\"\nRmMsg: \"\"\n";

    fn gpu(text: &str) -> PciAddress {
        text.parse().unwrap()
    }

    #[test]
    fn parse_registry_defaults_scrub_on() {
        let registry = parse_registry(DEFAULTS);

        assert_eq!(registry.scrub_disabled(gpu("0000:41:00.0")), (false, None));
    }

    #[test]
    fn parse_registry_global_key_turns_scrub_off_everywhere() {
        let text = DEFAULTS.replace(
            "RegistryDwords: \"\"",
            "RegistryDwords: \"RmPVMRL=0x30;RMDisableScrubOnFree=1\"",
        );

        let registry = parse_registry(&text);

        assert_eq!(
            registry.scrub_disabled(gpu("0000:41:00.0")),
            (true, Some(Scope::Global))
        );
    }

    #[test]
    fn parse_registry_per_device_key_is_that_gpu_only() {
        let text = DEFAULTS.replace(
            "RegistryDwordsPerDevice: \"\"",
            "RegistryDwordsPerDevice: \"pci=0000:41:00.0;RMDisableScrubOnFree=1;\
             pci=0000:5e:00.0;RmPVMRL=0x20\"",
        );

        let registry = parse_registry(&text);

        assert_eq!(
            (
                registry.scrub_disabled(gpu("0000:41:00.0")),
                registry.scrub_disabled(gpu("0000:5e:00.0"))
            ),
            ((true, Some(Scope::Device)), (false, None))
        );
    }

    #[test]
    fn parse_registry_per_device_zero_overrides_global() {
        let text = DEFAULTS
            .replace(
                "RegistryDwords: \"\"",
                "RegistryDwords: \"RMDisableScrubOnFree=1\"",
            )
            .replace(
                "RegistryDwordsPerDevice: \"\"",
                "RegistryDwordsPerDevice: \"pci=0000:41:00.0;RMDisableScrubOnFree=0\"",
            );

        let registry = parse_registry(&text);

        assert_eq!(
            registry.scrub_disabled(gpu("0000:41:00.0")),
            (false, Some(Scope::Device))
        );
    }

    #[test]
    fn parse_registry_setting_before_any_pci_is_ignored() {
        let text = DEFAULTS.replace(
            "RegistryDwordsPerDevice: \"\"",
            "RegistryDwordsPerDevice: \"RMDisableScrubOnFree=1;pci=bogus;RMDisableScrubOnFree=1\"",
        );

        assert_eq!(parse_registry(&text), Registry::default());
    }
}
