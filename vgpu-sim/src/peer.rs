//! Running an independent tool against a simulated host: `mdevctl` in a private mount
//! namespace, with the simulator's `sys` on `/sys` and a private store on `/etc/mdevctl.d`
//! (`shared/REFERENCE.md` §7). Needs root, `unshare` and `mdevctl`.

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

/// For tests: whether mdevctl can run here. When it cannot, prints why and returns false (the
/// test returns early), or panics when `CI` is set, since CI must run every interop test.
///
/// # Panics
/// When mdevctl cannot run and `CI` is set.
pub fn mdevctl_for_test() -> bool {
    let Some(reason) = mdevctl_unavailable() else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "mdevctl tests must run in CI: {reason}"
    );
    #[allow(clippy::print_stderr)]
    {
        eprintln!("skipped: {reason}");
    }
    false
}
