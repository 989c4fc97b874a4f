//! Running an independent tool against a simulated host: `mdevctl` in a private mount
//! namespace, with the simulator's `sys` on `/sys` and a private store on `/etc/mdevctl.d`
//! (as `mdevctl(8)` documents its store). Needs root, `unshare` and `mdevctl`.

use std::io;
use std::path::Path;
use std::process::{Command, Output};

/// Why `mdevctl` cannot be run here (not root, a tool missing), or `None` when it can.
pub fn mdevctl_unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("mount namespaces need root".into());
    }
    let missing = ["unshare", "mdevctl"].into_iter().find(|tool| {
        !["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
            .iter()
            .any(|dir| Path::new(dir).join(tool).exists())
    });
    missing.map(|tool| format!("{tool} is missing (apt-get install mdevctl util-linux)"))
}

/// Makes `store` a directory mdevctl 1.2 accepts as `/etc/mdevctl.d` (it refuses to run
/// without `scripts.d/callouts` and `scripts.d/notifiers`).
pub fn prepare_mdevctl_store(store: &Path) -> io::Result<()> {
    std::fs::create_dir_all(store.join("scripts.d/callouts"))?;
    std::fs::create_dir_all(store.join("scripts.d/notifiers"))
}

/// Runs `mdevctl ARGS` with `store` on `/etc/mdevctl.d` and, when given, the simulated
/// host's `sys` (under `root`) on `/sys`, in a private mount namespace.
pub fn mdevctl(root: Option<&Path>, store: &Path, args: &[&str]) -> io::Result<Output> {
    let mut command = Command::new("unshare");
    command.args(["-m", "--propagation", "private", "sh", "-c"]);
    match root {
        Some(root) => {
            let script = "mount --bind \"$1/sys\" /sys && mount --bind \"$2\" /etc/mdevctl.d \
                          && shift 2 && exec mdevctl \"$@\"";
            command.args([script, "sh"]).arg(root).arg(store);
        }
        None => {
            let script = "mount --bind \"$1\" /etc/mdevctl.d && shift && exec mdevctl \"$@\"";
            command.args([script, "sh"]).arg(store);
        }
    }
    command.args(args).output()
}

/// For tests: fails the test when mdevctl cannot run here, naming what is missing
/// ([`mdevctl_unavailable`] says why) and how to install it. A test that cannot run is a
/// failure, not a pass, whether or not `CI` is set.
///
/// # Panics
/// When mdevctl cannot run here.
pub fn mdevctl_for_test() {
    if let Some(reason) = mdevctl_unavailable() {
        panic!(
            "mdevctl interop tests need root, unshare and mdevctl: \
             apt-get install mdevctl util-linux, run as root: {reason}"
        );
    }
}
