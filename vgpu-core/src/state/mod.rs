//! What `vgpu` keeps on the host itself: persistent definitions ([`store`]), the host lock,
//! the audit log and the hook's records, each written with the durable file updates of
//! [`crate::host::durable`].

pub(crate) mod audit;
pub(crate) mod desired;
pub(crate) mod format;
pub(crate) mod hook;
pub(crate) mod lock;
pub(crate) mod store;

#[cfg(test)]
// A failed fixture step is a failed test.
#[allow(clippy::unwrap_used)]
mod tests;
