//! Disks for tests: a directory tree copied, and a small tmpfs that can be filled to its last
//! byte, to show what a full disk does.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies the tree at `from` into `to` (made as needed): directories and regular files.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A tmpfs mounted on a directory, unmounted when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    dir: PathBuf,
    filler: Option<fs::File>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`64k`) on `dir`. Needs root and mount(8).
    pub fn mount(dir: &Path, size: &str) -> io::Result<Tmpfs> {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "mount -t tmpfs on {}: {status}",
                dir.display()
            )));
        }
        Ok(Tmpfs {
            dir: dir.to_path_buf(),
            filler: None,
        })
    }

    /// Fills it to the last byte with a file of its own, kept until it is dropped or
    /// [`Tmpfs::free`] is called.
    pub fn fill(&mut self) -> io::Result<()> {
        let mut file = fs::File::create(self.dir.join(".filler"))?;
        let block = [b'x'; 4096];
        while file.write_all(&block).is_ok() {}
        while file.write_all(&block[..1]).is_ok() {}
        self.filler = Some(file);
        Ok(())
    }

    /// Removes what [`Tmpfs::fill`] wrote.
    pub fn free(&mut self) -> io::Result<()> {
        if self.filler.take().is_some() {
            fs::remove_file(self.dir.join(".filler"))?;
        }
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        self.filler = None;
        // A test that fails leaves the mount to the next boot; nothing more can be done here.
        let _unmounted = Command::new("umount").arg(&self.dir).status();
    }
}
