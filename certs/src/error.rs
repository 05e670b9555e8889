//! The one error type of this crate.

use std::{io, path::PathBuf};

/// Why TLS material could not be loaded, generated or written.
///
/// File errors name the file, so an operator reading the log knows which key of the mounted
/// Secret to look at.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The file could not be read (most often: it does not exist).
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file has a PEM section that does not parse (truncated, bad base64).
    #[error("{} is not valid PEM", path.display())]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// The file holds no `CERTIFICATE` section.
    #[error("no certificate in {}", path.display())]
    NoCertificate { path: PathBuf },
    /// The leaf certificate is not a well-formed X.509 certificate.
    #[error("the certificate in {} is not a valid X.509 certificate", path.display())]
    InvalidCertificate {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The file holds no PKCS#8, PKCS#1 or SEC1 private key section.
    #[error("no private key in {}", path.display())]
    NoPrivateKey { path: PathBuf },
    /// The private key parses as PEM but rustls cannot sign with it.
    #[error("the private key in {} cannot be used", path.display())]
    UnusableKey {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    /// Both files are fine on their own but belong to different key pairs, e.g. while a
    /// rotation has replaced one file and not yet the other.
    #[error("the private key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    /// The leaf certificate is expired or not yet valid: the apiserver would refuse every handshake.
    #[error("the certificate in {} is valid from {not_before} to {not_after}, not at {now}", path.display())]
    NotValidNow {
        path: PathBuf,
        /// RFC 3339.
        not_before: String,
        /// RFC 3339.
        not_after: String,
        /// RFC 3339.
        now: String,
    },
    /// rustls refused the protocol versions of the server configuration.
    #[error("cannot build the TLS server configuration")]
    Config(#[source] rustls::Error),
    /// The requested validity ends after 9999-12-31, which X.509 cannot express.
    #[error("a certificate cannot be valid beyond the year 9999")]
    ValidityOutOfRange,
    /// rcgen could not build or sign a certificate (e.g. an invalid DNS name).
    #[error("cannot generate a certificate")]
    Generate(#[source] rcgen::Error),
    /// A generated file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
