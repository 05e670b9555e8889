//! Reading a PEM certificate chain and private key into something rustls can serve.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{crypto::aws_lc_rs, sign::CertifiedKey, InconsistentKeys};
use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};

use crate::{
    validity::{self, Validity},
    CertError,
};

/// Loads the certificate chain (leaf first) and the private key that signs for it.
///
/// Fails, naming the file, when a file is missing, holds no certificate or no key, does not
/// parse, or when the key does not belong to the leaf certificate.
pub fn load_certified_key(
    cert_pem_path: impl AsRef<Path>,
    key_pem_path: impl AsRef<Path>,
) -> Result<Arc<CertifiedKey>, CertError> {
    let cert = PemFile::read(cert_pem_path.as_ref())?;
    let key = PemFile::read(key_pem_path.as_ref())?;
    Ok(parse(&cert, &key)?.key)
}

/// A file's bytes together with its path, so errors can say which file is wrong and the
/// reloader can tell whether the contents changed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PemFile {
    pub(crate) path: PathBuf,
    pub(crate) bytes: Vec<u8>,
}

impl PemFile {
    /// Reads the whole file. The files are a few KiB on a tmpfs Secret volume, so a blocking
    /// read is cheaper than a hop to a blocking thread.
    pub(crate) fn read(path: &Path) -> Result<Self, CertError> {
        let bytes = std::fs::read(path).map_err(|source| CertError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            path: path.to_owned(),
            bytes,
        })
    }
}

/// A usable key with the leaf's validity, read once at load so checks and metrics need not re-parse.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) key: Arc<CertifiedKey>,
    pub(crate) validity: Validity,
}

/// Parses and cross-checks a certificate file and a key file.
pub(crate) fn parse(cert: &PemFile, key: &PemFile) -> Result<Loaded, CertError> {
    let chain = CertificateDer::pem_slice_iter(&cert.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| CertError::Pem {
            path: cert.path.clone(),
            source,
        })?;
    let leaf = chain.first().ok_or_else(|| CertError::NoCertificate {
        path: cert.path.clone(),
    })?;
    let validity = validity::validity(leaf).map_err(|source| CertError::InvalidCertificate {
        path: cert.path.clone(),
        source: Box::new(source),
    })?;

    let private_key = PrivateKeyDer::from_pem_slice(&key.bytes).map_err(|error| match error {
        rustls_pki_types::pem::Error::NoItemsFound => CertError::NoPrivateKey {
            path: key.path.clone(),
        },
        source => CertError::Pem {
            path: key.path.clone(),
            source,
        },
    })?;
    let signing_key = aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(private_key)
        .map_err(|source| CertError::UnusableKey {
            path: key.path.clone(),
            source,
        })?;

    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        // `Unknown` means the key type cannot report its public key; nothing to compare.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(CertError::KeyMismatch {
                cert: cert.path.clone(),
                key: key.path.clone(),
            })
        }
        Err(source) => {
            return Err(CertError::InvalidCertificate {
                path: cert.path.clone(),
                source: Box::new(source),
            })
        }
    }
    Ok(Loaded {
        key: Arc::new(certified),
        validity,
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::SelfSigned;

    fn generate() -> SelfSigned {
        SelfSigned::generate(["localhost"], SystemTime::now(), Duration::from_secs(3600))
            .expect("generate")
    }

    fn file(name: &str, contents: &str) -> PemFile {
        PemFile {
            path: PathBuf::from(name),
            bytes: contents.as_bytes().to_vec(),
        }
    }

    #[test]
    fn loads_generated_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let generated = generate();
        let paths = generated.write_files(dir.path()).expect("write");
        let key = load_certified_key(&paths.cert, &paths.key).expect("load");
        let expected = CertificateDer::from_pem_slice(generated.cert_pem.as_bytes()).expect("pem");
        assert_eq!(key.cert, vec![expected]);
    }

    #[test]
    fn missing_file_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("tls.crt");
        let error = load_certified_key(&missing, &missing).expect_err("missing");
        assert!(matches!(&error, CertError::Read { path, .. } if path == &missing));
        assert!(error.to_string().contains("tls.crt"), "{error}");
    }

    #[test]
    fn garbage_has_no_certificate() {
        let generated = generate();
        let error = parse(
            &file("tls.crt", "garbage"),
            &file("tls.key", &generated.key_pem),
        )
        .expect_err("garbage");
        assert_eq!(error.to_string(), "no certificate in tls.crt");
    }

    #[test]
    fn truncated_pem_is_invalid_pem() {
        let generated = generate();
        let half = &generated.cert_pem[..generated.cert_pem.len() / 2];
        let error = parse(&file("tls.crt", half), &file("tls.key", &generated.key_pem))
            .expect_err("truncated");
        assert!(matches!(error, CertError::Pem { .. }), "{error:?}");
    }

    #[test]
    fn certificate_without_key() {
        let generated = generate();
        let error = parse(
            &file("tls.crt", &generated.cert_pem),
            &file("tls.key", &generated.cert_pem),
        )
        .expect_err("no key");
        assert_eq!(error.to_string(), "no private key in tls.key");
    }

    #[test]
    fn key_of_another_certificate() {
        let (one, other) = (generate(), generate());
        let error = parse(
            &file("tls.crt", &one.cert_pem),
            &file("tls.key", &other.key_pem),
        )
        .expect_err("mismatch");
        assert_eq!(
            error.to_string(),
            "the private key in tls.key does not match the certificate in tls.crt"
        );
    }
}
