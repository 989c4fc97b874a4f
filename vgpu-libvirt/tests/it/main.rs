//! `vgpu-libvirt`'s integration tests in one binary: each module was a test file of its own. One
//! binary links once, where 4 took 4 links.

#![allow(clippy::unwrap_used)] // a failed fixture step is a failed test

mod attach;
mod common;
mod discovered;
mod hostile_xml;
mod owners;
