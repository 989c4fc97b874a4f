//! Resource names as NVIDIA's `kubevirt-gpu-device-plugin` makes them, and the Kubernetes
//! grammar every name is checked against before it is printed.
//!
//! | device | rule | example |
//! |---|---|---|
//! | mdev or vendor-VFIO profile | the vendor's domain, `/`, the type name with each run of whitespace as `_` | `GRID T4-2Q` to `nvidia.com/GRID_T4-2Q` |
//! | passthrough function | the vendor's domain, `/`, the pci.ids device name upper-cased, `/` and `.` as `_`, whitespace runs as `_`, other characters but `-` dropped | `GA104GL [RTX A4000]` to `nvidia.com/GA104GL_RTX_A4000` |
//!
//! Intel's and AMD's devices take the same rules under `intel.com` and `amd.com`.

use super::Error;

/// The domain of a PCI vendor's resource names: `nvidia.com`, `intel.com`, `amd.com`; `None`
/// for other vendors.
pub fn vendor_domain(vendor_id: u16) -> Option<&'static str> {
    match vendor_id {
        0x10de => Some("nvidia.com"),
        0x8086 => Some("intel.com"),
        0x1002 => Some("amd.com"),
        _ => None,
    }
}

/// The resource of an mdev or vendor-VFIO profile: `domain/NAME`, each run of whitespace in
/// `type_name` as one `_`.
pub fn profile_resource(domain: &str, type_name: &str) -> String {
    format!(
        "{domain}/{}",
        type_name.split_whitespace().collect::<Vec<_>>().join("_")
    )
}

/// The resource of a function passed through whole, from its pci.ids device name.
pub fn passthrough_resource(domain: &str, device_name: &str) -> String {
    let mut name = String::new();
    let mut space = false;
    for c in device_name.trim().chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        let kept = match c {
            '/' | '.' | '_' => Some('_'),
            '-' => Some('-'),
            c if c.is_ascii_alphanumeric() => Some(c.to_ascii_uppercase()),
            _ => None,
        };
        if let Some(kept) = kept {
            if space && !name.is_empty() {
                name.push('_');
            }
            space = false;
            name.push(kept);
        }
    }
    format!("{domain}/{name}")
}

/// Whether `name` is a Kubernetes extended resource name
/// (`k8s.io/apimachinery/pkg/util/validation` `IsQualifiedName`, as
/// `IsExtendedResourceName` in `k8s.io/kubernetes/pkg/apis/core/helper` uses it): a DNS-1123
/// subdomain outside `kubernetes.io`, `/`, and a name of at most 63 characters that starts and
/// ends with a letter or digit and holds only those, `-`, `_` and `.`. The name with
/// `requests.` before it must be a qualified name too (the quota's spelling).
pub fn check_resource_name(name: &str) -> Result<(), Error> {
    let bad = |why: &str| Error::BadResourceName {
        name: name.to_owned(),
        why: why.to_owned(),
    };
    let Some((prefix, local)) = name.split_once('/') else {
        return Err(bad("it has no domain prefix (`vendor.com/NAME`)"));
    };
    if prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io") {
        return Err(bad("the kubernetes.io domain is reserved"));
    }
    check_subdomain(prefix).map_err(|why| bad(&format!("its prefix {why}")))?;
    // `requests.<prefix>` is checked as a subdomain by the quota's rule.
    if prefix.len() + "requests.".len() > 253 {
        return Err(bad("its prefix is too long for `requests.` before it"));
    }
    if local.is_empty() || local.len() > 63 {
        return Err(bad("its name is empty or longer than 63 characters"));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge(local.chars().next()) || !edge(local.chars().last()) {
        return Err(bad("its name must start and end with a letter or digit"));
    }
    if let Some(c) = local
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(bad(&format!("its name holds {c:?}")));
    }
    Ok(())
}

/// Whether `text` is a DNS-1123 subdomain: at most 253 characters of lower-case letters,
/// digits, `-` and `.`, starting and ending with a letter or digit, no empty label. The reason
/// when it is not.
pub fn check_subdomain(text: &str) -> Result<(), String> {
    if text.is_empty() || text.len() > 253 {
        return Err("is empty or longer than 253 characters".to_owned());
    }
    for label in text.split('.') {
        let edge =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if !edge(label.chars().next()) || !edge(label.chars().last()) {
            return Err(format!(
                "is not a DNS-1123 subdomain ({text:?}: each label starts and ends with a \
                 lower-case letter or digit)"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        {
            return Err(format!(
                "is not a DNS-1123 subdomain ({text:?} holds {c:?})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_resource_of_a_grid_type_joins_words_with_underscores() {
        assert_eq!(
            profile_resource("nvidia.com", "GRID T4-2Q"),
            "nvidia.com/GRID_T4-2Q"
        );
    }

    #[test]
    fn profile_resource_of_an_ada_type_keeps_the_vendor_word() {
        assert_eq!(
            profile_resource("nvidia.com", "NVIDIA  L40S-12Q"),
            "nvidia.com/NVIDIA_L40S-12Q"
        );
    }

    #[test]
    fn passthrough_resource_of_a_bracketed_model_drops_brackets() {
        assert_eq!(
            passthrough_resource("nvidia.com", "GA104GL [RTX A4000]"),
            "nvidia.com/GA104GL_RTX_A4000"
        );
    }

    #[test]
    fn passthrough_resource_of_a_tesla_upper_cases() {
        assert_eq!(
            passthrough_resource("nvidia.com", "TU104GL [Tesla T4]"),
            "nvidia.com/TU104GL_TESLA_T4"
        );
    }

    #[test]
    fn passthrough_resource_with_slash_and_dot_makes_underscores() {
        assert_eq!(
            passthrough_resource("amd.com", "Navi 31 [Radeon Pro W7900/W7800 Rev. A]"),
            "amd.com/NAVI_31_RADEON_PRO_W7900_W7800_REV__A"
        );
    }

    #[test]
    fn check_resource_name_of_a_profile_accepts() {
        assert_eq!(check_resource_name("nvidia.com/NVIDIA_L40S-12Q"), Ok(()));
    }

    #[test]
    fn check_resource_name_with_a_space_refuses() {
        assert_eq!(
            check_resource_name("nvidia.com/GRID T4-2Q").map_err(|e| e.to_string()),
            Err(
                "resource name \"nvidia.com/GRID T4-2Q\" is not a Kubernetes extended resource \
                 name: its name holds ' '"
                    .to_owned()
            )
        );
    }

    #[test]
    fn check_resource_name_without_a_prefix_refuses() {
        assert_eq!(
            check_resource_name("GRID_T4-2Q").map_err(|e| e.to_string()),
            Err(
                "resource name \"GRID_T4-2Q\" is not a Kubernetes extended resource name: it \
                 has no domain prefix (`vendor.com/NAME`)"
                    .to_owned()
            )
        );
    }

    #[test]
    fn check_resource_name_in_kubernetes_io_refuses() {
        assert!(check_resource_name("kubernetes.io/gpu").is_err());
    }

    #[test]
    fn check_resource_name_ending_in_underscore_refuses() {
        assert!(check_resource_name("nvidia.com/A_").is_err());
    }

    #[test]
    fn check_resource_name_of_64_characters_refuses() {
        assert!(check_resource_name(&format!("nvidia.com/{}", "A".repeat(64))).is_err());
    }

    #[test]
    fn check_subdomain_with_upper_case_refuses() {
        assert!(check_subdomain("Node-A").is_err());
    }
}
