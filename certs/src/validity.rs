//! When a certificate is valid.
//!
//! Only `notBefore` and `notAfter` are needed, so this walks the DER with yasna (already a
//! dependency of rcgen) instead of pulling in a full X.509 parser.

use std::{
    path::Path,
    time::{Duration, SystemTime},
};

use rustls_pki_types::{pem::PemObject, CertificateDer};
use yasna::{
    tags::{TAG_GENERALIZEDTIME, TAG_UTCTIME},
    ASN1Error, ASN1ErrorKind, BERReader, Tag,
};

use crate::CertError;

/// Whether the first certificate in `cert_pem` expires within `min_remaining` of `now`.
///
/// A certificate that cannot be read needs renewal too: a controller rotating a stored Secret
/// should replace garbage rather than keep it.
pub fn needs_renewal(cert_pem: &str, now: SystemTime, min_remaining: Duration) -> bool {
    let Ok(leaf) = CertificateDer::from_pem_slice(cert_pem.as_bytes()) else {
        return true;
    };
    match (validity(&leaf), now.checked_add(min_remaining)) {
        (Ok(validity), Some(deadline)) => validity.not_after <= deadline,
        _ => true,
    }
}

/// A certificate's `tbsCertificate.validity`: it is valid from `not_before` to `not_after`, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Validity {
    pub(crate) not_before: SystemTime,
    pub(crate) not_after: SystemTime,
}

impl Validity {
    /// Refuses a certificate that is expired or not yet valid at `now`, naming `path` and both dates: serving it
    /// would make every TLS handshake with the apiserver fail.
    pub(crate) fn check(&self, path: &Path, now: SystemTime) -> Result<(), CertError> {
        if self.not_before <= now && now <= self.not_after {
            return Ok(());
        }
        Err(CertError::NotValidNow {
            path: path.to_owned(),
            not_before: rfc3339(self.not_before),
            not_after: rfc3339(self.not_after),
            now: rfc3339(now),
        })
    }
}

/// Reads `tbsCertificate.validity` from a DER certificate (RFC 5280 §4.1).
pub(crate) fn validity(der: &[u8]) -> Result<Validity, ASN1Error> {
    yasna::parse_der(der, |certificate| {
        certificate.read_sequence(|certificate| {
            let validity = certificate.next().read_sequence(|tbs| {
                tbs.read_optional(|version| {
                    version.read_tagged(Tag::context(0), |v| v.read_der())
                })?;
                tbs.next().read_der()?; // serialNumber
                tbs.next().read_der()?; // signature algorithm
                tbs.next().read_der()?; // issuer
                let validity = tbs.next().read_sequence(|validity| {
                    Ok(Validity {
                        not_before: read_time(validity.next())?,
                        not_after: read_time(validity.next())?,
                    })
                })?;
                // subject, subjectPublicKeyInfo and the optional unique ids and extensions
                while tbs.read_optional(|rest| rest.read_der())?.is_some() {}
                Ok(validity)
            })?;
            certificate.next().read_der()?; // signatureAlgorithm
            certificate.next().read_der()?; // signatureValue
            Ok(validity)
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

/// `time` in RFC 3339 at whole seconds, UTC (`2025-01-31T23:59:59Z`); times before 1970 (no certificate this
/// crate loads has one that matters) show as the epoch.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`, for days >= 0).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // March = 0
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
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
    fn reads_the_validity_of_generated_certificate() {
        let now = SystemTime::now();
        let generated = SelfSigned::generate(["localhost"], now, 30 * DAY).expect("generate");
        let leaf = CertificateDer::from_pem_slice(generated.cert_pem.as_bytes()).expect("pem");
        let read = validity(&leaf).expect("validity");
        assert_eq!(unix_seconds(read.not_after), unix_seconds(now + 30 * DAY));
        // Generated certificates start five minutes early, for clocks that lag.
        assert_eq!(
            unix_seconds(read.not_before),
            unix_seconds(now - Duration::from_secs(300))
        );
    }

    #[test]
    fn valid_only_between_its_dates() {
        let at = |seconds: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        let validity = Validity {
            not_before: at(1_700_000_000),
            not_after: at(1_800_000_000),
        };
        let path = Path::new("tls.crt");
        assert!(validity.check(path, at(1_700_000_000)).is_ok());
        assert!(validity.check(path, at(1_800_000_000)).is_ok());
        let expired = validity.check(path, at(1_800_000_001)).err();
        assert_eq!(
            expired.map(|e| e.to_string()).as_deref(),
            Some("the certificate in tls.crt is valid from 2023-11-14T22:13:20Z to 2027-01-15T08:00:00Z, not at 2027-01-15T08:00:01Z")
        );
        assert!(validity.check(path, at(1_699_999_999)).is_err());
    }

    #[test]
    fn rfc3339_dates() {
        let at = |seconds: u64| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(253_402_300_799), "9999-12-31T23:59:59Z");
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00Z"
        );
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
