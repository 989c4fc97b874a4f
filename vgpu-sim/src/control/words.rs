//! The words of control lines checked: processes and their files, GPU-instance ids and
//! profiles, NVIDIA's registry lines and vGPU scheduler.

use super::{MAX_COMM_LEN, MAX_PID, MAX_REGISTRY_LEN, MAX_TARGET_LEN};

/// One of the two registry lines of NVIDIA's `/proc/driver/nvidia/params`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RegistryLine {
    /// `RegistryDwords`: `Key=Value;...` for every GPU.
    Dwords,
    /// `RegistryDwordsPerDevice`: `pci=DDDD:BB:DD.F;Key=Value;...`.
    PerDevice,
}

impl RegistryLine {
    /// The line's name, as the driver prints it.
    pub fn name(self) -> &'static str {
        match self {
            RegistryLine::Dwords => "RegistryDwords",
            RegistryLine::PerDevice => "RegistryDwordsPerDevice",
        }
    }
}

/// A vGPU scheduler policy of NVIDIA's driver (vGPU user guide, "Scheduling Policies").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SchedPolicy {
    /// Best effort, the driver's default.
    #[default]
    BestEffort,
    /// Equal share: 1/N of the GPU for each of N running vGPUs.
    EqualShare,
    /// Fixed share: 1/(the type's maximum count) for each vGPU.
    FixedShare,
}

impl SchedPolicy {
    /// The policy's name in control lines and the state file.
    pub fn name(self) -> &'static str {
        match self {
            SchedPolicy::BestEffort => "best-effort",
            SchedPolicy::EqualShare => "equal-share",
            SchedPolicy::FixedShare => "fixed-share",
        }
    }
}

/// The shortest time slice other than the driver's default (0), in nanoseconds: 1 ms.
pub const MIN_TIMESLICE_NS: u32 = 1_000_000;
/// The longest time slice, in nanoseconds: 30 ms.
pub const MAX_TIMESLICE_NS: u32 = 30_000_000;

/// `RegistryDwords` or `RegistryDwordsPerDevice`.
pub(super) fn parse_registry_line(text: &str) -> Result<RegistryLine, String> {
    match text {
        "RegistryDwords" => Ok(RegistryLine::Dwords),
        "RegistryDwordsPerDevice" => Ok(RegistryLine::PerDevice),
        _ => Err(format!(
            "bad registry line {text:?} (RegistryDwords or RegistryDwordsPerDevice)"
        )),
    }
}

/// A registry value as the driver's module parameter takes it: at most [`MAX_REGISTRY_LEN`]
/// bytes of printable ASCII without whitespace or quotes.
pub(super) fn check_registry_value(text: &str) -> Result<String, String> {
    let ok =
        text.len() <= MAX_REGISTRY_LEN && text.bytes().all(|b| b.is_ascii_graphic() && b != b'"');
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "bad registry value {text:?} (printable ASCII without quotes, at most \
             {MAX_REGISTRY_LEN} bytes)"
        ))
    }
}

/// A scheduler policy name.
pub(super) fn parse_policy(text: &str) -> Result<SchedPolicy, String> {
    [
        SchedPolicy::BestEffort,
        SchedPolicy::EqualShare,
        SchedPolicy::FixedShare,
    ]
    .into_iter()
    .find(|p| p.name() == text)
    .ok_or_else(|| {
        format!("bad scheduler policy {text:?} (best-effort, equal-share or fixed-share)")
    })
}

/// A time slice in nanoseconds: 0 (the driver's default) or [`MIN_TIMESLICE_NS`] to
/// [`MAX_TIMESLICE_NS`].
pub(super) fn parse_timeslice(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|ns| *ns == 0 || (MIN_TIMESLICE_NS..=MAX_TIMESLICE_NS).contains(ns))
        .ok_or_else(|| {
            format!("bad time slice {text:?} (0, or {MIN_TIMESLICE_NS} to {MAX_TIMESLICE_NS} ns)")
        })
}

/// One file held open by a simulated process: `hold <pid> <comm> <target>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The process (1 to [`MAX_PID`]).
    pub pid: u32,
    /// Its name, `proc/<pid>/comm` without the newline.
    pub comm: String,
    /// What `proc/<pid>/fd/<n>` points to, literally.
    pub target: String,
}

/// A GPU instance id, as NVML numbers them (0 to 63 covers every MIG GPU).
pub(super) fn parse_instance_id(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|id| *id < 64)
        .ok_or_else(|| format!("bad GPU instance id {text:?} (0 to 63)"))
}

/// A memory slice, where a GPU instance starts (0 to 63 covers every MIG GPU).
pub(super) fn parse_slice(text: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|n| *n < 64)
        .ok_or_else(|| format!("bad memory slice {text:?} (0 to 63)"))
}

/// A GPU-instance profile name as `nvidia-smi mig -lgip` prints it without `MIG `: `1g.18gb`,
/// `1g.18gb+me`.
pub(super) fn check_profile(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 32
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!("bad GPU-instance profile {text:?}"))
    }
}

impl Hold {
    /// A checked `hold`: the pid, name and target rules of the module doc.
    ///
    /// # Errors
    /// What is wrong, for [`SimError::Control`](crate::SimError::Control).
    pub fn new(pid: u32, comm: &str, target: &str) -> Result<Self, String> {
        check_pid(pid)?;
        check_comm(comm)?;
        check_target(target)?;
        Ok(Self {
            pid,
            comm: comm.to_owned(),
            target: target.to_owned(),
        })
    }
}

/// Whether `pid` is one Linux can give (1 to [`MAX_PID`]).
///
/// # Errors
/// What is wrong.
pub fn check_pid(pid: u32) -> Result<(), String> {
    if (1..=MAX_PID).contains(&pid) {
        Ok(())
    } else {
        Err(format!("pid {pid} is not 1 to {MAX_PID}"))
    }
}

pub(super) fn parse_pid(s: &str) -> Result<u32, String> {
    let pid = s
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| s.parse::<u32>().ok())
        .flatten()
        .ok_or_else(|| format!("bad pid {s:?} (1 to {MAX_PID})"))?;
    check_pid(pid)?;
    Ok(pid)
}

fn printable_word(s: &str) -> bool {
    !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Whether `comm` can be a process name here: 1 to [`MAX_COMM_LEN`] bytes, no whitespace or
/// control characters.
///
/// # Errors
/// What is wrong.
pub fn check_comm(comm: &str) -> Result<(), String> {
    if comm.is_empty() || comm.len() > MAX_COMM_LEN || !printable_word(comm) {
        return Err(format!(
            "bad process name {comm:?} (1 to {MAX_COMM_LEN} bytes, no whitespace)"
        ));
    }
    Ok(())
}

/// Whether `target` can be a descriptor's link target: 1 to [`MAX_TARGET_LEN`] bytes, no
/// whitespace or control characters, an absolute path (`/dev/vfio/42`) or a pseudo-file
/// `<kind>:<name>` (`anon_inode:[vfio-device]`, `socket:[4242]`).
///
/// # Errors
/// What is wrong.
pub fn check_target(target: &str) -> Result<(), String> {
    let pseudo = target.split_once(':').is_some_and(|(kind, name)| {
        !kind.is_empty()
            && !name.is_empty()
            && kind
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    });
    if target.len() > MAX_TARGET_LEN
        || !printable_word(target)
        || !(target.starts_with('/') || pseudo)
    {
        return Err(format!(
            "bad target {target:?} (an absolute path or <kind>:<name>, 1 to {MAX_TARGET_LEN} \
             bytes, no whitespace)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_target_pseudo_file_parses() {
        assert_eq!(check_target("socket:[4242]"), Ok(()));
    }

    #[test]
    fn check_target_pseudo_file_without_name_fails() {
        assert!(check_target("anon_inode:").is_err());
    }

    #[test]
    fn check_target_uppercase_kind_fails() {
        assert!(check_target("C:[x]").is_err());
    }

    #[test]
    fn check_target_control_character_fails() {
        assert!(check_target("/dev/vfio/\x7f").is_err());
    }

    #[test]
    fn check_target_4095_bytes_parses() {
        assert_eq!(check_target(&format!("/{}", "a".repeat(4094))), Ok(()));
    }

    #[test]
    fn check_comm_empty_fails() {
        assert!(check_comm("").is_err());
    }

    #[test]
    fn check_comm_16_bytes_of_two_byte_chars_fails() {
        assert!(check_comm("éééééééé").is_err());
    }
}
