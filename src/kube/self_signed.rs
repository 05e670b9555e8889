//! The certificate Secret of the self-signed mode: one `kubernetes.io/tls` Secret in kerf's namespace holds the CA
//! and the serving certificate, so every replica serves the same certificate and one `caBundle` trusts them all.
//! The first replica to find it missing (or near expiry) issues a new pair; the others adopt what it stored.

use super::CALL_TIMEOUT;
use ::kube::api::{Api, ObjectMeta, PostParams};
use ::kube::Client;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kerf_certs::{needs_renewal, CertError, SelfSigned};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// A stored certificate with less than this left is replaced: long before it expires, and with room for the poll
/// interval of every replica.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);

const CERT_KEY: &str = "tls.crt";
const KEY_KEY: &str = "tls.key";
const CA_KEY: &str = "ca.crt";
const PEM_END: &str = "-----END CERTIFICATE-----";

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot {action} Secret {namespace}/{name}")]
    Api {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: ::kube::Error,
    },
    #[error(
        "the apiserver did not answer within {CALL_TIMEOUT:?} ({action} Secret {namespace}/{name})"
    )]
    Timeout {
        action: &'static str,
        namespace: String,
        name: String,
    },
    #[error(
        "Secret {namespace}/{name} kept changing while kerf tried to store a certificate in it"
    )]
    Contended { namespace: String, name: String },
    #[error("cannot issue a certificate")]
    Issue(#[source] CertError),
}

/// What the self-signed mode needs to know.
#[derive(Clone, Debug)]
pub struct SecretSettings {
    pub namespace: String,
    pub name: String,
    /// The serving certificate's DNS names or IP addresses.
    pub names: Vec<String>,
    /// Validity of a new serving certificate.
    pub validity: Duration,
}

/// The certificate material stored in `data`, when it is complete, consistent and not due for renewal at `now`.
pub fn usable(data: &BTreeMap<String, ByteString>, now: SystemTime) -> Option<SelfSigned> {
    let text = |key: &str| {
        data.get(key)
            .and_then(|bytes| String::from_utf8(bytes.0.clone()).ok())
    };
    let material = SelfSigned {
        ca_cert_pem: text(CA_KEY)?,
        cert_pem: text(CERT_KEY)?,
        key_pem: text(KEY_KEY)?,
    };
    let fresh = !needs_renewal(&material.cert_pem, now, RENEW_BEFORE);
    (fresh && material.check().is_ok() && material.ca_cert_pem.contains(PEM_END))
        .then_some(material)
}

/// A new pair for `settings`. The CA bundle also keeps the first CA of `previous` (the CA being replaced), so
/// replicas still serving the old certificate stay trusted until they pick up the new one.
pub fn issue(
    settings: &SecretSettings,
    previous: Option<&BTreeMap<String, ByteString>>,
    now: SystemTime,
) -> Result<SelfSigned, CertError> {
    let mut material =
        SelfSigned::generate(settings.names.iter().cloned(), now, settings.validity)?;
    let previous_ca = previous
        .and_then(|data| data.get(CA_KEY))
        .and_then(|bytes| std::str::from_utf8(&bytes.0).ok())
        .and_then(|pem| pem.find(PEM_END).map(|end| &pem[..end + PEM_END.len()]));
    if let Some(previous_ca) = previous_ca {
        material.ca_cert_pem = format!("{}{previous_ca}\n", material.ca_cert_pem);
    }
    Ok(material)
}

/// The Secret's data for `material`.
pub fn secret_data(material: &SelfSigned) -> BTreeMap<String, ByteString> {
    [
        (CERT_KEY, &material.cert_pem),
        (KEY_KEY, &material.key_pem),
        (CA_KEY, &material.ca_cert_pem),
    ]
    .into_iter()
    .map(|(key, pem)| (key.to_owned(), ByteString(pem.as_bytes().to_vec())))
    .collect()
}

/// Reads the Secret and returns its certificate, issuing and storing a new one when it is missing, incomplete or
/// near expiry. Concurrent replicas race through optimistic concurrency: a create or update that loses (409) makes
/// this read again and adopt the winner's certificate.
pub async fn ensure(client: Client, settings: &SecretSettings) -> Result<SelfSigned, SecretError> {
    let secrets: Api<Secret> = Api::namespaced(client, &settings.namespace);
    let call = Call { settings };
    for _ in 0..5 {
        let now = SystemTime::now();
        let stored = call.run("read", secrets.get_opt(&settings.name)).await?;
        let data = stored
            .as_ref()
            .and_then(|s| s.data.clone())
            .unwrap_or_default();
        if let Some(material) = usable(&data, now) {
            return Ok(material);
        }
        let material = issue(settings, Some(&data), now).map_err(SecretError::Issue)?;
        let written = match stored {
            None => {
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(settings.name.clone()),
                        namespace: Some(settings.namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/managed-by".to_owned(),
                            "kerf".to_owned(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    type_: Some("kubernetes.io/tls".to_owned()),
                    data: Some(secret_data(&material)),
                    ..Secret::default()
                };
                tracing::info!(secret = %settings.name, "storing a new self-signed certificate");
                call.run("create", secrets.create(&PostParams::default(), &secret))
                    .await
            }
            Some(mut secret) => {
                // Keeps the resourceVersion just read: a replica that renewed meanwhile makes this a 409.
                secret.data = Some(secret_data(&material));
                tracing::info!(secret = %settings.name, "replacing the stored certificate (missing, invalid or near expiry)");
                call.run(
                    "update",
                    secrets.replace(&settings.name, &PostParams::default(), &secret),
                )
                .await
            }
        };
        match written {
            Ok(_) => return Ok(material),
            Err(SecretError::Api {
                source: ::kube::Error::Api(status),
                ..
            }) if status.code == 409 => continue,
            Err(error) => return Err(error),
        }
    }
    Err(SecretError::Contended {
        namespace: settings.namespace.clone(),
        name: settings.name.clone(),
    })
}

/// One apiserver call on the Secret, with a deadline and an error that names it.
struct Call<'a> {
    settings: &'a SecretSettings,
}

impl Call<'_> {
    async fn run<T>(
        &self,
        action: &'static str,
        call: impl std::future::Future<Output = Result<T, ::kube::Error>>,
    ) -> Result<T, SecretError> {
        let (namespace, name) = (self.settings.namespace.clone(), self.settings.name.clone());
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(SecretError::Api {
                action,
                namespace,
                name,
                source,
            }),
            Err(_) => Err(SecretError::Timeout {
                action,
                namespace,
                name,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn settings() -> SecretSettings {
        SecretSettings {
            namespace: "kerf".into(),
            name: "kerf-webhook-tls".into(),
            names: vec!["kerf-webhook.kerf.svc".into()],
            validity: 365 * DAY,
        }
    }

    #[test]
    fn a_fresh_stored_certificate_is_reused() {
        let now = SystemTime::now();
        let material = issue(&settings(), None, now).expect("issue");
        let data = secret_data(&material);
        assert_eq!(usable(&data, now + 300 * DAY), Some(material.clone()));
        // Within RENEW_BEFORE of expiry it is due.
        assert_eq!(usable(&data, now + 340 * DAY), None);
    }

    #[test]
    fn incomplete_or_mismatched_data_is_not_usable() {
        let now = SystemTime::now();
        let data = secret_data(&issue(&settings(), None, now).expect("issue"));
        for missing in [CERT_KEY, KEY_KEY, CA_KEY] {
            let mut incomplete = data.clone();
            incomplete.remove(missing);
            assert_eq!(usable(&incomplete, now), None, "without {missing}");
        }
        let other = secret_data(&issue(&settings(), None, now).expect("issue"));
        let mut mixed = data.clone();
        mixed.insert(KEY_KEY.into(), other[KEY_KEY].clone());
        assert_eq!(usable(&mixed, now), None);
        assert_eq!(usable(&BTreeMap::new(), now), None);
    }

    #[test]
    fn a_renewal_keeps_trusting_the_previous_ca() {
        let now = SystemTime::now();
        let first = issue(&settings(), None, now).expect("issue");
        let renewed = issue(&settings(), Some(&secret_data(&first)), now).expect("renew");
        assert!(
            renewed.ca_cert_pem.ends_with(&first.ca_cert_pem),
            "{}",
            renewed.ca_cert_pem
        );
        assert_eq!(renewed.ca_cert_pem.matches(PEM_END).count(), 2);
        // A second renewal keeps only the CA it replaces, not the whole history.
        let again = issue(&settings(), Some(&secret_data(&renewed)), now).expect("renew");
        assert_eq!(again.ca_cert_pem.matches(PEM_END).count(), 2);
        assert!(usable(&secret_data(&again), now).is_some());
    }
}
