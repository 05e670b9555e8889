//! kerf-certs
