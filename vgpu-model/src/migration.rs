//! NVIDIA's live-migration metadata and compatibility verdict, as plain data.
//!
//! On the source host, `nvmlVgpuInstanceGetMetadata` gives a running vGPU's metadata. On the
//! destination, `nvmlGetVgpuCompatibility` judges it against a physical GPU's metadata
//! (`nvmlDeviceGetVgpuMetadata`). The metadata travels between the hosts as a
//! [`MigrationMetadata`] document: JSON, with NVML's buffer in base64 (RFC 4648).
//!
//! [`judge`] is the one answer to "may this vGPU move onto that GPU": NVML's verdict, and the
//! facts that must match and can be read on both hosts.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::VgpuHandle;
use crate::nvml::Fact;
use crate::pci::PciAddress;

/// The `format` of a [`MigrationMetadata`] document this version writes and reads.
pub const FORMAT: &str = "vgpu-migration-metadata/1";

/// The metadata of a domain's vGPUs on the source host, for the destination to judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationMetadata {
    /// Always [`FORMAT`].
    pub format: String,
    /// One per vGPU.
    pub vgpus: Vec<VgpuMetadata>,
}

/// One running vGPU's metadata on the source host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VgpuMetadata {
    /// The vGPU as the domain XML names it: a mediated device's UUID, or a VF's address.
    pub vgpu: VgpuHandle,
    /// The physical GPU it runs on.
    pub gpu: PciAddress,
    /// The domain libvirt says holds it, where libvirt answered.
    pub domain: Option<Uuid>,
    /// NVML's vGPU instance id on the source.
    pub instance: u32,
    /// NVML's vGPU type id.
    pub type_id: u32,
    /// The type's name, where NVML gives it.
    pub type_name: Option<String>,
    /// Whether ECC is on on the source GPU, where NVML gives it.
    pub ecc: Option<bool>,
    /// The source's host driver version, from the metadata.
    pub host_driver: String,
    /// The guest driver version, once the guest driver has reported it.
    pub guest_driver: Option<String>,
    /// NVML's metadata buffer, whole (`nvmlVgpuMetadata_t` and its opaque section).
    #[serde(with = "base64_bytes")]
    pub nvml: Vec<u8>,
}

/// Serde for bytes as standard base64 text.
mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(|err| serde::de::Error::custom(format!("not base64: {err}")))
    }
}

/// How a VM may move, as `NVML_VGPU_VM_COMPATIBILITY_*` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Move {
    /// Powered off (`COLD`).
    Cold,
    /// Hibernated (`HIBERNATE`).
    Hibernate,
    /// Suspended to RAM (`SLEEP`).
    Sleep,
    /// Running (`LIVE`).
    Live,
}

/// What limits a move, as `NVML_VGPU_COMPATIBILITY_LIMIT_*` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// The host driver (`HOST_DRIVER`).
    HostDriver,
    /// The guest driver (`GUEST_DRIVER`).
    GuestDriver,
    /// The physical GPU (`GPU`).
    Gpu,
    /// Something else (`OTHER`).
    Other,
}

impl Limit {
    /// The limit in words.
    pub fn describe(self) -> &'static str {
        match self {
            Limit::HostDriver => "the host driver",
            Limit::GuestDriver => "the guest driver",
            Limit::Gpu => "the GPU",
            Limit::Other => "something else",
        }
    }
}

/// NVML's verdict on a vGPU and a GPU (`nvmlVgpuPgpuCompatibility_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compatibility {
    /// How the VM may move; empty when it may not.
    pub moves: Vec<Move>,
    /// What limits it.
    pub limits: Vec<Limit>,
}

impl Compatibility {
    /// The verdict of NVML's bit sets: `vm` of `NVML_VGPU_VM_COMPATIBILITY_*`, `limit` of
    /// `NVML_VGPU_COMPATIBILITY_LIMIT_*`. A limit bit NVML does not name is
    /// [`Limit::Other`].
    pub fn from_bits(vm: u32, limit: u32) -> Self {
        let moves = [
            (1, Move::Cold),
            (2, Move::Hibernate),
            (4, Move::Sleep),
            (8, Move::Live),
        ]
        .into_iter()
        .filter(|(bit, _)| vm & bit != 0)
        .map(|(_, m)| m)
        .collect();
        let mut limits: Vec<Limit> = [
            (1, Limit::HostDriver),
            (2, Limit::GuestDriver),
            (4, Limit::Gpu),
        ]
        .into_iter()
        .filter(|(bit, _)| limit & bit != 0)
        .map(|(_, l)| l)
        .collect();
        if limit & !0b111 != 0 {
            limits.push(Limit::Other);
        }
        Compatibility { moves, limits }
    }

    /// Whether the VM may move while running.
    pub fn live(&self) -> bool {
        self.moves.contains(&Move::Live)
    }
}

/// A fact on both hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Both<T> {
    /// On the source, as its metadata says.
    pub source: T,
    /// On this host.
    pub here: T,
}

/// What this host knows of itself for one vGPU it would take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Here {
    /// The vGPU it would become here.
    pub vgpu: VgpuHandle,
    /// The GPU it would run on.
    pub gpu: PciAddress,
    /// NVML's type id of the type it would have here.
    pub type_id: Option<u32>,
    /// Whether ECC is on on that GPU, where NVML gives it.
    pub ecc: Option<bool>,
    /// This host's driver version, where NVML gives it.
    pub host_driver: Option<String>,
    /// NVML's verdict on the source's metadata and that GPU.
    pub nvml: Fact<Compatibility>,
}

/// The judgement on one vGPU of an incoming domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationCheck {
    /// The vGPU as the source names it.
    pub from: VgpuHandle,
    /// The vGPU it would become here.
    pub to: VgpuHandle,
    /// The GPU it would run on here.
    pub gpu: PciAddress,
    /// NVML's type id on each host.
    pub type_id: Both<Option<u32>>,
    /// ECC on each host.
    pub ecc: Both<Option<bool>>,
    /// The host driver version on each host.
    pub host_driver: Both<Option<String>>,
    /// The guest driver version, where the guest reported it.
    pub guest_driver: Option<String>,
    /// NVML's verdict.
    pub nvml: Fact<Compatibility>,
    /// Why the vGPU cannot move here live; empty when it can.
    pub refusals: Vec<String>,
}

impl MigrationCheck {
    /// Whether the vGPU can move here live.
    pub fn accepted(&self) -> bool {
        self.refusals.is_empty()
    }
}

fn on_off(ecc: bool) -> &'static str {
    if ecc { "on" } else { "off" }
}

/// Whether the vGPU of `source` may move live onto what `here` describes.
///
/// It may when the vGPU type is the same on both hosts, ECC is the same where both are
/// known, and NVML's verdict includes a live move. A host driver that differs is reported,
/// not refused: NVML's verdict says whether the two drivers go together.
pub fn judge(source: &VgpuMetadata, here: Here) -> MigrationCheck {
    let mut refusals = Vec::new();
    if here.type_id != Some(source.type_id) {
        refusals.push(match here.type_id {
            Some(id) => format!(
                "the vGPU type is {} at the source and {id} here",
                source.type_id
            ),
            None => format!(
                "the vGPU type here has no NVML id; the source's is {}",
                source.type_id
            ),
        });
    }
    if let (Some(from), Some(to)) = (source.ecc, here.ecc)
        && from != to
    {
        refusals.push(format!(
            "ECC is {} at the source and {} here",
            on_off(from),
            on_off(to)
        ));
    }
    match &here.nvml {
        Fact::Value(verdict) if verdict.live() => {}
        Fact::Value(verdict) => {
            let limits: Vec<&str> = verdict.limits.iter().map(|l| l.describe()).collect();
            refusals.push(match limits.is_empty() {
                true => "NVML does not allow a live move, and names no limit".to_owned(),
                false => format!(
                    "NVML does not allow a live move: limited by {}",
                    limits.join(" and ")
                ),
            });
        }
        Fact::Unavailable(why) => {
            refusals.push(format!("NVML cannot judge it: {}", why.reason));
        }
    }
    MigrationCheck {
        from: source.vgpu,
        to: here.vgpu,
        gpu: here.gpu,
        type_id: Both {
            source: Some(source.type_id),
            here: here.type_id,
        },
        ecc: Both {
            source: source.ecc,
            here: here.ecc,
        },
        host_driver: Both {
            source: Some(source.host_driver.clone()),
            here: here.host_driver,
        },
        guest_driver: source.guest_driver.clone(),
        nvml: here.nvml,
        refusals,
    }
}

/// What one device of an incoming domain's XML becomes on this host: what `migrate begin`
/// chooses, and what the destination's NVML verdict is asked of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Arrival {
    /// As the source named it.
    pub from: VgpuHandle,
    /// As this host names it.
    pub to: VgpuHandle,
    /// The GPU it is on.
    pub gpu: PciAddress,
    /// Its type's id here.
    pub type_id: String,
    /// Its type's name, where the GPU gives one.
    pub type_name: Option<String>,
    /// Where the type came from, in words.
    pub type_from: String,
    /// Made by an earlier run for the same domain, and reused.
    pub reused: bool,
}

impl Arrival {
    /// Whether the XML must name it differently.
    pub fn rewritten(&self) -> bool {
        self.from != self.to
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::{Cause, Unavailable};

    fn source() -> VgpuMetadata {
        VgpuMetadata {
            vgpu: "0000:5e:00.4".parse().expect("address"),
            gpu: "0000:5e:00.0".parse().expect("address"),
            domain: None,
            instance: 2,
            type_id: 1153,
            type_name: Some("NVIDIA L40S-12Q".to_owned()),
            ecc: Some(false),
            host_driver: "550.90.05".to_owned(),
            guest_driver: None,
            nvml: vec![1, 2, 3, 255],
        }
    }

    fn here(nvml: Fact<Compatibility>) -> Here {
        Here {
            vgpu: "0000:5e:00.5".parse().expect("address"),
            gpu: "0000:5e:00.0".parse().expect("address"),
            type_id: Some(1153),
            ecc: Some(false),
            host_driver: Some("550.127.05".to_owned()),
            nvml,
        }
    }

    #[test]
    fn bits_name_moves_and_limits_and_unknown_limit_bits_are_other() {
        assert_eq!(
            Compatibility::from_bits(9, 0x8000_0005),
            Compatibility {
                moves: vec![Move::Cold, Move::Live],
                limits: vec![Limit::HostDriver, Limit::Gpu, Limit::Other],
            }
        );
    }

    #[test]
    fn live_verdict_with_matching_type_and_ecc_is_accepted_and_reports_both_drivers() {
        let verdict = Compatibility::from_bits(9, 0);
        assert_eq!(
            judge(&source(), here(Fact::Value(verdict.clone()))),
            MigrationCheck {
                from: source().vgpu,
                to: "0000:5e:00.5".parse().expect("address"),
                gpu: "0000:5e:00.0".parse().expect("address"),
                type_id: Both {
                    source: Some(1153),
                    here: Some(1153)
                },
                ecc: Both {
                    source: Some(false),
                    here: Some(false)
                },
                host_driver: Both {
                    source: Some("550.90.05".to_owned()),
                    here: Some("550.127.05".to_owned())
                },
                guest_driver: None,
                nvml: Fact::Value(verdict),
                refusals: Vec::new(),
            }
        );
    }

    #[test]
    fn unknown_ecc_on_either_side_is_no_refusal() {
        for (from, to) in [(None, Some(true)), (Some(false), None), (None, None)] {
            let mut s = source();
            s.ecc = from;
            let mut h = here(Fact::Value(Compatibility::from_bits(8, 0)));
            h.ecc = to;
            assert!(judge(&s, h).accepted(), "{from:?} {to:?}");
        }
    }

    #[test]
    fn every_refusal_is_named() {
        let mut h = here(Fact::Value(Compatibility::from_bits(0, 3)));
        h.type_id = Some(1154);
        h.ecc = Some(true);
        assert_eq!(
            judge(&source(), h).refusals,
            [
                "the vGPU type is 1153 at the source and 1154 here",
                "ECC is off at the source and on here",
                "NVML does not allow a live move: limited by the host driver and the guest driver",
            ]
        );
        let unknown = Fact::Unavailable(Unavailable {
            cause: Cause::NotLoaded,
            reason: "NVML is not loaded: no driver".to_owned(),
        });
        assert_eq!(
            judge(&source(), here(unknown)).refusals,
            ["NVML cannot judge it: NVML is not loaded: no driver"]
        );
        let mut untyped = here(Fact::Value(Compatibility::from_bits(1, 0)));
        untyped.type_id = None;
        assert_eq!(
            judge(&source(), untyped).refusals,
            [
                "the vGPU type here has no NVML id; the source's is 1153",
                "NVML does not allow a live move, and names no limit",
            ]
        );
    }

    #[test]
    fn document_round_trips_with_the_buffer_in_base64() {
        let doc = MigrationMetadata {
            format: FORMAT.to_owned(),
            vgpus: vec![source()],
        };
        let text = serde_json::to_string(&doc).expect("serialises");
        assert!(text.contains(r#""nvml":"AQID/w==""#), "{text}");
        assert_eq!(
            serde_json::from_str::<MigrationMetadata>(&text).expect("parses"),
            doc
        );
        let bad = text.replace("AQID/w==", "not base64!");
        let err = serde_json::from_str::<MigrationMetadata>(&bad).expect_err("refused");
        assert!(err.to_string().starts_with("not base64: "), "{err}");
    }
}
