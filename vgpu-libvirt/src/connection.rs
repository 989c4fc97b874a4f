//! A connection to a libvirt hypervisor driver and the domain operations this crate needs.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock, PoisonError};

use vgpu_core::model::{Inventory, VgpuHandle};
use vgpu_domain::xml::{self, Belonging, HostdevElement};
use vgpu_domain::{Attached, Domain, DomainDevices, Hostdev, Owners, Scope, embedded_root};

use crate::error::{Error, Result, is_no_domain};

/// What [`Connection::open`] writes to `<root>/etc/qemu.conf` of an embedded driver that has
/// none: QEMU's output goes to plain files, so domains start without `virtlogd`.
const EMBED_QEMU_CONF: &str = "stdio_handler = \"file\"\n";

/// libvirt's `virDomainModificationImpact` flags for `scope`.
fn flags(scope: Scope) -> u32 {
    let mut flags = 0;
    if scope.live {
        flags |= virt::sys::VIR_DOMAIN_AFFECT_LIVE;
    }
    if scope.config {
        flags |= virt::sys::VIR_DOMAIN_AFFECT_CONFIG;
    }
    flags
}

/// A connection to a libvirt hypervisor driver.
///
/// Closed when dropped. One connection may be used from several threads, as libvirt's
/// connections may.
pub struct Connection {
    conn: virt::connect::Connect,
    uri: String,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

/// The process-wide libvirt setup, done once: no error printing by libvirt (errors are
/// returned), and libvirt's default event loop running on a thread of its own, which the
/// embedded driver requires and remote connections use for keepalives.
fn init_libvirt() -> Result<()> {
    static INIT: OnceLock<std::result::Result<(), (i32, String)>> = OnceLock::new();
    let outcome = INIT.get_or_init(|| {
        virt::error::clear_error_callback();
        virt::event::event_register_default_impl().map_err(|err| {
            (
                i32::try_from(err.code().to_raw()).unwrap_or(i32::MAX),
                err.message().to_owned(),
            )
        })?;
        std::thread::Builder::new()
            .name("libvirt-events".to_owned())
            .spawn(run_event_loop)
            .map(|_| ())
            .map_err(|err| {
                (
                    -1,
                    format!("cannot start a thread for libvirt's event loop: {err}"),
                )
            })
    });
    outcome.clone().map_err(|(code, message)| Error::Libvirt {
        operation: "register event loop",
        domain: None,
        device: None,
        code,
        message,
    })
}

fn run_event_loop() {
    loop {
        if let Err(err) = virt::event::event_run_default_impl() {
            tracing::error!("libvirt's event loop stopped: {}", err.message());
            return;
        }
    }
}

/// Creates `<root>/etc/qemu.conf` for an embedded driver when it is missing; an existing file
/// is left as it is.
fn ensure_embed_config(root: &Path) -> Result<()> {
    let etc = root.join("etc");
    std::fs::create_dir_all(&etc).map_err(|source| vgpu_core::error::HostError::Write {
        path: etc.clone(),
        value: "(a directory)".to_owned(),
        source,
    })?;
    let path = etc.join("qemu.conf");
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(source) => {
            return Err(vgpu_core::error::HostError::Write {
                path,
                value: EMBED_QEMU_CONF.to_owned(),
                source,
            }
            .into());
        }
    };
    if let Err(source) = file.write_all(EMBED_QEMU_CONF.as_bytes()) {
        // A partial file would never be rewritten: take it away.
        if let Err(err) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), "cannot remove a partly written file: {err}");
        }
        return Err(vgpu_core::error::HostError::Write {
            path,
            value: EMBED_QEMU_CONF.to_owned(),
            source,
        }
        .into());
    }
    tracing::info!(path = %path.display(), value = EMBED_QEMU_CONF.trim_end(), "wrote");
    Ok(())
}

/// A connection to the embedded driver, opened once per process and shared: libvirt shuts the
/// embedded driver down when its last connection closes and registers it anew at the next
/// open, which it can do only a few times in a process ("Too many drivers, cannot register
/// QEMU"), and two threads opening it at once crash it. One root per process is libvirt's own
/// rule; opening another is refused by libvirt.
fn open_embedded(uri: &str) -> Result<virt::connect::Connect> {
    static EMBEDDED: Mutex<Option<(String, virt::connect::Connect)>> = Mutex::new(None);
    let mut open = EMBEDDED.lock().unwrap_or_else(PoisonError::into_inner);
    match open.as_ref() {
        Some((open_uri, conn)) if open_uri == uri => Ok(conn.clone()),
        Some(_) => virt::connect::Connect::open(Some(uri))
            .map_err(|err| Error::libvirt("open", None, None, &err)),
        None => {
            let conn = virt::connect::Connect::open(Some(uri))
                .map_err(|err| Error::libvirt("open", None, None, &err))?;
            *open = Some((uri.to_owned(), conn.clone()));
            Ok(conn)
        }
    }
}

/// What a domain holds, as its XML has it.
struct Assigned {
    live: Vec<HostdevElement>,
    config: Vec<HostdevElement>,
    /// The tenant and Nova's claim of the live XML when the domain runs, else of its
    /// persistent XML.
    belonging: Belonging,
}

impl Assigned {
    fn holds(&self, device: VgpuHandle) -> bool {
        self.live
            .iter()
            .chain(&self.config)
            .any(|h| h.device == device)
    }

    /// Live and config merged per device, by device.
    fn merged(&self) -> Vec<Attached> {
        let mut merged: BTreeMap<VgpuHandle, Attached> = BTreeMap::new();
        for (element, live) in self
            .live
            .iter()
            .map(|e| (e, true))
            .chain(self.config.iter().map(|e| (e, false)))
        {
            let entry = merged.entry(element.device).or_insert(Attached {
                device: element.device,
                kind: element.kind,
                live: false,
                config: false,
            });
            if live {
                entry.live = true;
            } else {
                entry.config = true;
            }
        }
        merged.into_values().collect()
    }
}

fn find(elements: &[HostdevElement], device: VgpuHandle) -> Option<&HostdevElement> {
    elements.iter().find(|h| h.device == device)
}

impl Connection {
    /// Opens a connection to `uri` ([`vgpu_domain::DEFAULT_URI`], or
    /// [`vgpu_domain::embedded_uri`] for libvirt's QEMU driver run inside this process).
    ///
    /// For an embedded driver (`qemu:///embed?root=DIR`), `DIR/etc/qemu.conf` is created with
    /// `stdio_handler = "file"` when it is missing (an existing file is never overwritten), so
    /// that domains start without `virtlogd`. libvirt allows one embedded root per process, and
    /// shuts the driver down when its last connection closes, which it cannot do and undo
    /// more than a few times in a process; so the first connection to an embedded driver is
    /// kept for the life of the process and every later one shares it.
    ///
    /// The first call sets libvirt up for the process: its errors are returned rather than
    /// printed, and its default event loop runs on a thread of its own.
    ///
    /// # Errors
    ///
    /// [`Error::Libvirt`] when libvirt cannot open the driver; [`Error::Core`] when the URI
    /// has a NUL byte or the embedded driver's `qemu.conf` cannot be written.
    pub fn open(uri: &str) -> Result<Connection> {
        if uri.contains('\0') {
            return Err(vgpu_core::Error::BadName {
                value: uri.chars().take(80).collect(),
                expected: "a libvirt URI without NUL bytes",
            }
            .into());
        }
        if let Some(root) = embedded_root(uri) {
            ensure_embed_config(&root)?;
        }
        init_libvirt()?;
        let conn = if embedded_root(uri).is_some() {
            open_embedded(uri)?
        } else {
            virt::connect::Connect::open(Some(uri))
                .map_err(|err| Error::libvirt("open", None, None, &err))?
        };
        tracing::debug!(uri, "connected to libvirt");
        Ok(Connection {
            conn,
            uri: uri.to_owned(),
        })
    }

    /// The URI this connection was opened with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Defines a persistent domain from its XML (`virDomainDefineXML`); it does not start it.
    ///
    /// # Errors
    ///
    /// [`Error::Libvirt`] with libvirt's refusal (malformed XML, a name in use by another
    /// UUID).
    pub fn define(&self, xml: &str) -> Result<Domain> {
        let dom = self
            .conn
            .define_domain_xml(xml)
            .map_err(|err| Error::libvirt("define", None, None, &err))?;
        let name = dom
            .name()
            .map_err(|err| Error::libvirt("define", None, None, &err))?;
        tracing::info!(uri = %self.uri, domain = %name, "defined domain");
        describe(&dom, &name, "define")
    }

    /// Starts a defined domain (`virDomainCreate`).
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`], or [`Error::Libvirt`] with libvirt's refusal (already running,
    /// a device the host cannot assign).
    pub fn start(&self, domain: &str) -> Result<()> {
        let dom = self.lookup(domain, "start")?;
        dom.create()
            .map_err(|err| Error::libvirt("start", Some(domain), None, &err))?;
        tracing::info!(uri = %self.uri, domain, "started domain");
        Ok(())
    }

    /// Stops a running domain at once, as pulling its plug would (`virDomainDestroy`).
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`], or [`Error::Libvirt`] (not running).
    pub fn stop(&self, domain: &str) -> Result<()> {
        let dom = self.lookup(domain, "stop")?;
        dom.destroy()
            .map_err(|err| Error::libvirt("stop", Some(domain), None, &err))?;
        tracing::info!(uri = %self.uri, domain, "stopped domain");
        Ok(())
    }

    /// Removes a domain's persistent definition (`virDomainUndefine`); a running domain goes
    /// on running, as a transient one.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`], or [`Error::Libvirt`].
    pub fn undefine(&self, domain: &str) -> Result<()> {
        let dom = self.lookup(domain, "undefine")?;
        dom.undefine()
            .map_err(|err| Error::libvirt("undefine", Some(domain), None, &err))?;
        tracing::info!(uri = %self.uri, domain, "undefined domain");
        Ok(())
    }

    /// The domain named `name`.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`] when there is none; [`Error::Libvirt`].
    pub fn domain(&self, name: &str) -> Result<Domain> {
        let dom = self.lookup(name, "lookup")?;
        describe(&dom, name, "lookup")
    }

    /// Every domain, running and defined-only, by name.
    ///
    /// # Errors
    ///
    /// [`Error::Libvirt`].
    pub fn domains(&self) -> Result<Vec<Domain>> {
        let mut domains = Vec::new();
        for (name, dom) in self.all_domains()? {
            match describe(&dom, &name, "list") {
                Ok(domain) => domains.push(domain),
                Err(Error::NoSuchDomain { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(domains)
    }

    /// The mdev and PCI hostdevs of `domain`, from its live XML (when it runs) and its
    /// persistent XML (`VIR_DOMAIN_XML_INACTIVE`, when it has one), merged per device, by
    /// device.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`]; [`Error::Libvirt`]; [`Error::Domain`] when its XML is refused.
    pub fn hostdevs(&self, domain: &str) -> Result<Vec<Attached>> {
        let dom = self.lookup(domain, "read")?;
        self.assigned(&dom, domain)
            .map(|assigned| assigned.merged())
    }

    /// The tenant `domain`'s metadata names (its live XML when it runs, else its persistent
    /// XML): `vgpu`'s own label, else Nova's project.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`]; [`Error::Libvirt`]; [`Error::Domain`] when its XML is refused.
    pub fn tenant(&self, domain: &str) -> Result<Option<vgpu_domain::xml::Tenant>> {
        let dom = self.lookup(domain, "read")?;
        Ok(self.assigned(&dom, domain)?.belonging.tenant)
    }

    /// Attaches `hostdev` to `domain` in `scope` (`virDomainAttachDeviceFlags` with
    /// `VIR_DOMAIN_AFFECT_LIVE` and/or `VIR_DOMAIN_AFFECT_CONFIG`).
    ///
    /// Refused when another domain, running or not, references the device in its live or
    /// persistent XML. A scope in which `domain` holds the device already is left as it is,
    /// so attaching twice is attaching once; an empty scope changes nothing. libvirt applies
    /// both scopes or neither.
    ///
    /// Nothing stops another program from assigning the device between the check and the
    /// attach: libvirt itself refuses a device that a running guest uses, not one that only
    /// a persistent definition names.
    ///
    /// # Errors
    ///
    /// [`Error::HeldElsewhere`] naming the other domain (the first by name);
    /// [`Error::NoSuchDomain`]; [`Error::Libvirt`] with libvirt's refusal (the domain does
    /// not run and `live` was asked; the host cannot assign the device);
    /// [`Error::Domain`] when a domain's XML is refused.
    pub fn attach(&self, domain: &str, hostdev: &Hostdev, scope: Scope) -> Result<()> {
        let device = hostdev.device;
        let target = self.lookup(domain, "attach")?;
        let target_uuid = target
            .uuid()
            .map_err(|err| Error::libvirt("attach", Some(domain), None, &err))?;
        for (name, other) in self.all_domains()? {
            let uuid = other
                .uuid()
                .map_err(|err| Error::libvirt("attach", Some(&name), None, &err))?;
            if uuid == target_uuid {
                continue;
            }
            match self.assigned(&other, &name) {
                Ok(assigned) if assigned.holds(device) => {
                    return Err(Error::HeldElsewhere {
                        device: device.to_string(),
                        domain: name,
                    });
                }
                Ok(_) | Err(Error::NoSuchDomain { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        let mine = self.assigned(&target, domain)?;
        let needed = Scope {
            live: scope.live && find(&mine.live, device).is_none(),
            config: scope.config && find(&mine.config, device).is_none(),
        };
        if !needed.live && !needed.config {
            tracing::debug!(domain, %device, ?scope, "already attached");
            return Ok(());
        }
        tracing::info!(uri = %self.uri, domain, %device, live = needed.live, config = needed.config, "attaching");
        target
            .attach_device_flags(&hostdev.to_xml(), flags(needed))
            .map_err(|err| Error::libvirt("attach", Some(domain), Some(device.to_string()), &err))
    }

    /// Records in `domain`'s metadata, in `scope`, that `device` holds a vGPU of type
    /// `type_name` (`virDomainSetMetadata`, key `vgpu`, namespace
    /// [`xml::METADATA_NAMESPACE`]). The element keeps its `type`, its `tenant` and the other
    /// devices it records ([`xml::vgpu_metadata_with_device`]). The record travels with the
    /// domain, so that the hook on another host knows the type to make there.
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchDomain`]; [`Error::Libvirt`]; [`Error::Domain`] when the domain's XML
    /// is refused.
    pub fn record_type(
        &self,
        domain: &str,
        device: VgpuHandle,
        type_name: &str,
        scope: Scope,
    ) -> Result<()> {
        let target = self.lookup(domain, "record")?;
        let fail = |err: virt::error::Error| {
            Error::libvirt("record", Some(domain), Some(device.to_string()), &err)
        };
        let scopes = [
            (scope.live, 0, virt::sys::VIR_DOMAIN_AFFECT_LIVE),
            (
                scope.config,
                virt::sys::VIR_DOMAIN_XML_INACTIVE,
                virt::sys::VIR_DOMAIN_AFFECT_CONFIG,
            ),
        ];
        for (wanted, read, affect) in scopes {
            if !wanted {
                continue;
            }
            let text = target.xml_desc(read).map_err(fail)?;
            let element = xml::vgpu_metadata_with_device(&text, device, type_name)
                .map_err(|err| Error::from(err.in_domain(domain)))?;
            target
                .set_metadata(
                    virt::sys::VIR_DOMAIN_METADATA_ELEMENT as i32,
                    Some(&element),
                    Some("vgpu"),
                    Some(xml::METADATA_NAMESPACE),
                    affect,
                )
                .map_err(fail)?;
        }
        Ok(())
    }

    /// Detaches `device` from `domain` in `scope` (`virDomainDetachDeviceFlags`), giving
    /// libvirt the `<hostdev>` element exactly as the domain's XML has it, so that what
    /// another tool wrote there is matched and not rewritten. A scope in which `domain` does
    /// not hold the device is skipped; both scopes go in one call, which libvirt applies to
    /// both or neither.
    ///
    /// Detaching from a running guest asks the guest to release the device; libvirt returns
    /// once it has, or after a few seconds, when the live XML may still show it until the
    /// guest lets go.
    ///
    /// # Errors
    ///
    /// [`Error::NotAttached`] when `domain` holds the device in none of the scopes asked;
    /// [`Error::NoSuchDomain`]; [`Error::Libvirt`]; [`Error::Domain`].
    pub fn detach(&self, domain: &str, device: VgpuHandle, scope: Scope) -> Result<()> {
        let target = self.lookup(domain, "detach")?;
        let mine = self.assigned(&target, domain)?;
        let live = scope.live.then(|| find(&mine.live, device)).flatten();
        let config = scope.config.then(|| find(&mine.config, device)).flatten();
        let element = match live.or(config) {
            Some(element) => element,
            None => {
                return Err(Error::NotAttached {
                    device: device.to_string(),
                    domain: domain.to_owned(),
                });
            }
        };
        let needed = Scope {
            live: live.is_some(),
            config: config.is_some(),
        };
        tracing::info!(uri = %self.uri, domain, %device, live = needed.live, config = needed.config, "detaching");
        target
            .detach_device_flags(&element.text, flags(needed))
            .map_err(|err| Error::libvirt("detach", Some(domain), Some(device.to_string()), &err))
    }

    /// Who holds each vGPU of `inventory`: the live XML of every running domain and the
    /// persistent XML of every defined one, read once each, with the tenant each domain's
    /// metadata names (from its live XML when it runs). A domain that goes away while being
    /// read is left out. Each type is named as `inventory` names it: give a settled one
    /// (`Manager::capacity_state`) for the names every other command shows.
    ///
    /// # Errors
    ///
    /// [`Error::Libvirt`]; [`Error::Domain`] when a domain's XML is refused.
    pub fn owners(&self, inventory: &Inventory) -> Result<Owners> {
        let mut domains = Vec::new();
        for (name, dom) in self.all_domains()? {
            let read = describe(&dom, &name, "read")
                .and_then(|domain| Ok((domain, self.assigned(&dom, &name)?)));
            match read {
                Ok((domain, assigned)) => domains.push(DomainDevices {
                    domain,
                    devices: assigned.merged(),
                    tenant: assigned.belonging.tenant,
                    nova: assigned.belonging.nova,
                }),
                Err(Error::NoSuchDomain { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(Owners::build(inventory, &domains))
    }

    /// Every domain with its name, by name.
    fn all_domains(&self) -> Result<Vec<(String, virt::domain::Domain)>> {
        let all = self
            .conn
            .list_all_domains(0)
            .map_err(|err| Error::libvirt("list", None, None, &err))?;
        let mut named = Vec::with_capacity(all.len());
        for dom in all {
            let name = dom
                .name()
                .map_err(|err| Error::libvirt("list", None, None, &err))?;
            named.push((name, dom));
        }
        named.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(named)
    }

    fn lookup(&self, name: &str, operation: &'static str) -> Result<virt::domain::Domain> {
        let no_such = || Error::NoSuchDomain {
            name: name.to_owned(),
        };
        if name.contains('\0') {
            return Err(no_such());
        }
        self.conn.lookup_domain_by_name(name).map_err(|err| {
            if is_no_domain(&err) {
                no_such()
            } else {
                Error::libvirt(operation, Some(name), None, &err)
            }
        })
    }

    /// The hostdevs of `dom`'s live XML (when it runs) and persistent XML (when it has one).
    fn assigned(&self, dom: &virt::domain::Domain, name: &str) -> Result<Assigned> {
        let fail = |err: virt::error::Error| {
            if is_no_domain(&err) {
                Error::NoSuchDomain {
                    name: name.to_owned(),
                }
            } else {
                Error::libvirt("read", Some(name), None, &err)
            }
        };
        let running = dom.is_active().map_err(fail)?;
        let persistent = dom.is_persistent().map_err(fail)?;
        let parse = |flags: u32| -> Result<(Vec<HostdevElement>, Belonging)> {
            let text = dom.xml_desc(flags).map_err(fail)?;
            xml::hostdevs_and_belonging(&text).map_err(|err| err.in_domain(name).into())
        };
        let (live, live_belonging) = if running {
            parse(0)?
        } else {
            (Vec::new(), Belonging::default())
        };
        let (config, config_belonging) = if persistent {
            parse(virt::sys::VIR_DOMAIN_XML_INACTIVE)?
        } else {
            (Vec::new(), Belonging::default())
        };
        Ok(Assigned {
            live,
            config,
            belonging: if running {
                live_belonging
            } else {
                config_belonging
            },
        })
    }
}

fn describe(dom: &virt::domain::Domain, name: &str, operation: &'static str) -> Result<Domain> {
    let fail = |err: virt::error::Error| {
        if is_no_domain(&err) {
            Error::NoSuchDomain {
                name: name.to_owned(),
            }
        } else {
            Error::libvirt(operation, Some(name), None, &err)
        }
    };
    Ok(Domain {
        name: name.to_owned(),
        uuid: dom.uuid().map_err(fail)?,
        running: dom.is_active().map_err(fail)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;
    use vgpu_domain::HostdevKind;

    fn element(n: u128) -> HostdevElement {
        HostdevElement {
            device: VgpuHandle::Mdev(Uuid::from_u128(n)),
            kind: HostdevKind::Mdev,
            text: String::new(),
            source: 0..0,
        }
    }

    fn attached(n: u128, live: bool, config: bool) -> Attached {
        Attached {
            device: VgpuHandle::Mdev(Uuid::from_u128(n)),
            kind: HostdevKind::Mdev,
            live,
            config,
        }
    }

    #[test]
    fn connection_is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<Connection>();
    }

    #[test]
    fn merged_joins_live_and_config_per_device_by_device() {
        let assigned = Assigned {
            live: vec![element(3), element(1)],
            config: vec![element(2), element(1)],
            belonging: Belonging::default(),
        };
        assert_eq!(
            assigned.merged(),
            vec![
                attached(1, true, true),
                attached(2, false, true),
                attached(3, true, false)
            ]
        );
    }

    #[test]
    fn holds_looks_in_both_configurations() {
        let assigned = Assigned {
            live: vec![element(1)],
            config: vec![element(2)],
            belonging: Belonging::default(),
        };
        assert_eq!(
            [1, 2, 3].map(|n| assigned.holds(VgpuHandle::Mdev(Uuid::from_u128(n)))),
            [true, true, false]
        );
    }

    #[test]
    fn flags_are_libvirts() {
        let scope = |live, config| Scope { live, config };
        assert_eq!(
            (
                flags(scope(true, false)),
                flags(scope(false, true)),
                flags(scope(true, true))
            ),
            (1, 2, 3)
        );
    }

    #[test]
    fn ensure_embed_config_writes_missing_file() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let written = ensure_embed_config(dir.path())
            .ok()
            .and_then(|()| std::fs::read_to_string(dir.path().join("etc/qemu.conf")).ok());
        assert_eq!(written.as_deref(), Some("stdio_handler = \"file\"\n"));
    }

    #[test]
    fn ensure_embed_config_keeps_existing_file() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).expect("etc");
        std::fs::write(etc.join("qemu.conf"), "user = \"root\"\n").expect("qemu.conf");
        let kept = ensure_embed_config(dir.path())
            .ok()
            .and_then(|()| std::fs::read_to_string(etc.join("qemu.conf")).ok());
        assert_eq!(kept.as_deref(), Some("user = \"root\"\n"));
    }
}
