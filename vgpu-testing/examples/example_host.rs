//! Lays out a kernel-shaped example host tree under a directory, for trying `vgpuctl` without
//! hardware or FUSE:
//!
//! ```text
//! cargo run -p vgpu-testing --example example_host -- /tmp/host [every-interface|large]
//! vgpuctl --root /tmp/host list
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

use vgpu_testing::{FakeHost, scenarios};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: example_host DIR [every-interface|large]");
        return ExitCode::from(2);
    };
    let kind = args
        .next()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_else(|| "every-interface".to_owned());
    let built = FakeHost::at(&dir).and_then(|host| match kind.as_str() {
        "every-interface" => scenarios::every_interface(&host),
        "large" => scenarios::large(
            &host,
            &scenarios::Large {
                gpus: 8,
                vfs: 32,
                types: 20,
            },
        ),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("unknown host {other:?}"),
        )),
    });
    match built {
        Ok(()) => {
            println!("{kind} host laid out under {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("example_host: {}: {err}", dir.display());
            ExitCode::from(1)
        }
    }
}
