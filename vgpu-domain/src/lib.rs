//! `vgpu-domain`: libvirt domains as data. Which vGPUs a domain's XML assigns, the
//! `<hostdev>` element for a vGPU, who holds which vGPU, and the connection URIs. No libvirt:
//! `vgpu-libvirt` asks libvirt, and `vgpuctl` reads what `vgpuctl-libvirt` prints with this
//! crate alone.
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
//! **persistent** one it starts from next time. A [`Scope`] names either or both.
//!
//! Devices are identified by what the XML names, the mdev UUID or the PCI source address,
//! read from the parsed document (module [`xml`]), never by comparing text. Each hostdev
//! read keeps its element's text, so that a detach can give libvirt the element exactly as
//! the domain has it.
//!
//! [`Owners::build`] maps each vGPU of a `vgpu_model::Inventory` to the domains that hold it,
//! with the tenant each domain's metadata names ([`xml::Tenant`]: `vgpu`'s label or Nova's
//! project), listing orphans (held by none) and references to devices the host does not
//! have as vGPUs. [`Owners`] is also the JSON of `vgpuctl-libvirt owners --json`.
//!
//! The libvirt hook (`vgpuctl hook qemu`) reads the domain XML libvirt gives it on stdin with
//! [`xml::domain`]: its name, UUID, hostdevs, `vgpu`'s metadata element
//! ([`xml::METADATA_NAMESPACE`]) and Nova's flavor name.
//!
//! # Errors
//!
//! Domain XML is read as untrusted input, within the bounds described in [`xml`]; a refusal
//! is [`Error::Xml`]. [`Error::kind`] sorts errors into the categories of
//! `vgpu_model::ErrorKind`.
//!
//! # URIs
//!
//! [`DEFAULT_URI`] is the system QEMU driver. [`embedded_uri`] names libvirt's QEMU driver run
//! inside a process with all its state under one directory
//! (<https://libvirt.org/drvqemu.html#embedded-driver>).

#![forbid(unsafe_code)]

mod error;
mod hostdev;
mod owners;
mod uri;
pub mod xml;

pub use error::{Error, Result};
pub use hostdev::{Attached, GuestAddress, Hostdev, HostdevKind, Scope};
pub use owners::{Domain, DomainDevices, Hold, Holder, Owned, Owners, Reference};
pub use uri::{DEFAULT_URI, embedded_root, embedded_uri};
