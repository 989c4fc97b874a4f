//! `vgpu-libvirt`: assigning vGPUs to libvirt domains, and knowing which domain holds which
//! vGPU.
//!
//! # The model
//!
//! libvirt gives a guest a host device with a `<hostdev>` element in the domain's XML
//! ("Host device assignment", <https://libvirt.org/formatdomain.html#host-device-assignment>).
//! A vGPU made by `vgpu-core` is one of three kinds ([`HostdevKind`]):
//!
//! - a **mediated device**: `<hostdev mode='subsystem' type='mdev' model='vfio-pci'>` whose
//!   source is the mdev's UUID;
//! - a **VF holding an NVIDIA vendor-VFIO vGPU**: `<hostdev mode='subsystem' type='pci'
//!   managed='no'>` whose source is the VF's PCI address; the VF stays on NVIDIA's driver;
//! - a **plain SR-IOV VF**: the same with `managed='yes'`, so that libvirt binds the VF to
//!   `vfio-pci` while the guest runs.
//!
//! A domain has two configurations: the **live** one of the running guest, and the
//! **persistent** one it starts from next time. [`Connection::attach`] and
//! [`Connection::detach`] change either or both ([`Scope`]), through
//! `virDomainAttachDeviceFlags` and `virDomainDetachDeviceFlags` with
//! `VIR_DOMAIN_AFFECT_LIVE` and `VIR_DOMAIN_AFFECT_CONFIG`
//! (<https://libvirt.org/html/libvirt-libvirt-domain.html#virDomainAttachDeviceFlags>,
//! <https://libvirt.org/html/libvirt-libvirt-domain.html#virDomainDetachDeviceFlags>); libvirt
//! applies both or neither. libvirt itself refuses to start two guests with one device, but not
//! to name one device in two persistent definitions, so [`Connection::attach`] refuses a vGPU
//! that any other domain references ([`Error::HeldElsewhere`]).
//!
//! Devices are identified by what the XML names, the mdev UUID or the PCI source address,
//! read from the parsed document (module [`xml`]), never by comparing text. Detaching gives
//! libvirt the element exactly as the domain's XML has it, so what another tool added to it
//! (an `<alias>`, a `<rom>`, a guest `<address>`) is matched and kept.
//!
//! [`Connection::owners`] reads every domain's live and persistent XML once and maps each vGPU
//! of a `vgpu_core::Inventory` to the domains that hold it ([`Owners`]), with the tenant each
//! domain's metadata names ([`xml::Tenant`]: `vgpu`'s label or Nova's project), listing
//! orphans (held by none) and references to devices the host does not have as vGPUs.
//!
//! The libvirt hook (`vgpuctl hook qemu`) reads the domain XML libvirt gives it on stdin with
//! [`xml::domain`]: its name, UUID, hostdevs, `vgpu`'s metadata element
//! ([`xml::METADATA_NAMESPACE`]) and Nova's flavor name. The hook never calls libvirt.
//!
//! # Errors
//!
//! libvirt's refusals are returned as [`Error::Libvirt`] with the operation, the domain, the
//! device, and libvirt's own error number and message, verbatim
//! (<https://libvirt.org/html/libvirt-virterror.html>); [`Error::kind`] sorts them into the
//! categories of `vgpu_core::ErrorKind`. Domain XML is read as untrusted input, within the
//! bounds described in [`xml`].
//!
//! # Drivers
//!
//! [`DEFAULT_URI`] is the system QEMU driver. [`embedded_uri`] names libvirt's QEMU driver run
//! inside this process with all its state under one directory
//! (<https://libvirt.org/drvqemu.html#embedded-driver>): no daemon, which is how this crate's
//! tests run. libvirt allows one embedded root per process, and the embedded driver needs an
//! event loop, so the first [`Connection::open`] runs libvirt's default one on a thread.
//!
//! # Example
//!
//! ```no_run
//! use vgpu_libvirt::{Connection, DEFAULT_URI, Hostdev, Scope};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let inventory = vgpu_core::discover(&vgpu_core::HostPaths::default())?;
//! let conn = Connection::open(DEFAULT_URI)?;
//! let id = "0000:41:00.4".parse()?;
//! let domain = conn.domain("vm1")?;
//! conn.attach("vm1", &Hostdev::for_vgpu(&inventory, id)?, Scope::default_for(domain.running))?;
//! for vgpu in conn.owners(&inventory)?.vgpus {
//!     let holders: Vec<&str> = vgpu.holders.iter().map(|h| h.domain.as_str()).collect();
//!     println!("{} {}: {}", vgpu.id, vgpu.type_id, holders.join(", "));
//! }
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod connection;
mod error;
mod hostdev;
mod owners;
pub mod xml;

pub use connection::{Connection, DEFAULT_URI, embedded_uri};
pub use error::{Error, Result};
pub use hostdev::{Attached, GuestAddress, Hostdev, HostdevKind, Scope};
pub use owners::{Domain, Holder, Owned, Owners, Reference};
