//! The test NVML library (`vgpu-nvml-fake`) set up for one test: a copy of the library in a
//! directory of its own, with the data file it answers from beside it. On a simulated host
//! (`on_sim`), the data names the mount root (`sim_root`) and the library reads the rest
//! from the simulator.
//!
//! A copy per test keeps tests apart: the dynamic loader shares one loaded library (and its
//! state) between everything that opens the same file, so each test opens its own.

use std::io;
use std::path::{Path, PathBuf};

/// Which build of the test library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeBuild {
    /// Every function `vgpu` calls.
    Full,
    /// An older driver's: no scheduler, versioned profile or placement functions.
    Legacy,
}

impl FakeBuild {
    fn file_name(self) -> &'static str {
        match self {
            FakeBuild::Full => "libvgpu_nvml_fake.so",
            FakeBuild::Legacy => "libvgpu_nvml_fake_legacy.so",
        }
    }
}

/// A test NVML library with its data, in a temporary directory.
#[derive(Debug)]
pub struct FakeNvml {
    dir: tempfile::TempDir,
    library: PathBuf,
}

/// Where cargo put the test library: beside the running test binary (`target/<profile>/deps`,
/// where dependencies' shared libraries are built), or one directory up.
pub fn built_library(build: FakeBuild) -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        let candidate = d.join(build.file_name());
        if candidate.is_file() {
            return Ok(candidate);
        }
        dir = d.parent().map(Path::to_path_buf);
        if d.file_name().is_some_and(|n| n == "target") {
            break;
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "{} is not built beside {}: add vgpu-nvml-fake to the test's dev-dependencies",
            build.file_name(),
            exe.display()
        ),
    ))
}

/// `data` with `sim_root` naming `root` (a top-level key, so first).
pub fn with_sim_root(data: &str, root: &Path) -> String {
    let quoted = toml_string(&root.to_string_lossy());
    format!("sim_root = {quoted}\n{data}")
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl FakeNvml {
    /// The full test library answering from `data` (TOML, see `vgpu-nvml-fake`).
    pub fn new(data: &str) -> io::Result<Self> {
        Self::build(FakeBuild::Full, data)
    }

    /// The full test library as a view of the simulated host mounted at `root`, with `data`
    /// for what the simulator does not know (UUIDs, scheduler capabilities, behaviours).
    pub fn on_sim(data: &str, root: &Path) -> io::Result<Self> {
        Self::build_on_sim(FakeBuild::Full, data, root)
    }

    /// The given build as a view of the simulated host mounted at `root`, with `data`.
    pub fn build_on_sim(build: FakeBuild, data: &str, root: &Path) -> io::Result<Self> {
        Self::build(build, &with_sim_root(data, root))
    }

    /// The given build answering from `data`.
    pub fn build(build: FakeBuild, data: &str) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let library = dir.path().join(build.file_name());
        std::fs::copy(built_library(build)?, &library)?;
        let fake = Self { dir, library };
        fake.set_data(data)?;
        Ok(fake)
    }

    /// The library to load.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The data file.
    pub fn data_path(&self) -> PathBuf {
        self.dir.path().join("fake-nvml.toml")
    }

    /// Replaces the data (read at the next initialisation).
    pub fn set_data(&self, data: &str) -> io::Result<()> {
        std::fs::write(self.data_path(), data)
    }

    /// The changes asked of the library so far, one JSON object a line.
    pub fn calls(&self) -> io::Result<String> {
        match std::fs::read_to_string(self.dir.path().join("fake-nvml.calls")) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
            other => other,
        }
    }
}
