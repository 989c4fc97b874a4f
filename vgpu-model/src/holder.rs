//! Who holds a vGPU: a domain, and the tenant its metadata names. One type, [`Holder`], says
//! it for the tenant policy, the usage ledger, the hook's records, telemetry and the owners
//! report. A domain without a tenant has `tenant: None`.

use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

/// A domain that holds vGPUs: its name, its UUID and its tenant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Holder {
    /// The domain's name.
    pub domain: String,
    /// The domain's UUID. Ledger intervals written before this type named it `domain_uuid`.
    #[serde(alias = "domain_uuid")]
    pub uuid: Uuid,
    /// The tenant its metadata names; `None` for a domain without one.
    #[serde(default, deserialize_with = "optional_tenant")]
    pub tenant: Option<Tenant>,
}

impl Holder {
    /// The tenant's name; `None` for a domain without one.
    pub fn tenant_name(&self) -> Option<&str> {
        tenant_name(self.tenant.as_ref())
    }
}

/// The name of `tenant`, where there is one.
pub fn tenant_name(tenant: Option<&Tenant>) -> Option<&str> {
    tenant.map(|t| t.name.as_str())
}

/// The tenant a domain's metadata names: `vgpu`'s own label, else the project of Nova's
/// instance metadata (`vgpu-domain`'s XML reader finds it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Tenant {
    /// The name usage is summed under and the policy names: the `tenant` attribute of
    /// `<vgpu:vgpu>`, else the name of Nova's `<nova:project>` (its id when the name is empty).
    pub name: String,
    /// Where the name was read.
    pub source: TenantSource,
    /// The Keystone id of Nova's project (the `uuid` attribute of `<nova:project>`), when the
    /// tenant is Nova's.
    pub project_id: Option<String>,
}

impl Tenant {
    /// A tenant named by `vgpu`'s own label.
    pub fn label(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            source: TenantSource::Vgpu,
            project_id: None,
        }
    }
}

/// Where a [`Tenant`] was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantSource {
    /// The `tenant` attribute of `vgpu`'s `<vgpu:vgpu>` metadata element.
    Vgpu,
    /// The project of Nova's `<nova:instance><nova:owner>`.
    Nova,
}

/// A tenant as files hold it: the object, or its name alone (hook records and ledger
/// intervals written before the source was kept).
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Name(String),
    Whole {
        name: String,
        source: TenantSource,
        #[serde(default)]
        project_id: Option<String>,
    },
}

impl Stored {
    /// The tenant; `None` for an empty name, which older files wrote for none.
    fn tenant(self) -> Option<Tenant> {
        let tenant = match self {
            Stored::Name(name) => Tenant::label(&name),
            Stored::Whole {
                name,
                source,
                project_id,
            } => Tenant {
                name,
                source,
                project_id,
            },
        };
        (!tenant.name.is_empty()).then_some(tenant)
    }
}

impl<'de> Deserialize<'de> for Tenant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Stored::deserialize(deserializer)?
            .tenant()
            .ok_or_else(|| serde::de::Error::custom("a tenant's name is empty"))
    }
}

/// Reads an optional tenant as files hold it: absent, `null`, `""` (none, as older files
/// wrote it), a name alone, or the whole object. For `#[serde(deserialize_with)]`.
pub fn optional_tenant<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Tenant>, D::Error> {
    Ok(Option::<Stored>::deserialize(deserializer)?.and_then(Stored::tenant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct File {
        #[serde(default, deserialize_with = "optional_tenant")]
        tenant: Option<Tenant>,
    }

    fn read(json: &str) -> Option<Tenant> {
        serde_json::from_str::<File>(json)
            .map(|f| f.tenant)
            .unwrap()
    }

    #[test]
    fn every_stored_form_reads() {
        let nova = Tenant {
            name: "acmecorp".into(),
            source: TenantSource::Nova,
            project_id: Some("d33b".into()),
        };
        assert_eq!(read("{}"), None);
        assert_eq!(read(r#"{"tenant":null}"#), None);
        assert_eq!(read(r#"{"tenant":""}"#), None);
        assert_eq!(read(r#"{"tenant":"acme"}"#), Some(Tenant::label("acme")));
        let whole = serde_json::to_string(&File2 {
            tenant: Some(nova.clone()),
        })
        .unwrap();
        assert_eq!(
            whole,
            r#"{"tenant":{"name":"acmecorp","source":"nova","project_id":"d33b"}}"#
        );
        assert_eq!(read(&whole), Some(nova));
        assert!(serde_json::from_str::<Tenant>(r#""""#).is_err());
        assert!(serde_json::from_str::<File>(r#"{"tenant":{"name":"a"}}"#).is_err());
    }

    #[derive(Serialize)]
    struct File2 {
        tenant: Option<Tenant>,
    }
}
