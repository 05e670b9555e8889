# The one test command: formatting, lints, every unit and integration test, and the end-to-end suite on a real
# control plane. Builds are cached under ~/.cache/kerf (the Rust target dir, the Kubernetes binaries, helm), so
# repeated runs, and CI on the same machine, reuse them; a fresh machine builds them once (~11 minutes).
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kerf/target
# One-shot builds: incremental state only fills the disk (as .ci/run sets it).
export CARGO_INCREMENTAL ?= 0

.PHONY: test fmt lint unit e2e bench

test: fmt lint unit e2e

fmt:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets --locked -- -D warnings

unit:
	cargo test --workspace --exclude kerf-e2e --locked

e2e:
	bash e2e/scripts/build-control-plane.sh
	bash e2e/scripts/helm.sh
	bash e2e/scripts/aws-emu.sh install
	cargo build -p kerf-cmd --bin kerf --locked
	# No backtraces on test errors: a failed wait's cause comes last, after the controller log it carries, and a
	# backtrace there would push it out of a truncated CI log.
	KERF_E2E=1 KERF_BIN=$(CARGO_TARGET_DIR)/debug/kerf RUST_LIB_BACKTRACE=0 cargo test -p kerf-e2e --locked

bench:
	cargo bench -p kerf --bench webhook_https
	cargo bench -p kerf --bench scheduling
	cargo bench -p kerf --bench pod_advice
	cargo bench -p kerf --bench provisioning
	cargo bench -p kerf --bench consolidation
	cargo bench -p kerf-cmd --bench simulate_command
