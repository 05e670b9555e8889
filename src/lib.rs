pub mod admission;
pub mod api;
pub mod cli;
pub mod manifest;
