//! The FUSE adapter: inode numbers for paths (held while the kernel references them), zero
//! cache lifetimes, direct I/O, counters.

mod inodes;

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

use crate::control::{FsOp, LatencyOp, parse_commands};
use crate::kernel::Kernel;
use crate::shared::Shared;
use crate::tree::{FileRef, Node, PciAttr, UNPRIVILEGED_CONFIG_SIZE};
use inodes::Inodes;

/// Kernel-side caching is off: every lookup and stat comes back to us.
const TTL: Duration = Duration::ZERO;
/// The most bytes one write passes to a sysfs store (`kernfs_fop_write_iter`).
const PAGE_SIZE: usize = 4096;
/// The control directory, whose operations are not counted.
const CONTROL_DIR: &str = ".vgpu-sim";

/// The FUSE filesystem.
#[derive(Debug)]
pub(crate) struct SimFs {
    shared: Arc<Shared>,
    inodes: Mutex<Inodes>,
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}/{name}")
    }
}

/// Whether `path` is below a `proc/<pid>/` directory.
fn is_pid_path(path: &str) -> bool {
    path.strip_prefix("proc/")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl SimFs {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            inodes: Mutex::new(Inodes::default()),
        }
    }

    fn inodes(&self) -> MutexGuard<'_, Inodes> {
        self.inodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn path(&self, ino: INodeNo) -> Option<String> {
        self.inodes().path(ino.0)
    }

    /// Counts an operation and applies its injected latency (outside every lock).
    fn enter(&self, op: FsOp, path: &str) {
        if path.starts_with(CONTROL_DIR) {
            return;
        }
        self.shared.counters.bump(op);
        let delay = self
            .shared
            .kernel()
            .latency
            .get(&LatencyOp::Fs(op))
            .copied();
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
    }

    fn attr(&self, ino: u64, path: &str, node: &Node) -> FileAttr {
        let (kind, perm, size, rdev) = match node {
            Node::Dir => (FileType::Directory, 0o755, 0, 0),
            Node::File(_, mode) => {
                let size = if path.starts_with("proc/") { 0 } else { 4096 };
                (FileType::RegularFile, *mode, size, 0)
            }
            Node::Link(t) => (FileType::Symlink, 0o777, t.len() as u64, 0),
            Node::CharDev(r, mode) => (FileType::CharDevice, *mode, 0, *r),
        };
        let t = self.shared.born;
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.shared.uid,
            gid: self.shared.gid,
            rdev,
            blksize: 4096,
            flags: 0,
        }
    }

    fn file_of(&self, ino: INodeNo) -> Result<(String, FileRef, u16), Errno> {
        let path = self.path(ino).ok_or(Errno::ENOENT)?;
        match self.shared.resolve(&path) {
            Some(Node::File(f, mode)) => Ok((path, f, mode)),
            Some(Node::Dir) => Err(Errno::EISDIR),
            Some(_) => Err(Errno::EINVAL),
            // An open file of a process gone: procfs answers ESRCH (`get_proc_task` fails).
            None if is_pid_path(&path) => Err(Errno::ESRCH),
            // An open file whose device went away: sysfs answers ENODEV.
            None => Err(Errno::ENODEV),
        }
    }

    fn do_write(&self, path: &str, f: &FileRef, data: &[u8], pid: u32) -> Result<(), i32> {
        if *f == FileRef::Control {
            let text = std::str::from_utf8(data).map_err(|_| libc::EINVAL)?;
            let cmds = parse_commands(text).map_err(|e| {
                tracing::warn!("{e}");
                libc::EINVAL
            })?;
            return self.shared.apply(cmds).map(drop).map_err(|(m, e)| {
                tracing::warn!("{m}");
                e
            });
        }
        let delay = {
            let mut k = self.shared.kernel();
            if let Some(e) = k.take_fault(path) {
                tracing::info!(path, errno = e, "injected fault");
                return Err(e);
            }
            Kernel::op_of(f, data).and_then(|op| k.latency_for(op))
        };
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        let r = self.shared.store(path, f, data, pid);
        tracing::info!(path, value = %String::from_utf8_lossy(data).trim_end(), result = ?r, "store");
        r
    }
}

impl fuser::Filesystem for SimFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(pp) = self.path(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        let path = join(&pp, name);
        self.enter(FsOp::Lookup, &path);
        match self.shared.resolve(&path) {
            Some(node) => {
                let ino = {
                    let mut inodes = self.inodes();
                    let ino = inodes.lookup(&path);
                    if inodes.sweep_due() {
                        inodes.sweep(|p| self.shared.resolve(p).is_some());
                    }
                    self.shared.counters.set_inodes(inodes.live());
                    ino
                };
                reply.entry(&TTL, &self.attr(ino, &path, &node), Generation(0));
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    // `FUSE_BATCH_FORGET` reaches this too: fuser's `batch_forget` calls `forget` per node
    // (its `ForgetOne` is not exported, so it cannot be overridden). A swept inode's forget
    // finds nothing to drop.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut inodes = self.inodes();
        inodes.forget(ino.0, nlookup);
        self.shared.counters.set_inodes(inodes.live());
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let Some(path) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        self.enter(FsOp::Getattr, &path);
        match self.shared.resolve(&path) {
            Some(node) => reply.attr(&TTL, &self.attr(ino.0, &path, &node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // `echo > attr` truncates first; sysfs ignores truncation, and so do we.
        let Some(path) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        self.enter(FsOp::Setattr, &path);
        match self.shared.resolve(&path) {
            Some(node) => reply.attr(&TTL, &self.attr(ino.0, &path, &node)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let Some(path) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        self.enter(FsOp::Readlink, &path);
        match self.shared.resolve(&path) {
            Some(Node::Link(t)) => reply.data(t.as_bytes()),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let path = self.path(ino).unwrap_or_default();
        self.enter(FsOp::Open, &path);
        let (_, _, mode) = match self.file_of(ino) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        // kernfs refuses opening for write a file without a store, and for read one without
        // a show, whoever asks; only root and the mount owner may write.
        let acc = flags.0 & libc::O_ACCMODE;
        let wants_read = acc == libc::O_RDONLY || acc == libc::O_RDWR;
        let wants_write = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let privileged = req.uid() == 0 || req.uid() == self.shared.uid;
        if (wants_read && mode & 0o444 == 0) || (wants_write && (mode & 0o222 == 0 || !privileged))
        {
            return reply.error(Errno::EACCES);
        }
        self.inodes().open(ino.0);
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.inodes().release(ino.0);
        reply.ok();
        self.shared.session.released();
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let path = self.path(ino).unwrap_or_default();
        self.enter(FsOp::Read, &path);
        let (_, f, _) = match self.file_of(ino) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        let content = match f {
            FileRef::Control => Ok(self.shared.control_status().into_bytes()),
            FileRef::Counters => Ok(self.shared.counters.snapshot().render().into_bytes()),
            // `pci_read_config`: without CAP_SYS_ADMIN, only the standard header.
            FileRef::Pci(_, PciAttr::Config) if req.uid() != 0 && req.uid() != self.shared.uid => {
                self.shared.kernel().read(&f).map(|mut b| {
                    b.truncate(UNPRIVILEGED_CONFIG_SIZE);
                    b
                })
            }
            other => self.shared.kernel().read(&other),
        };
        match content {
            Ok(bytes) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                reply.data(&bytes[start..end]);
            }
            Err(e) => reply.error(err(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let path = self.path(ino).unwrap_or_default();
        self.enter(FsOp::Write, &path);
        let (path, f, _) = match self.file_of(ino) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        // kernfs hands a sysfs store at most PAGE_SIZE bytes and returns that count; the
        // writer sees a short write. The control file takes whole writes.
        let data = if f == FileRef::Control {
            data
        } else {
            &data[..data.len().min(PAGE_SIZE)]
        };
        match self.do_write(&path, &f, data, req.pid()) {
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
            Err(e) => reply.error(err(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let Some(path) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match self.shared.resolve(&path) {
            Some(Node::Dir) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Some(_) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
        self.shared.session.released();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(path) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        self.enter(FsOp::Readdir, &path);
        let comps: Vec<&str> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/').collect()
        };
        let Some(entries) = self.shared.kernel().list(&comps) else {
            return reply.error(Errno::ENOENT);
        };
        let mut all: Vec<(u64, FileType, String)> = Vec::with_capacity(entries.len() + 2);
        {
            let inodes = self.inodes();
            let parent_ino = match path.rsplit_once('/') {
                Some((p, _)) => inodes.listed(p),
                None => 1,
            };
            all.push((ino.0, FileType::Directory, ".".to_owned()));
            all.push((parent_ino, FileType::Directory, "..".to_owned()));
            for (name, node) in entries {
                let kind = match node {
                    Node::Dir => FileType::Directory,
                    Node::File(..) => FileType::RegularFile,
                    Node::Link(_) => FileType::Symlink,
                    Node::CharDev(..) => FileType::CharDevice,
                };
                let child = inodes.listed(&join(&path, &name));
                all.push((child, kind, name));
            }
        }
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(skip) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    // `fuser` calls this once every worker thread of the session is done (the kernel ended
    // the connection), or when the last of them drops the filesystem.
    fn destroy(&mut self) {
        self.shared.session.ended();
    }
}
