//! A private cloud's node agent, in miniature: it embeds `vgpu-core`, `vgpu-domain` and `vgpu-libvirt`
//! to give a VM a vGPU and take it back.
//!
//! 1. discover the host's GPUs and pick one with room for the type asked;
//! 2. create the vGPU, with a definition so it comes back after a reboot;
//! 3. define a domain, attach the vGPU to its configuration and read the hostdev back;
//! 4. detach it, destroy it, remove the domain.
//!
//! Errors are told apart by [`ErrorKind`]: a GPU without room sends the agent to the next
//! GPU, anything else stops it with the message (which names the device, the path and the
//! errno, or libvirt's own message and code).
//!
//! ```sh
//! cargo run -p vgpu-libvirt --example orchestrator   # on the simulated `mixed` host,
//!                                                   # with libvirt's QEMU driver embedded
//! cargo run -p vgpu-libvirt --example orchestrator -- --root / --connect qemu:///system --type L40S-12Q
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::error::Error as StdError;
use std::path::PathBuf;

use vgpu_core::{
    ErrorKind, HostPaths, Manager, discover, manager::Created, manager::Placement,
    model::VgpuHandle, state::Start,
};
use vgpu_domain::{Hostdev, Scope};
use vgpu_libvirt::Connection;

/// What to do, from the command line.
struct Options {
    root: Option<PathBuf>,
    connect: Option<String>,
    type_name: String,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        root: None,
        connect: None,
        type_name: "T4-2Q".to_owned(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--root" => options.root = Some(PathBuf::from(value()?)),
            "--connect" => options.connect = Some(value()?),
            "--type" => options.type_name = value()?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// Creates a vGPU of `type_name` on the first GPU that has room; a GPU without room (or
/// without that type) is skipped, any other failure stops the search.
fn create_anywhere(
    manager: &Manager,
    paths: &HostPaths,
    type_name: &str,
) -> Result<Created, Box<dyn StdError>> {
    let inventory = discover(paths)?;
    for gpu in &inventory.gpus {
        match manager.create(gpu.address, type_name, None, Some(Start::Auto)) {
            Ok(created) => return Ok(created),
            Err(err) if matches!(err.kind(), ErrorKind::NoCapacity | ErrorKind::NotFound) => {
                println!("  {}: {}", gpu.address, err.chain());
            }
            Err(err) if err.kind() == ErrorKind::BadInput => {
                println!("  {}: skipped ({})", gpu.address, err.chain());
            }
            Err(err) => return Err(err.into()),
        }
    }
    Err(format!("no GPU on this host has room for a {type_name}").into())
}

const DOMAIN: &str = "tenant-42";

fn domain_xml() -> String {
    format!(
        "<domain type='kvm'><name>{DOMAIN}</name><memory unit='MiB'>64</memory>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os>\
         <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>"
    )
}

/// The whole life of one tenant's vGPU.
fn run(paths: &HostPaths, conn: &Connection, type_name: &str) -> Result<(), Box<dyn StdError>> {
    let manager = Manager::new(paths, "orchestrator example");
    println!("discover: looking for room for a {type_name}");
    let created = create_anywhere(&manager, paths, type_name)?;
    let place = match &created.placement {
        Placement::Mdev { parent, type_id } => format!("mediated device {type_id} on {parent}"),
        Placement::VendorVf { vf, type_id } => format!("NVIDIA type {type_id} on VF {vf}"),
        Placement::PlainVf { vf } => format!("VF {vf} on vfio-pci"),
    };
    println!("create: {} on GPU {}, {place}", created.id, created.gpu);

    let result = (|| -> Result<(), Box<dyn StdError>> {
        let domain = conn.define(&domain_xml())?;
        println!("define: domain {} ({})", domain.name, domain.uuid);
        let hostdev = Hostdev::for_vgpu(&discover(paths)?, created.id)?;
        let config = Scope {
            live: false,
            config: true,
        };
        conn.attach(&domain.name, &hostdev, config)?;
        println!("attach: {}", hostdev.to_xml());
        let held: Vec<VgpuHandle> = conn
            .hostdevs(&domain.name)?
            .iter()
            .filter(|a| a.config)
            .map(|a| a.device)
            .collect();
        if held != [created.id] {
            return Err(format!("{} holds {held:?}, not {}", domain.name, created.id).into());
        }
        println!("read back: {} holds {}", domain.name, created.id);
        conn.detach(&domain.name, created.id, config)?;
        println!("detach: {} released", created.id);
        conn.undefine(&domain.name)?;
        Ok(())
    })();
    // The vGPU goes whatever happened to the domain: a node agent leaves nothing behind.
    let destroyed = manager.destroy(created.id);
    result?;
    destroyed?;
    println!("destroy: {} and its definition are gone", created.id);
    Ok(())
}

fn main() -> std::process::ExitCode {
    let outcome = (|| -> Result<(), Box<dyn StdError>> {
        let options = options()?;
        // Without --root, a simulated host (vgpu-sim, over FUSE) and libvirt's QEMU driver
        // embedded in this process, all state in temporary directories.
        let scratch = tempfile::tempdir()?;
        let (paths, _sim) = match &options.root {
            Some(root) => (HostPaths::new(root), None),
            None => {
                let sim = vgpu_sim::SimHost::mount(vgpu_sim::Profile::builtin("mixed")?)?;
                let paths =
                    HostPaths::new(sim.root()).with_state_root(scratch.path().join("state"));
                (paths, Some(sim))
            }
        };
        let uri = options
            .connect
            .clone()
            .unwrap_or_else(|| vgpu_domain::embedded_uri(&scratch.path().join("libvirt")));
        println!("host: {}  libvirt: {uri}", paths.root().display());
        let conn = Connection::open(&uri)?;
        run(&paths, &conn, &options.type_name)
    })();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            let mut message = err.to_string();
            let mut source = err.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("orchestrator: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
