# The one test command: formatting, lints, and every test of the workspace.
# Builds are cached under ~/.cache/kerf so repeated runs (and CI on the same machine) reuse them.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kerf/target

.PHONY: test fmt lint unit bench

test: fmt lint unit

fmt:
	cargo fmt --all -- --check

lint:
	cargo clippy --workspace --all-targets --locked -- -D warnings

unit:
	cargo test --workspace --locked

bench:
	cargo bench -p kerf --bench webhook_https
