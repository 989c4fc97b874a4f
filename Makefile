# Every target installs missing Debian packages first (scripts/install-deps.sh).
CARGO ?= cargo

.PHONY: deps fuzz-deps build test lint demo bench fuzz install package-test

# Where `make install` puts things: vgpuctl and vgpuctl-libvirt (which vgpuctl runs for the
# commands that talk to libvirt) in $(BINDIR), the udev rule and the systemd unit
# (both naming $(BINDIR)/vgpuctl) in $(UDEVRULESDIR) and $(SYSTEMDUNITDIR), all under
# $(DESTDIR) for packaging (a package would set PREFIX=/usr,
# UDEVRULESDIR=/usr/lib/udev/rules.d and SYSTEMDUNITDIR=/usr/lib/systemd/system).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
UDEVRULESDIR ?= /etc/udev/rules.d
SYSTEMDUNITDIR ?= /etc/systemd/system
# The vgpuctl to install, with the vgpuctl-libvirt beside it (and examples/gen-docs, when there,
# for the man pages and completions); empty: `cargo build --release` of vgpu-cli and
# vgpu-cli-libvirt makes target/release/vgpuctl, target/release/vgpuctl-libvirt and
# target/release/examples/gen-docs.
VGPUCTL_BUILD ?=
# The man pages (sections 8 and 5) and the bash, zsh and fish completions, generated from the
# command-line definition by gen-docs (vgpu-cli/examples/gen-docs) built with vgpuctl.
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The Prometheus rules (contrib/prometheus/vgpu.rules.yml) and the Grafana dashboard
# (contrib/grafana/vgpu.json), for an operator to load.
SHAREDIR ?= $(PREFIX)/share/vgpu
# gen-docs' output to install (DIR/man8/*.8, DIR/man5/*.5, DIR/completions/*); empty: gen-docs beside
# vgpuctl writes them, and without it they are left out.
VGPU_DOCS ?=


## Seconds each fuzz target runs (`make fuzz`). `make test` runs the 10 targets for 15 s each:
## with building the fuzz crate from nothing (about 3 minutes on 2 busy cores), installing
## cargo-fuzz (about 1 minute, once) and its clippy, the fuzz step stays under 8 minutes.
FUZZ_SECONDS ?= 60
TEST_FUZZ_SECONDS = 15

deps:
	@scripts/install-deps.sh

## What fuzzing needs besides `deps`: g++ (libfuzzer-sys compiles libFuzzer) and cargo-fuzz.
fuzz-deps: deps
	@scripts/install-deps.sh --fuzz

build: deps
	$(CARGO) build --workspace --all-targets

## Formatting and clippy, after scripts/layering.py: no module cycle in a crate, vgpu-core's
## modules in layer order, no crate depending on one it must not (--self-test first, on a
## generated crate with cycles, so that the check cannot pass by finding nothing).
lint: deps
	python3 scripts/layering.py --self-test
	python3 scripts/layering.py
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## The whole test suite: formatting, lints, unit, integration and simulator tests, then every
## fuzz target for 15 s (a crash fails the suite and leaves its input under fuzz/artifacts/).
test: lint
	$(CARGO) test --workspace
	$(CARGO) run --quiet -p vgpu-libvirt --example orchestrator
	$(MAKE) package-test
	$(MAKE) fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)

## The Debian package (debian/) built from the binaries `cargo test` built, installed with
## dpkg -i, checked (vgpuctl --version, man -w, the bash completion), removed with dpkg -r,
## and nothing it installed left behind (scripts/package-test.sh).
package-test: deps
	scripts/package-test.sh

## Every fuzz target (fuzz/fuzz_targets/) for FUZZ_SECONDS seconds each, one after the other:
## clippy on the fuzz crate (in the workspace's target/, whose dependencies it shares; without
## libFuzzer's C++, which a check does not link), then
## scripts/fuzz.sh, which prints executions per second and
## corpus size per target. `make fuzz FUZZ_SECONDS=600 TARGETS=host_toml` runs one for longer.
fuzz: fuzz-deps
	CARGO_TARGET_DIR=target $(CARGO) clippy --manifest-path fuzz/Cargo.toml --bins --no-default-features -- -D warnings
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh $(TARGETS)

## vgpuctl list, types and check on the simulated "mixed" host, examples/host.toml applied,
## and a VM given a vGPU on libvirt's embedded QEMU driver.
demo: deps
	scripts/demo.sh

bench: deps
	$(CARGO) bench -p vgpu-cli --bench list
	$(CARGO) bench -p vgpu-cli --bench discovery
	$(CARGO) bench -p vgpu-cli --bench provision
	$(CARGO) bench -p vgpu-sim --bench ops
	$(CARGO) bench -p vgpu-sim --bench churn
	$(CARGO) bench -p vgpu-libvirt --bench owners
	$(CARGO) bench -p vgpu-plan --bench plan
	$(CARGO) bench -p vgpu-plan --bench placements
	$(CARGO) bench -p vgpu-cli --bench hook

## vgpuctl, contrib/udev/60-vgpu.rules and contrib/systemd/vgpu-restore.service, the last two
## generated from their .in templates with the installed vgpuctl's path, the man pages, the
## completions, the Prometheus rules and the Grafana dashboard. Then, on the host:
## systemctl daemon-reload && systemctl enable vgpu-restore.service && udevadm control --reload
install:
	@bin='$(VGPUCTL_BUILD)'; \
	if [ -z "$$bin" ]; then $(CARGO) build --release -p vgpu-cli -p vgpu-cli-libvirt --bins --example gen-docs && bin=target/release/vgpuctl; fi; \
	install -D -m 0755 "$$bin" '$(DESTDIR)$(BINDIR)/vgpuctl'; \
	install -D -m 0755 "$$(dirname "$$bin")/vgpuctl-libvirt" '$(DESTDIR)$(BINDIR)/vgpuctl-libvirt'
	install -d '$(DESTDIR)$(UDEVRULESDIR)' '$(DESTDIR)$(SYSTEMDUNITDIR)'
	sed 's|@VGPUCTL@|$(BINDIR)/vgpuctl|g' contrib/udev/60-vgpu.rules.in > '$(DESTDIR)$(UDEVRULESDIR)/60-vgpu.rules'
	sed 's|@VGPUCTL@|$(BINDIR)/vgpuctl|g' contrib/systemd/vgpu-restore.service.in > '$(DESTDIR)$(SYSTEMDUNITDIR)/vgpu-restore.service'
	chmod 0644 '$(DESTDIR)$(UDEVRULESDIR)/60-vgpu.rules' '$(DESTDIR)$(SYSTEMDUNITDIR)/vgpu-restore.service'
	install -D -m 0644 contrib/prometheus/vgpu.rules.yml '$(DESTDIR)$(SHAREDIR)/vgpu.rules.yml'
	install -D -m 0644 contrib/grafana/vgpu.json '$(DESTDIR)$(SHAREDIR)/vgpu.json'
	@bin='$(or $(VGPUCTL_BUILD),target/release/vgpuctl)'; docs='$(VGPU_DOCS)'; tmp=; \
	gen="$$(dirname "$$bin")/examples/gen-docs"; \
	if [ -z "$$docs" ] && [ -x "$$gen" ]; then tmp=$$(mktemp -d) && docs=$$tmp && "$$gen" "$$docs"; fi; \
	if [ -z "$$docs" ]; then echo "make install: no $$gen: man pages and completions left out" >&2; exit 0; fi; \
	install -d '$(DESTDIR)$(MANDIR)/man8'; \
	install -m 0644 "$$docs"/man8/*.8 '$(DESTDIR)$(MANDIR)/man8/'; \
	install -d '$(DESTDIR)$(MANDIR)/man5'; \
	install -m 0644 "$$docs"/man5/*.5 '$(DESTDIR)$(MANDIR)/man5/'; \
	install -D -m 0644 "$$docs/completions/vgpuctl" '$(DESTDIR)$(BASHCOMPDIR)/vgpuctl'; \
	install -D -m 0644 "$$docs/completions/_vgpuctl" '$(DESTDIR)$(ZSHCOMPDIR)/_vgpuctl'; \
	install -D -m 0644 "$$docs/completions/vgpuctl.fish" '$(DESTDIR)$(FISHCOMPDIR)/vgpuctl.fish'; \
	if [ -n "$$tmp" ]; then rm -r "$$tmp"; fi
