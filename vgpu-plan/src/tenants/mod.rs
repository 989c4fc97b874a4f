//! Tenant policy: which tenants may share a physical GPU, and how much of the host each may
//! hold. The policy file is `etc/vgpu/tenants.toml` under the state root:
//!
//! ```toml
//! [tenant.acme]
//! isolation = "exclusive"   # "shared" (default), "exclusive" or "hardware"
//! spread = true             # no two of acme's vGPUs on one physical GPU
//! max_vgpus = 8             # quota over the whole host
//! max_framebuffer = "96GiB"
//!
//! [tenant.globex]
//! apart_from = ["acme"]     # never on a physical GPU that holds acme's vGPUs (both ways)
//! qos = "guaranteed"        # "best-effort" (default), "bounded", "guaranteed", "dedicated"
//! ```
//!
//! [`Policy::parse`] reads it; unknown keys, an unknown tenant in `apart_from`, a bad size and
//! an unknown isolation or QoS class are errors naming the line and column. [`check`] is the one
//! answer to whether vGPUs may be handed out under it.

mod check;
mod qos;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Spanned;

pub use check::{Holding, Violation, audit, check, named};
pub use qos::{equal_size_mode, service, serving};

pub use crate::model::policy::{Qos, Service};

use crate::desired::{Location, error_at, parse_framebuffer};
use crate::error::Result;

/// The key of the policy file's table for domains without a tenant: `[tenant.""]`.
const NO_TENANT: &str = "";

/// How far a tenant is kept from other tenants on a physical GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// Any GPU, beside any tenant.
    #[default]
    Shared,
    /// No other tenant's vGPU on a GPU that holds this tenant's.
    Exclusive,
    /// Only devices whose memory and compute are partitioned in hardware (MIG-backed vGPUs,
    /// plain VFs, whole GPUs) beside other tenants; a time-sliced vGPU only on a GPU no other
    /// tenant uses.
    Hardware,
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isolation::Shared => "shared",
            Isolation::Exclusive => "exclusive",
            Isolation::Hardware => "hardware",
        })
    }
}

/// One tenant's policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TenantPolicy {
    /// How far the tenant is kept from others.
    pub isolation: Isolation,
    /// No two of the tenant's vGPUs on one physical GPU.
    pub spread: bool,
    /// At most this many vGPUs on the host.
    pub max_vgpus: Option<u32>,
    /// At most this much frame buffer on the host, in MiB.
    pub max_framebuffer_mib: Option<u64>,
    /// Tenants never on a physical GPU that holds this tenant's vGPUs, nor this tenant on theirs.
    pub apart_from: BTreeSet<String>,
    /// What the GPU must be when one of the tenant's vGPUs is handed out there.
    pub qos: Qos,
}

/// The tenant policy of a host: one [`TenantPolicy`] per tenant named. A tenant the file does
/// not name is [`TenantPolicy::default`]: shared, no quota. A domain without a tenant is the
/// tenant `""`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Policy {
    /// The file read, when there was one.
    pub path: Option<PathBuf>,
    /// The tenants the file names.
    pub tenants: BTreeMap<String, TenantPolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tenant: BTreeMap<String, RawTenant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    isolation: Option<Spanned<String>>,
    #[serde(default)]
    spread: bool,
    max_vgpus: Option<u32>,
    max_framebuffer: Option<Spanned<String>>,
    #[serde(default)]
    apart_from: Vec<Spanned<String>>,
    qos: Option<Spanned<String>>,
}

impl Policy {
    /// Parses `tenants.toml` text read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Policy> {
        let at = |span: Range<usize>| Location::of_offset(text, span.start);
        let raw: RawFile = toml::from_str(text).map_err(|err| {
            let location = err.span().map_or(Location { line: 1, column: 1 }, at);
            error_at(path, location, err.message().trim_end().to_owned())
        })?;
        let mut tenants = BTreeMap::new();
        for (name, raw_tenant) in &raw.tenant {
            let isolation = match &raw_tenant.isolation {
                None => Isolation::Shared,
                Some(value) => match value.get_ref().as_str() {
                    "shared" => Isolation::Shared,
                    "exclusive" => Isolation::Exclusive,
                    "hardware" => Isolation::Hardware,
                    other => {
                        return Err(error_at(
                            path,
                            at(value.span()),
                            format!(
                                "unknown isolation {other:?} of tenant {name:?}: expected \
                                 \"shared\", \"exclusive\" or \"hardware\""
                            ),
                        ));
                    }
                },
            };
            let qos = match &raw_tenant.qos {
                None => Qos::default(),
                Some(value) => value.get_ref().parse().map_err(|()| {
                    error_at(
                        path,
                        at(value.span()),
                        format!(
                            "unknown qos {:?} of tenant {name:?}: expected \"best-effort\", \
                             \"bounded\", \"guaranteed\" or \"dedicated\"",
                            value.get_ref()
                        ),
                    )
                })?,
            };
            let max_framebuffer_mib = match &raw_tenant.max_framebuffer {
                None => None,
                Some(value) => Some(parse_framebuffer(value.get_ref()).map_err(|_| {
                    error_at(
                        path,
                        at(value.span()),
                        format!(
                            "max_framebuffer {:?} of tenant {name:?} is not a size: expected \
                             a size such as \"96GiB\" or \"512MiB\"",
                            value.get_ref()
                        ),
                    )
                })?),
            };
            let mut apart_from = BTreeSet::new();
            for other in &raw_tenant.apart_from {
                let other_name = other.get_ref();
                if !raw.tenant.contains_key(other_name) {
                    return Err(error_at(
                        path,
                        at(other.span()),
                        format!(
                            "tenant {name:?} is apart from {other_name:?}, which this file does \
                             not name: expected one of its [tenant.NAME] tables"
                        ),
                    ));
                }
                if other_name == name {
                    return Err(error_at(
                        path,
                        at(other.span()),
                        format!("tenant {name:?} cannot be apart from itself"),
                    ));
                }
                apart_from.insert(other_name.clone());
            }
            tenants.insert(
                name.clone(),
                TenantPolicy {
                    isolation,
                    spread: raw_tenant.spread,
                    max_vgpus: raw_tenant.max_vgpus,
                    max_framebuffer_mib,
                    apart_from,
                    qos,
                },
            );
        }
        Ok(Policy {
            path: Some(path.to_path_buf()),
            tenants,
        })
    }

    /// The policy of `tenant`: its table, or the default (shared, no quota). `None` is the
    /// domains without a tenant, whose table the file names `[tenant.""]`.
    pub fn of(&self, tenant: Option<&str>) -> TenantPolicy {
        let key = tenant.unwrap_or(NO_TENANT);
        self.tenants.get(key).cloned().unwrap_or_default()
    }

    /// The tenants the file gives a table, by name; `None` for `[tenant.""]`.
    pub fn named_tenants(&self) -> impl Iterator<Item = Option<&str>> {
        self.tenants
            .keys()
            .map(|name| Some(name.as_str()).filter(|name| *name != NO_TENANT))
    }

    /// Whether either tenant's `apart_from` names the other.
    pub fn apart(&self, a: &str, b: &str) -> bool {
        let names = |x: &str, y: &str| {
            self.tenants
                .get(x)
                .is_some_and(|policy| policy.apart_from.contains(y))
        };
        names(a, b) || names(b, a)
    }
}
