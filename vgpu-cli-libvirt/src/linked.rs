//! libvirt's facts from the library this executable links: what `vgpuctl` asks of
//! `vgpuctl-libvirt owners --json`, and what the other commands use here
//! ([`vgpu_cli::libvirt_facts`]).

use vgpu_cli::Cli;
use vgpu_cli::libvirt_facts::{Facts, LibvirtFacts, libvirt_absent};
use vgpu_core::model::Inventory;
use vgpu_libvirt::Connection;

/// Facts from libvirt itself; the connection is kept while it answers and opened again after
/// it stopped.
pub(crate) fn facts(cli: &Cli) -> Box<dyn Facts> {
    Box::new(Linked {
        uri: cli.uri().to_owned(),
        absent: libvirt_absent(cli),
        conn: None,
    })
}

struct Linked {
    uri: String,
    /// Whether this host has no libvirt ([`libvirt_absent`]), found once.
    absent: bool,
    conn: Option<Connection>,
}

impl Facts for Linked {
    fn owners(&mut self, inventory: &Inventory) -> LibvirtFacts {
        let unanswered = |reason: String| LibvirtFacts::Unanswered {
            uri: self.uri.clone(),
            reason,
        };
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => match Connection::open(&self.uri) {
                Ok(conn) => conn,
                Err(_) if self.absent => return LibvirtFacts::Absent,
                Err(err) => return unanswered(format!("{err:#}")),
            },
        };
        match conn.owners(inventory) {
            Ok(owners) => {
                self.conn = Some(conn);
                LibvirtFacts::Answered(owners)
            }
            Err(err) => unanswered(format!("{err:#}")),
        }
    }
}
