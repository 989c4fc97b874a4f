//! What bounds a type's room on one GPU, as the capacity model (`capacity::room`) says:
//! plain data, so that the model and the errors can carry it.

use serde::Serialize;

/// What keeps a type's room on one GPU from being larger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Limit {
    /// The GPU does not offer the type.
    NotOffered,
    /// Its parents take no more now, as sysfs says.
    Offer,
    /// The type's per-GPU maximum, with this many of it existing.
    Max {
        /// vGPUs of the type per GPU.
        max: u32,
    },
    /// Defined vGPUs that are not running hold this many places.
    Definitions {
        /// Places held.
        held: u32,
    },
    /// Every VF holds something, is given out, or is named by a definition.
    Vfs,
    /// A vGPU (running or defined) of this type rules the type out (NVIDIA's mixing rule).
    Mixing {
        /// The other type, by name or id.
        with: String,
    },
    /// Free GPU instances of the type's profile.
    GpuInstances {
        /// The profile (`1g.18gb`).
        profile: String,
        /// How many are free, after definitions.
        free: u32,
    },
    /// MIG mode is off.
    MigOff {
        /// The profile the type needs.
        profile: String,
    },
    /// MIG mode is on, and the type is time-sliced: it needs the whole GPU out of MIG mode.
    MigOn,
    /// No NVML to list the GPU instances of the type's profile.
    MigUnknown {
        /// The profile the type needs.
        profile: String,
    },
    /// Mixed-size mode: the type's placements whose slots are free.
    Placements {
        /// How many are free.
        free: u32,
    },
    /// Mixed-size mode: NVML did not say where the type can be placed.
    PlacementsUnknown,
    /// Mixed-size mode: the GPU holds the most vGPUs it may.
    VgpusPerGpu {
        /// The most vGPUs on one GPU.
        max: u32,
    },
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::NotOffered => write!(f, "the GPU does not offer the type"),
            Limit::Offer => write!(f, "its parents take no more"),
            Limit::Max { max } => write!(f, "the type's maximum is {max} per GPU"),
            Limit::Definitions { held } => write!(f, "{held} held for defined vGPUs"),
            Limit::Vfs => write!(f, "no VF is free"),
            Limit::Mixing { with } => write!(
                f,
                "{with} runs on the GPU or is defined for it, and the type cannot share a GPU \
                 with it"
            ),
            Limit::GpuInstances { profile, free } => {
                write!(f, "{free} free GPU instance(s) of profile {profile}")
            }
            Limit::MigOff { profile } => {
                write!(
                    f,
                    "MIG mode is off (the type needs a {profile} GPU instance)"
                )
            }
            Limit::MigOn => write!(f, "MIG mode is on, and the type is time-sliced"),
            Limit::MigUnknown { profile } => write!(
                f,
                "the GPU instances of profile {profile} are unknown without NVML"
            ),
            Limit::Placements { free } => {
                write!(f, "{free} free placement(s) in mixed-size mode")
            }
            Limit::PlacementsUnknown => write!(
                f,
                "NVML does not say where the type can be placed in mixed-size mode"
            ),
            Limit::VgpusPerGpu { max } => {
                write!(f, "the GPU holds {max} vGPUs, the most in mixed-size mode")
            }
        }
    }
}

impl Limit {
    /// A few words for a table cell (`vgpuctl types --help` explains each).
    pub fn short(&self) -> String {
        match self {
            Limit::NotOffered => "not offered".to_owned(),
            Limit::Offer => "driver says".to_owned(),
            Limit::Max { max } => format!("max {max}"),
            Limit::Definitions { held } => format!("{held} reserved"),
            Limit::Vfs => "free VFs".to_owned(),
            Limit::Mixing { with } => format!("holds {with}"),
            Limit::GpuInstances { profile, free: 0 } => format!("needs a free {profile}"),
            Limit::GpuInstances { profile, free } => format!("{free} free {profile}"),
            Limit::MigOff { .. } => "MIG mode off".to_owned(),
            Limit::MigOn => "MIG mode on".to_owned(),
            Limit::MigUnknown { .. } => "no NVML".to_owned(),
            Limit::Placements { free: 0 } => "no free placement".to_owned(),
            Limit::Placements { free } => format!("{free} placements"),
            Limit::PlacementsUnknown => "placements unknown".to_owned(),
            Limit::VgpusPerGpu { max } => format!("{max} per GPU"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_no_free_instance_names_the_profile_needed() {
        let limit = Limit::GpuInstances {
            profile: "2g.35gb".to_owned(),
            free: 0,
        };
        assert_eq!(limit.short(), "needs a free 2g.35gb");
    }

    #[test]
    fn short_free_instances_counts_them() {
        let limit = Limit::GpuInstances {
            profile: "1g.18gb".to_owned(),
            free: 2,
        };
        assert_eq!(limit.short(), "2 free 1g.18gb");
    }
}
