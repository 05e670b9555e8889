# The one test command: formatting, lints, every unit and integration test, and the end-to-end suite on a real
# control plane. Builds are cached under ~/.cache/kerf (the Rust target dir, the Kubernetes binaries, helm), so
# repeated runs, and CI on the same machine, reuse them; a fresh machine builds them once (~18 minutes).
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kerf/target
# One-shot builds: incremental state only fills the disk (as .ci/run sets it).
export CARGO_INCREMENTAL ?= 0

.PHONY: test fmt lint unit e2e e2e-tools bench

# How many end-to-end tests run at once. Each is mostly a wait on its own control plane and controller (the machine
# sits at a load of ~0.5 running them two at a time), so six at a time take about a quarter of the time.
E2E_THREADS ?= 6

test: fmt lint unit e2e

fmt:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets --locked -- -D warnings

# Every test but the end-to-end suite (its target has `test = false`), the e2e harness's own unit tests included.
unit:
	cargo test --workspace --locked

# Both steps build with `--workspace`, as `unit` does: cargo unifies the features of shared dependencies over the
# packages a command selects, and `cargo build -p kerf-cmd` or `cargo test -p kerf-e2e` each built tokio, the AWS SDK
# and kerf again (about 10 of the 18 minutes a fresh machine spent compiling). The first step builds the `kerf`
# binary the suite runs (for cmd's integration tests); after `unit` it has nothing to do.
# The webhook under hostile load (`admission_load`) runs first and alone: its bounds are on latency, which the
# other tests' load would decide. No backtraces on test errors: a failed wait's cause comes last, after the
# controller log it carries, and a backtrace there would push it out of a truncated CI log.
E2E = KERF_E2E=1 KERF_BIN=$(CARGO_TARGET_DIR)/debug/kerf RUST_LIB_BACKTRACE=0 cargo test --workspace --locked --test e2e --
e2e: e2e-tools
	cargo test --workspace --locked --no-run
	$(E2E) admission_load::
	$(E2E) --skip admission_load:: --test-threads=$(E2E_THREADS)

# The control plane, helm and the AWS emulator the end-to-end suite runs (cached after the first time).
e2e-tools:
	bash e2e/scripts/build-control-plane.sh
	bash e2e/scripts/helm.sh
	bash e2e/scripts/aws-emu.sh install

bench:
	cargo bench -p kerf --bench webhook_https
	cargo bench -p kerf --bench scheduling
	cargo bench -p kerf --bench pod_advice
	cargo bench -p kerf --bench provisioning
	cargo bench -p kerf --bench consolidation
	cargo bench -p kerf-cmd --bench simulate_command
