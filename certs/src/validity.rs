//! When a certificate stops being valid.
//!
//! Only `notAfter` is needed, so this walks the DER with yasna (already a dependency of rcgen)
//! instead of pulling in a full X.509 parser.

use std::time::{Duration, SystemTime};

use rustls_pki_types::{pem::PemObject, CertificateDer};
use yasna::{
    tags::{TAG_GENERALIZEDTIME, TAG_UTCTIME},
    ASN1Error, ASN1ErrorKind, BERReader, Tag,
};

/// Whether the first certificate in `cert_pem` expires within `min_remaining` of `now`.
///
/// A certificate that cannot be read needs renewal too: a controller rotating a stored Secret
/// should replace garbage rather than keep it.
pub fn needs_renewal(cert_pem: &str, now: SystemTime, min_remaining: Duration) -> bool {
    let Ok(leaf) = CertificateDer::from_pem_slice(cert_pem.as_bytes()) else {
        return true;
    };
    match (not_after(&leaf), now.checked_add(min_remaining)) {
        (Ok(not_after), Some(deadline)) => not_after <= deadline,
        _ => true,
    }
}

/// Reads `tbsCertificate.validity.notAfter` from a DER certificate (RFC 5280 §4.1).
pub(crate) fn not_after(der: &[u8]) -> Result<SystemTime, ASN1Error> {
    yasna::parse_der(der, |certificate| {
        certificate.read_sequence(|certificate| {
            let not_after = certificate.next().read_sequence(|tbs| {
                tbs.read_optional(|version| {
                    version.read_tagged(Tag::context(0), |v| v.read_der())
                })?;
                tbs.next().read_der()?; // serialNumber
                tbs.next().read_der()?; // signature algorithm
                tbs.next().read_der()?; // issuer
                let not_after = tbs.next().read_sequence(|validity| {
                    read_time(validity.next())?; // notBefore
                    read_time(validity.next())
                })?;
                // subject, subjectPublicKeyInfo and the optional unique ids and extensions
                while tbs.read_optional(|rest| rest.read_der())?.is_some() {}
                Ok(not_after)
            })?;
            certificate.next().read_der()?; // signatureAlgorithm
            certificate.next().read_der()?; // signatureValue
            Ok(not_after)
        })
    })
}

/// `Time ::= CHOICE { utcTime UTCTime, generalTime GeneralizedTime }`
fn read_time(reader: BERReader<'_, '_>) -> Result<SystemTime, ASN1Error> {
    let tag = reader.lookahead_tag()?;
    let time = if tag == TAG_UTCTIME {
        *reader.read_utctime()?.datetime()
    } else if tag == TAG_GENERALIZEDTIME {
        *reader.read_generalized_time()?.datetime()
    } else {
        return Err(ASN1Error::new(ASN1ErrorKind::Invalid));
    };
    Ok(SystemTime::from(time))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SelfSigned;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// X.509 times have whole seconds; compare at that precision.
    fn unix_seconds(time: SystemTime) -> u64 {
        time.duration_since(SystemTime::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    }

    #[test]
    fn reads_not_after_of_generated_certificate() {
        let now = SystemTime::now();
        let generated = SelfSigned::generate(["localhost"], now, 30 * DAY).expect("generate");
        let leaf = CertificateDer::from_pem_slice(generated.cert_pem.as_bytes()).expect("pem");
        let read = not_after(&leaf).expect("not_after");
        assert_eq!(unix_seconds(read), unix_seconds(now + 30 * DAY));
    }

    #[test]
    fn renewal_is_due_inside_the_margin() {
        let now = SystemTime::now();
        let pem = SelfSigned::generate(["localhost"], now, 30 * DAY)
            .expect("generate")
            .cert_pem;
        assert!(!needs_renewal(&pem, now, 29 * DAY));
        assert!(needs_renewal(&pem, now, 31 * DAY));
        assert!(needs_renewal(&pem, now + 31 * DAY, Duration::ZERO));
    }

    #[test]
    fn unreadable_certificates_need_renewal() {
        assert!(needs_renewal("", SystemTime::now(), Duration::ZERO));
        let bogus = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert!(needs_renewal(bogus, SystemTime::now(), Duration::ZERO));
    }
}
