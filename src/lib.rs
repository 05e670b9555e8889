pub mod admission;
pub mod api;
pub mod catalog;
pub mod cli;
pub mod kube;
pub mod manifest;
pub mod scheduling;
pub mod simulate;
