//! `vgpu-libvirt`: assigning vGPUs to libvirt domains, and knowing which domain holds which
//! vGPU, through libvirt's C library (`virt`). What is pure data, the domain XML, the
//! hostdevs and the owners report, is `vgpu-domain`'s; this crate asks libvirt.
//!
//! # Operations
//!
//! A domain has two configurations: the **live** one of the running guest, and the
//! **persistent** one it starts from next time. [`Connection::attach`] and
//! [`Connection::detach`] change either or both (`vgpu_domain::Scope`), through
//! `virDomainAttachDeviceFlags` and `virDomainDetachDeviceFlags` with
//! `VIR_DOMAIN_AFFECT_LIVE` and `VIR_DOMAIN_AFFECT_CONFIG`
//! (<https://libvirt.org/html/libvirt-libvirt-domain.html#virDomainAttachDeviceFlags>,
//! <https://libvirt.org/html/libvirt-libvirt-domain.html#virDomainDetachDeviceFlags>); libvirt
//! applies both or neither. libvirt itself refuses to start two guests with one device, but not
//! to name one device in two persistent definitions, so [`Connection::attach`] refuses a vGPU
//! that any other domain references ([`Error::HeldElsewhere`]).
//!
//! Detaching gives libvirt the element exactly as the domain's XML has it, so what another
//! tool added to it (an `<alias>`, a `<rom>`, a guest `<address>`) is matched and kept.
//!
//! [`Connection::owners`] reads every domain's live and persistent XML once and maps each vGPU
//! of a `vgpu_core::model::Inventory` to the domains that hold it (`vgpu_domain::Owners`).
//!
//! # Errors
//!
//! libvirt's refusals are returned as [`Error::Libvirt`] with the operation, the domain, the
//! device, and libvirt's own error number and message, verbatim
//! (<https://libvirt.org/html/libvirt-virterror.html>); [`Error::kind`] sorts them into the
//! categories of `vgpu_core::ErrorKind`. A domain's XML refused is [`Error::Domain`].
//!
//! # Drivers
//!
//! `vgpu_domain::DEFAULT_URI` is the system QEMU driver. `vgpu_domain::embedded_uri` names
//! libvirt's QEMU driver run inside this process with all its state under one directory
//! (<https://libvirt.org/drvqemu.html#embedded-driver>): no daemon, which is how this crate's
//! tests run. libvirt allows one embedded root per process, and the embedded driver needs an
//! event loop, so the first [`Connection::open`] runs libvirt's default one on a thread.
//!
//! # Example
//!
//! ```no_run
//! use vgpu_domain::{DEFAULT_URI, Hostdev, Scope};
//! use vgpu_libvirt::Connection;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let inventory = vgpu_core::discover(&vgpu_core::HostPaths::default())?;
//! let conn = Connection::open(DEFAULT_URI)?;
//! let id = "0000:41:00.4".parse()?;
//! let domain = conn.domain("vm1")?;
//! conn.attach("vm1", &Hostdev::for_vgpu(&inventory, id)?, Scope::default_for(domain.running))?;
//! for vgpu in conn.owners(&inventory)?.vgpus {
//!     let holders: Vec<&str> = vgpu.holders.iter().map(|h| h.holder.domain.as_str()).collect();
//!     println!("{} {}: {}", vgpu.id, vgpu.type_id, holders.join(", "));
//! }
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod connection;
mod error;

pub use connection::Connection;
pub use error::{Error, Result};
