//! `vgpu-sim`: mount a simulated host, list the profiles, or measure the simulator.
#![allow(clippy::print_stdout)] // printing is this binary's job

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use nix::sys::signal::{SigSet, Signal};
use vgpu_sim::{Profile, SimHost};

#[derive(Parser)]
#[command(
    version,
    about = "A simulated KVM host (sysfs, procfs, /dev/vfio) over FUSE"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount a profile on DIR in the foreground; unmount on SIGINT/SIGTERM.
    Mount {
        /// Built-in profile name or path to a profile TOML file.
        #[arg(long, short)]
        profile: String,
        /// Mount point (an existing, empty directory).
        dir: PathBuf,
    },
    /// List the built-in profiles.
    Profiles,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Profiles => {
            for name in Profile::names() {
                let p = Profile::builtin(name)?;
                println!("{name:<18} {}", p.description);
            }
            Ok(())
        }
        Cmd::Mount { profile, dir } => {
            let profile = vgpu_sim::profile::resolve(&profile)?;
            // Block the signals before the FUSE threads start so only sigwait sees them.
            let mut set = SigSet::empty();
            set.add(Signal::SIGINT);
            set.add(Signal::SIGTERM);
            set.thread_block().context("cannot block SIGINT/SIGTERM")?;
            let host = SimHost::mount_at(profile, &dir)
                .with_context(|| format!("cannot mount on {}", dir.display()))?;
            println!(
                "vgpu-sim: profile {} mounted on {} (Ctrl-C to unmount)",
                host.profile_name(),
                host.root().display()
            );
            let sig = set.wait().context("sigwait")?;
            println!("vgpu-sim: {sig}, unmounting");
            host.unmount().context("unmount")?;
            Ok(())
        }
    }
}
