pub mod admission;
pub mod api;
pub mod catalog;
pub mod cli;
pub mod cloud;
pub mod manifest;
pub mod scheduling;
pub mod simulate;
