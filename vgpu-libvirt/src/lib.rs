//! libvirt binding for `vgpu`.
//!
//! This crate will hold everything that talks to libvirt through the `virt` crate: building
//! `<hostdev>` elements for mediated devices (`type='mdev'`) and SR-IOV virtual functions
//! (`type='pci'`, `managed='no'` for NVIDIA vendor-VFIO VFs), attaching and detaching them
//! with `attach_device_flags`/`detach_device_flags`, and the `qemu` hook entry point that
//! libvirt runs as `qemu <domain> <op> <subop> <extra>` with the domain XML on standard input.
//!
//! It is empty for now: discovery and lifecycle live in `vgpu-core`, which has no libvirt
//! dependency so that hosts without libvirt can still use it.
