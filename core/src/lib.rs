//! kerf's pure core: what kerf decides, as functions of a cluster snapshot, a catalog and a clock.
//!
//! Owns the instance catalog and its prices, scheduling, disruption, the engine's steps that both the controller
//! and `kerf simulate` run, the cloud port (`CloudProvider`) with its in-memory cloud, interruption messages and
//! manifest reading. Uses only `kerf-api`: no Kubernetes client, no AWS SDK. Which module may use which is checked
//! by the workspace's `tests/layers.rs`.

/// The API types, under the name the core's modules use for them.
pub use kerf_api as api;

pub mod catalog;
pub mod cloud;
pub mod disruption;
pub mod engine;
pub mod interruption;
pub mod manifest;
pub mod scheduling;
