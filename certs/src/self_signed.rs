//! A CA and a serving certificate for installs without cert-manager.

use std::{
    fs::OpenOptions,
    io::Write,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};

use crate::{
    pem::{self, PemFile},
    CertError,
};

/// Validity of a serving certificate unless the caller asks otherwise.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The CA outlives many serving certificates; only its certificate is kept (see [`SelfSigned`]).
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Certificates start a little in the past so a node whose clock lags does not reject them.
const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// 9999-12-31T23:59:59Z: GeneralizedTime has four year digits.
const LATEST_X509_TIME: Duration = Duration::from_secs(253_402_300_799);

/// A freshly generated CA certificate and a serving certificate + key signed by it (ECDSA P-256).
///
/// The CA's private key is dropped after signing: renewing means generating a new pair and
/// re-injecting [`Self::ca_bundle_base64`] into the webhook configurations.
#[derive(Clone, PartialEq, Eq)]
pub struct SelfSigned {
    /// The CA certificate, for a webhook configuration's `caBundle`.
    pub ca_cert_pem: String,
    /// The serving certificate (`tls.crt`).
    pub cert_pem: String,
    /// The serving certificate's PKCS#8 private key (`tls.key`).
    pub key_pem: String,
}

/// Shows the certificates, never the private key (it would end up in logs and test output).
impl std::fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelfSigned")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Where [`SelfSigned::write_files`] put each file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl SelfSigned {
    /// Generates a CA valid for ten years and a serving certificate valid for `validity` from
    /// `now`, for `names`: DNS names (`kerf-webhook.kerf.svc`) or IP addresses (`127.0.0.1`).
    pub fn generate(
        names: impl IntoIterator<Item = impl Into<String>>,
        now: SystemTime,
        validity: Duration,
    ) -> Result<Self, CertError> {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        let not_before = now.checked_sub(CLOCK_SKEW).unwrap_or(now);

        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "kerf webhook CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.not_before = not_before.into();
        ca.not_after = x509_time(now, CA_VALIDITY)?.into();
        let ca_key = new_key()?;
        let ca_cert = ca.self_signed(&ca_key).map_err(CertError::Generate)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut leaf = CertificateParams::new(names.clone()).map_err(CertError::Generate)?;
        if let Some(first) = names.first() {
            leaf.distinguished_name
                .push(DnType::CommonName, first.as_str());
        }
        leaf.is_ca = IsCa::ExplicitNoCa;
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.use_authority_key_identifier_extension = true;
        leaf.not_before = not_before.into();
        leaf.not_after = x509_time(now, validity)?.into();
        let leaf_key = new_key()?;
        let leaf_cert = leaf
            .signed_by(&leaf_key, &issuer)
            .map_err(CertError::Generate)?;

        Ok(Self {
            ca_cert_pem: ca_cert.pem(),
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
        })
    }

    /// Writes `tls.crt`, `tls.key` (mode 0600) and `ca.crt` into `dir`, the key names of a
    /// Kubernetes TLS Secret. Each file is written to a temporary name and renamed over the
    /// old one, so a reader never sees a half-written file.
    pub fn write_files(&self, dir: &Path) -> Result<PemPaths, CertError> {
        let paths = PemPaths {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            ca: dir.join("ca.crt"),
        };
        self.write_key_pair(&paths.cert, &paths.key)?;
        write_atomically(&paths.ca, &self.ca_cert_pem, 0o644)?;
        Ok(paths)
    }

    /// Writes the serving certificate to `cert` and its key to `key` (mode 0600), each atomically: what a
    /// [`crate::ReloadingCertResolver`] watching those two files then serves.
    pub fn write_key_pair(&self, cert: &Path, key: &Path) -> Result<(), CertError> {
        write_atomically(cert, &self.cert_pem, 0o644)?;
        write_atomically(key, &self.key_pem, 0o600)
    }

    /// Checks that the serving certificate and key parse and belong together, e.g. after reading them back from a
    /// Secret; errors name the Secret keys `tls.crt` and `tls.key`.
    pub fn check(&self) -> Result<(), CertError> {
        let file = |name: &str, pem: &str| PemFile {
            path: PathBuf::from(name),
            bytes: pem.as_bytes().to_vec(),
        };
        pem::parse(
            &file("tls.crt", &self.cert_pem),
            &file("tls.key", &self.key_pem),
        )
        .map(|_| ())
    }

    /// The CA certificate PEM, base64-encoded: the value of a webhook's `clientConfig.caBundle`.
    pub fn ca_bundle_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_cert_pem)
    }
}

fn new_key() -> Result<KeyPair, CertError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(CertError::Generate)
}

/// `now + validity`, refused when X.509 (and rcgen's date type) cannot represent it.
fn x509_time(now: SystemTime, validity: Duration) -> Result<SystemTime, CertError> {
    now.checked_add(validity)
        .filter(|end| *end <= SystemTime::UNIX_EPOCH + LATEST_X509_TIME)
        .ok_or(CertError::ValidityOutOfRange)
}

fn write_atomically(path: &Path, contents: &str, mode: u32) -> Result<(), CertError> {
    let error = |source| CertError::Write {
        path: path.to_owned(),
        source,
    };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(&temporary).map_err(error)?;
    file.write_all(contents.as_bytes()).map_err(error)?;
    file.sync_all().map_err(error)?;
    std::fs::rename(&temporary, path).map_err(error)
}

#[cfg(test)]
mod tests {
    use rustls_pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime};

    use super::*;

    fn generate(names: &[&str]) -> SelfSigned {
        SelfSigned::generate(names.iter().copied(), SystemTime::now(), DEFAULT_VALIDITY)
            .expect("generate")
    }

    /// Verifies the serving certificate for `name` against the CA, as the apiserver would.
    fn verify(generated: &SelfSigned, name: &str) -> Result<(), rustls::Error> {
        let ca = CertificateDer::from_pem_slice(generated.ca_cert_pem.as_bytes()).expect("ca");
        let leaf = CertificateDer::from_pem_slice(generated.cert_pem.as_bytes()).expect("leaf");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca).expect("add root");
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .expect("verifier");
        let name = ServerName::try_from(name.to_owned()).expect("server name");
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            verifier.as_ref(),
            &leaf,
            &[],
            &name,
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
    }

    #[test]
    fn serving_certificate_chains_to_the_ca_for_each_name() {
        let names = [
            "kerf-webhook.kerf.svc",
            "kerf-webhook.kerf.svc.cluster.local",
            "127.0.0.1",
        ];
        let generated = generate(&names);
        for name in names {
            verify(&generated, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(verify(&generated, "other.kerf.svc").is_err());
    }

    #[test]
    fn validity_beyond_year_9999_is_refused() {
        let error = SelfSigned::generate(
            ["localhost"],
            SystemTime::now(),
            Duration::from_secs(u64::MAX / 2),
        )
        .err();
        assert!(matches!(error, Some(CertError::ValidityOutOfRange)));
    }

    #[test]
    fn invalid_dns_name_is_an_error() {
        let error =
            SelfSigned::generate(["bücher.example"], SystemTime::now(), DEFAULT_VALIDITY).err();
        assert!(matches!(error, Some(CertError::Generate(_))), "{error:?}");
    }

    #[test]
    fn writes_secret_shaped_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let generated = generate(&["localhost"]);
        let paths = generated.write_files(dir.path()).expect("write");
        assert_eq!(paths.cert, dir.path().join("tls.crt"));
        let read = |path: &Path| std::fs::read_to_string(path).expect("read");
        assert_eq!(read(&paths.cert), generated.cert_pem);
        assert_eq!(read(&paths.key), generated.key_pem);
        assert_eq!(read(&paths.ca), generated.ca_cert_pem);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&paths.key)
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn check_accepts_a_pair_and_refuses_mixed_ones() {
        let (one, other) = (generate(&["localhost"]), generate(&["localhost"]));
        assert!(one.check().is_ok());
        let mixed = SelfSigned {
            key_pem: other.key_pem,
            ..one
        };
        assert_eq!(
            mixed.check().map_err(|e| e.to_string()),
            Err("the private key in tls.key does not match the certificate in tls.crt".to_owned())
        );
    }

    #[test]
    fn ca_bundle_is_base64_of_the_ca_pem() {
        let generated = generate(&["localhost"]);
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(generated.ca_bundle_base64())
            .expect("base64");
        assert_eq!(decoded, generated.ca_cert_pem.as_bytes());
    }
}
