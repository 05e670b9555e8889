//! Go's `time.ParseDuration`, which Karpenter applies to a pod's `karpenter.sh/do-not-disrupt` value: an
//! optional sign, then one or more decimal numbers (fractions allowed) each with a unit of `ns`, `us`, `µs`,
//! `ms`, `s`, `m` or `h`; or a bare `0`. The result fits Go's 64-bit nanoseconds.

use k8s_openapi::jiff::SignedDuration;

use crate::api::validation::grammar::split_leading;

/// Fraction digits kept, as Go keeps the leading ones that fit its 64-bit accumulator: 18 digits resolve a
/// nanosecond even of an hour (1 ns is 2.8e-13 h), and keep `fraction × unit` far inside an `i128`.
const FRACTION_DIGITS: usize = 18;

/// Parses `text` as Go does; `None` when Go would return an error.
pub fn parse_go_duration(text: &str) -> Option<SignedDuration> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(SignedDuration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let numeric = |c: char| c.is_ascii_digit() || c == '.';
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let (number, after) = split_leading(rest, numeric);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return None;
        }
        let (unit, next) = split_leading(after, |c| !numeric(c));
        let unit_nanos: i128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        // Go keeps the fraction's leading digits that matter and truncates the rest.
        let (mut fraction_nanos, mut scale): (i128, i128) = (0, 1);
        for digit in fraction.bytes().take(FRACTION_DIGITS) {
            fraction_nanos = fraction_nanos * 10 + i128::from(digit - b'0');
            scale *= 10;
        }
        total = whole
            .checked_mul(unit_nanos)?
            .checked_add(fraction_nanos.checked_mul(unit_nanos)? / scale)?
            .checked_add(total)?;
        if total > i128::from(i64::MAX) {
            return None;
        }
        rest = next;
    }
    let nanos = i64::try_from(if negative { -total } else { total }).ok()?;
    Some(SignedDuration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_parses() {
        let secs = |s: i64| Some(SignedDuration::from_secs(s));
        assert_eq!(parse_go_duration("0"), secs(0));
        assert_eq!(parse_go_duration("30m"), secs(1800));
        assert_eq!(parse_go_duration("1h30m"), secs(5400));
        assert_eq!(parse_go_duration("1.5h"), secs(5400));
        assert_eq!(parse_go_duration(".5m"), secs(30));
        assert_eq!(parse_go_duration("2.m"), secs(120));
        assert_eq!(parse_go_duration("+10s"), secs(10));
        assert_eq!(parse_go_duration("-1h"), secs(-3600));
        assert_eq!(
            parse_go_duration("1s500ms"),
            Some(SignedDuration::from_millis(1500))
        );
        assert_eq!(
            parse_go_duration("3µs"),
            Some(SignedDuration::from_micros(3))
        );
        assert_eq!(
            parse_go_duration("2562047h47m16.854775807s"),
            Some(SignedDuration::from_nanos(i64::MAX))
        );
        // 30 fraction digits of an hour once overflowed `fraction × unit` (a panic in debug builds).
        assert_eq!(
            parse_go_duration(&format!("0.{}h", "9".repeat(30))),
            Some(SignedDuration::from_nanos(3_599_999_999_999))
        );
        assert_eq!(
            parse_go_duration(&format!("1.{}s", "0".repeat(1000))),
            secs(1)
        );
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in [
            "",
            "-",
            "true",
            "1",
            "1d",
            "h",
            ".h",
            "1..5h",
            "1h 30m",
            "2562047h47m16.854775808s",
            "99999999999999999999h",
            "1é",
            "é1s",
            "1sé",
            "1🦀",
            "-é",
            "1s\u{b5}",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
