//! TLS material for kerf's admission webhooks.
//!
//! * [`load_certified_key`] reads a PEM certificate chain and private key, naming the file that is
//!   wrong when something is.
//! * [`ReloadingCertResolver`] serves the current key and re-reads the files on a timer, so a
//!   Secret rotated by cert-manager (an atomic symlink swap inside the mounted volume) is picked
//!   up without a restart and without inotify.
//! * [`server_config`] builds the rustls server configuration the webhook server listens with.
//! * [`SelfSigned`] makes a CA and a serving certificate for installs without cert-manager, and
//!   [`needs_renewal`] tells a controller when to make new ones.

mod error;
mod pem;
mod resolver;
mod self_signed;
mod server_config;
mod validity;

pub use error::CertError;
pub use pem::load_certified_key;
pub use resolver::ReloadingCertResolver;
pub use self_signed::{PemPaths, SelfSigned, DEFAULT_VALIDITY};
pub use server_config::server_config;
pub use validity::needs_renewal;
