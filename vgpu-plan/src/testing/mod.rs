//! Fixtures for benchmarks and tests, not for planning: GPUs built in memory, as discovery
//! reports them. This crate's tests, its benchmark and `vgpu-core`'s tests use them.

pub mod fleet;

#[cfg(test)]
pub(crate) mod unit;

/// A mig-parted config file (NVIDIA's `nvidia-mig-parted`, `version: v1`): GPUs 0 and 1 with MIG
/// off, GPU 2 (an H200, by device filter) with three `1g.18gb` and two `2g.35gb` instances, and
/// a second config with MIG on everywhere.
pub const MIG_PARTED: &str = "version: v1
mig-configs:
  custom:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      device-filter: \"0x233510DE\"
      mig-enabled: true
      mig-devices:
        \"1g.18gb\": 3
        \"2g.35gb\": 2
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
";
