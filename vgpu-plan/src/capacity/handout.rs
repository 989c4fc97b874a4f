//! Whether a vGPU may be given to a domain: only when it is of the type the domain asked for.
//!
//! The libvirt hook and `attach` both hand out vGPUs that exist already: one an earlier run
//! made, another domain's, one a definition describes. [`check_handout`] is the one check both
//! make before a domain gets one.

use crate::error::{Error, Result};
use crate::model::PLAIN_VF_TYPE;
use crate::model::{Gpu, VgpuHandle};
use crate::parse::name_matches;

/// Fails with [`Error::WrongType`] unless the vGPU `id` on `gpu`, of type `type_id`, is what
/// `wanted` names: the same id, or a name of that type on `gpu` (with or without its vendor
/// prefix, as `create` resolves names). Both types are named in the error.
pub fn check_handout(gpu: &Gpu, id: VgpuHandle, type_id: &str, wanted: &str) -> Result<()> {
    let name = gpu
        .types
        .iter()
        .find(|t| t.id == type_id)
        .and_then(|t| t.name.as_deref());
    let same = type_id == wanted
        || name.is_some_and(|n| name_matches(n, wanted))
        || (type_id == PLAIN_VF_TYPE && wanted == PLAIN_VF_TYPE);
    if same {
        return Ok(());
    }
    Err(Error::WrongType {
        device: id.to_string(),
        has: match name {
            Some(name) => format!("{name} ({type_id})"),
            None => type_id.to_owned(),
        },
        wanted: wanted.to_owned(),
    })
}
