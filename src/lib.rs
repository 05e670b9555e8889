pub mod admission;
pub mod api;
