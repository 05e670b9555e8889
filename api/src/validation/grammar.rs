//! The shared grammars of api-rules.md §1.3: qualified names, label values, quantities and durations.
//!
//! Each check comes in the two strengths the reference distinguishes: the CRD schema's pattern (what the
//! apiserver enforces, with the upstream pattern text for the message) and Karpenter's runtime check (RT), which
//! adds the Kubernetes length limits and explains what is wrong in the standard Kubernetes words.

/// The upstream CRD pattern for label keys, requirement keys and taint keys/values.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// The upstream CRD pattern for label values.
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// The upstream CRD pattern for resource quantities.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

const QUALIFIED_NAME_FMT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const DNS_SUBDOMAIN_FMT: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE_FMT: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns_subdomain_shape(s: &str) -> bool {
    s.split('.').all(|part| {
        let b = part.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
                lower_alnum(first)
                    && lower_alnum(last)
                    && b.iter().all(|c| lower_alnum(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

/// Whether `s` matches [`QUALIFIED_NAME_PATTERN`] (the schema check: no length limits).
pub fn matches_qualified_name_pattern(s: &str) -> bool {
    match s.split_once('/') {
        None => is_name_part(s),
        Some((prefix, name)) => is_dns_subdomain_shape(prefix) && is_name_part(name),
    }
}

/// Kubernetes' `IsDNS1123Subdomain`: the problems with `s` as a DNS subdomain (an object's name, a label key's
/// prefix), in Kubernetes' words (empty when valid).
pub fn dns_subdomain_problems(s: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if s.len() > 253 {
        problems.push("must be no more than 253 characters".to_owned());
    }
    if !is_dns_subdomain_shape(s) {
        problems.push(DNS_SUBDOMAIN_FMT.to_owned());
    }
    problems
}

/// Kubernetes' `IsQualifiedName`: the problems with `s` as a label key, in Kubernetes' words (empty when valid).
pub fn qualified_name_problems(s: &str) -> Vec<String> {
    // At most one `/`; found without collecting the parts, so a key of many slashes costs nothing extra.
    let (prefix, name) = match s.split_once('/') {
        None => (None, s),
        Some((prefix, name)) if !name.contains('/') => (Some(prefix), name),
        Some(_) => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_FMT} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    let mut problems = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            problems.push("prefix part must be non-empty".to_owned());
        } else {
            problems.extend(
                dns_subdomain_problems(prefix)
                    .into_iter()
                    .map(|problem| format!("prefix part {problem}")),
            );
        }
    }
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".to_owned());
    }
    if !name.is_empty() && !is_name_part(name) {
        problems.push(format!("name part {QUALIFIED_NAME_FMT}"));
    }
    problems
}

/// Whether `s` matches [`LABEL_VALUE_PATTERN`] (no length limit).
pub fn matches_label_value_pattern(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

/// Kubernetes' `IsValidLabelValue`: the problems with `s` as a label value (empty when valid).
pub fn label_value_problems(s: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if s.len() > 63 {
        problems.push("must be no more than 63 characters".to_owned());
    }
    if !matches_label_value_pattern(s) {
        problems.push(LABEL_VALUE_FMT.to_owned());
    }
    problems
}

/// Whether `s` is a Kubernetes resource quantity ([`QUANTITY_PATTERN`]).
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (number, suffix) = split_decimal(s);
    if number.is_empty() {
        return false;
    }
    match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        exponent => match exponent.strip_prefix(['e', 'E']) {
            Some(exp) => {
                let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                let (digits, rest) = split_decimal(exp);
                !digits.is_empty() && rest.is_empty()
            }
            None => false,
        },
    }
}

/// Splits a leading decimal number (`5`, `5.`, `5.5`, `.5`) off `s`; the number is empty when there is none.
fn split_decimal(s: &str) -> (&str, &str) {
    let (integer, rest) = split_leading(s, |c| c.is_ascii_digit());
    let Some(after_dot) = rest.strip_prefix('.') else {
        return (integer, rest);
    };
    let (fraction, after) = split_leading(after_dot, |c| c.is_ascii_digit());
    if integer.is_empty() && fraction.is_empty() {
        return ("", s);
    }
    // `after` is a suffix of `s`, so stripping it cannot fail; the fallback only keeps this function total.
    s.strip_suffix(after)
        .map_or(("", s), |number| (number, after))
}

/// Splits `s` after its longest prefix of characters that `accept`; the split is at a char boundary by
/// construction, so every parser of user text here and in `catalog` and `disruption` cuts with it instead of
/// slicing at a byte count.
pub fn split_leading(s: &str, accept: impl Fn(char) -> bool) -> (&str, &str) {
    s.split_at(s.find(|c: char| !accept(c)).unwrap_or(s.len()))
}

/// Largest duration Go's `time.Duration` holds: 2^63-1 ns, i.e. 2562047h47m16.854775807s.
const MAX_DURATION_NANOS: u128 = i64::MAX as u128;

/// Why a NodePool duration (api-rules.md §1.3) cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DurationError {
    /// Not of the form `(<digits><s|m|h>)+`.
    Malformed,
    /// Well-formed, but longer than Go's 64-bit duration; Karpenter could not decode the object.
    Overflow,
}

impl DurationError {
    /// kerf's message for [`DurationError::Overflow`], giving the largest accepted value.
    pub const OVERFLOW_MESSAGE: &'static str =
        "duration is too long: the largest duration Karpenter can decode is 2562047h47m16s";
}

/// Parses a NodePool duration: one or more `<digits><s|m|h>` groups whose parts add up (`1h30m`, `20m0s`, `1h1h`).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Malformed);
    }
    let mut total: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let (digits, after) = split_leading(rest, |c| c.is_ascii_digit());
        let mut unit = after.chars();
        let unit_nanos: u128 = match (digits.is_empty(), unit.next()) {
            (false, Some('s')) => 1_000_000_000,
            (false, Some('m')) => 60_000_000_000,
            (false, Some('h')) => 3_600_000_000_000,
            _ => return Err(DurationError::Malformed),
        };
        // A run of digits too long for u128 overflows any duration anyway.
        let value: u128 = digits.parse().map_err(|_| DurationError::Overflow)?;
        total = value
            .checked_mul(unit_nanos)
            .and_then(|nanos| total.checked_add(nanos))
            .ok_or(DurationError::Overflow)?;
        rest = unit.as_str();
    }
    if total > MAX_DURATION_NANOS {
        return Err(DurationError::Overflow);
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in [
            "app",
            "example.com/MyName",
            "node.kubernetes.io/instance-type",
            "a_b.c-d",
            "A1",
        ] {
            assert!(matches_qualified_name_pattern(ok), "{ok}");
            assert!(qualified_name_problems(ok).is_empty(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Example.com/x",
            "a/b/c",
            "/x",
            "x/",
            "spaces are not allowed",
            "a..b/c",
            "é",
            "aé/b",
            "a/bé",
            "a/b/c/d/e",
        ] {
            assert!(!matches_qualified_name_pattern(bad), "{bad}");
            assert!(!qualified_name_problems(bad).is_empty(), "{bad}");
        }
        let long_name = "a".repeat(64);
        assert!(matches_qualified_name_pattern(&long_name));
        assert_eq!(
            qualified_name_problems(&long_name),
            vec!["name part must be no more than 63 characters"]
        );
        let long_prefix = format!("{}.com/x", "a".repeat(250));
        assert_eq!(
            qualified_name_problems(&long_prefix),
            vec!["prefix part must be no more than 253 characters"]
        );
    }

    #[test]
    fn split_leading_cuts_at_character_boundaries() {
        let digit = |c: char| c.is_ascii_digit();
        assert_eq!(split_leading("12é3", digit), ("12", "é3"));
        assert_eq!(split_leading("é12", digit), ("", "é12"));
        assert_eq!(split_leading("123", digit), ("123", ""));
        assert_eq!(split_leading("", digit), ("", ""));
        assert_eq!(split_leading("ééa", |c| c == 'é'), ("éé", "a"));
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "my_value", "1.2-3", &"a".repeat(63)] {
            assert!(label_value_problems(ok).is_empty(), "{ok}");
        }
        assert!(!matches_label_value_pattern("-a"));
        assert!(!matches_label_value_pattern("a b"));
        assert!(matches_label_value_pattern(&"a".repeat(64)));
        assert_eq!(
            label_value_problems(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn quantities() {
        for ok in [
            "5", "5.", "5.5", ".5", "+1", "-1", "100m", "1Gi", "2e3", "2E-3", "1.5e+2", "1k", "1E",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in [
            "", ".", "1GB", "Gi", "1 Gi", "1e", "1e1.5.", "--1", "1ki", "e3", "1é", "1.é", "é1",
            "1e🦀", "1eé5", "+é",
        ] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn durations() {
        let secs = |s| parse_duration(s).map(|d| d.as_secs());
        assert_eq!(secs("30s"), Ok(30));
        assert_eq!(secs("1h30m"), Ok(5400));
        assert_eq!(secs("20m0s"), Ok(1200));
        assert_eq!(secs("1h1h"), Ok(7200));
        assert_eq!(secs("720h"), Ok(2_592_000));
        assert_eq!(secs("2562047h"), Ok(2562047 * 3600));
        for bad in [
            "", "1.5h", "-1s", "1d", "1hr", "500ms", "1h 30m", "h", "Never",
        ] {
            assert_eq!(parse_duration(bad), Err(DurationError::Malformed), "{bad}");
        }
        assert_eq!(parse_duration("2562048h"), Err(DurationError::Overflow));
        // Multi-byte characters where a unit or digit belongs: refused, never cut inside a character.
        for bad in ["1é", "1hé", "é1h", "1🦀", "1µs", "1h\u{301}"] {
            assert_eq!(parse_duration(bad), Err(DurationError::Malformed), "{bad}");
        }
        assert_eq!(
            parse_duration("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow)
        );
    }
}
