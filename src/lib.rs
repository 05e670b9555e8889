//! kerf's Kubernetes edge: the controllers that carry out the core's decisions against the apiserver and a
//! cloud, the admission hooks, the Kubernetes client, `kerf simulate`'s driver, and the command line.
//!
//! The layers below are re-exported under their module names (`kerf::scheduling` is `kerf_core::scheduling`):
//! `kerf-api`, the types and rules, and `kerf-core`, the catalog, scheduling, disruption, engine and cloud port.
//! Beside this crate: `kerf-webhooks` (the admission server the hooks plug into), `kerf-certs`, `kerf-aws` (the
//! AWS adapter, built on `kerf-core` alone) and `kerf-cmd` (the binary that joins them). Which module may use
//! which is checked by `tests/layers.rs`.

pub use kerf_api as api;
pub use kerf_core::{catalog, cloud, disruption, engine, interruption, manifest, scheduling};

pub mod admission;
pub mod cli;
pub mod controllers;
pub mod kube;
pub mod simulate;
