# Every target installs missing Debian packages first (scripts/install-deps.sh).
CARGO ?= cargo

.PHONY: deps build test lint demo bench

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --workspace --all-targets

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## The whole test suite: formatting, lints, unit, integration and simulator tests.
test: lint
	$(CARGO) test --workspace
	$(CARGO) run --quiet --example orchestrator

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
	$(CARGO) bench -p vgpu-core --bench plan --features test-support
	$(CARGO) bench -p vgpu-cli --bench hook
