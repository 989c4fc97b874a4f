//! One cluster's configuration from each node's: a merge patch replaces
//! `permittedHostDevices`' lists whole, so a patch made from one node would erase the others'
//! entries.
//!
//! The union keeps each entry once, by resource name and selector. With KubeVirt's own device
//! plugin a PCI id that would be two resources is refused ([`check_conflicts`]): its PCI plugin
//! counts every function of one `vendor:device` as one resource. `allocatable` stays this
//! node's.

use super::objects::PciHostDevice;
use super::{Error, NodeConfig, Provider, names};

/// The first PCI id among `entries` that is two resources, as an error naming both with their
/// nodes.
pub fn check_conflicts(entries: &[(&PciHostDevice, &str)]) -> Result<(), Error> {
    for (i, (first, first_node)) in entries.iter().enumerate() {
        if let Some((second, second_node)) = entries[i + 1..]
            .iter()
            .find(|(e, _)| e.selector == first.selector && e.resource != first.resource)
        {
            return Err(Error::Conflict {
                selector: first.selector.clone(),
                first: first.resource.clone(),
                first_node: (*first_node).to_owned(),
                second: second.resource.clone(),
                second_node: (*second_node).to_owned(),
            });
        }
    }
    Ok(())
}

/// `own` with the entries or objects of `others` added, each with where it was read from.
/// Fails on another provider, a name outside Kubernetes' grammar, or (KubeVirt's own plugin)
/// a conflict.
pub fn merge(
    mut own: NodeConfig,
    others: &[(std::path::PathBuf, NodeConfig)],
) -> Result<NodeConfig, Error> {
    for (path, other) in others {
        if other.provider != own.provider {
            return Err(Error::MergeFile {
                path: path.clone(),
                reason: format!(
                    "node {} was written for provider {}, this node for {}",
                    other.node, other.provider, own.provider
                ),
            });
        }
        own.warnings.extend(
            other
                .warnings
                .iter()
                .map(|w| format!("{}: {w}", other.node)),
        );
    }
    if own.provider == Provider::Harvester {
        let objects = own.harvester.get_or_insert_with(Vec::new);
        for (path, other) in others {
            let Some(theirs) = &other.harvester else {
                return Err(missing(path, "harvester"));
            };
            for object in theirs {
                if !objects
                    .iter()
                    .any(|o| o.metadata.name == object.metadata.name)
                {
                    objects.push(object.clone());
                }
            }
        }
        return Ok(own);
    }
    let node = own.node.clone();
    let Some(kubevirt) = own.kubevirt.as_mut() else {
        return Ok(own);
    };
    let permitted = &mut kubevirt.spec.configuration.permitted;
    let mut pci: Vec<(PciHostDevice, String)> = permitted
        .pci
        .iter()
        .map(|e| (e.clone(), node.clone()))
        .collect();
    for (path, other) in others {
        let Some(theirs) = &other.kubevirt else {
            return Err(missing(path, "kubevirt"));
        };
        let theirs = &theirs.spec.configuration.permitted;
        for entry in &theirs.mediated {
            names::check_resource_name(&entry.resource)?;
            permitted.mediated.push(entry.clone());
        }
        for entry in &theirs.pci {
            names::check_resource_name(&entry.resource)?;
            if !pci.iter().any(|(e, _)| e == entry) {
                pci.push((entry.clone(), other.node.clone()));
            }
        }
    }
    if own.provider == Provider::Kubevirt {
        let entries: Vec<(&PciHostDevice, &str)> =
            pci.iter().map(|(e, n)| (e, n.as_str())).collect();
        check_conflicts(&entries)?;
    }
    permitted.pci = pci.into_iter().map(|(e, _)| e).collect();
    permitted.sort();
    Ok(own)
}

fn missing(path: &std::path::Path, field: &str) -> Error {
    Error::MergeFile {
        path: path.to_path_buf(),
        reason: format!("it has no \"{field}\""),
    }
}
