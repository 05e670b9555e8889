//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`), parsed straight to an integer number of
//! thousandths ("milli-units"), the finest unit a scheduling decision needs.
//!
//! The scheduler parses every pod request with this, so the usual short quantity is parsed with plain
//! integer arithmetic and no allocation; only numbers with more than 19 significant digits take the
//! arbitrary-precision path. Rounding follows `resource.Quantity.MilliValue()`: anything finer than a
//! milli-unit rounds away from zero, so `0.1m` of CPU is `1` and a request is never under-counted.

use thiserror::Error;

use crate::api::validation::grammar::split_leading;

/// Why a string is not a Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error("the quantity is empty")]
    Empty,
    #[error("the number part is missing or malformed")]
    Number,
    #[error("unknown suffix {0:?} (use one of n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent like e3)")]
    Suffix(String),
    #[error("the value does not fit in a signed 64-bit number of milli-units")]
    TooLarge,
}

/// Parses a Kubernetes quantity into milli-units, rounding anything finer away from zero.
///
/// Grammar (as `resource.ParseQuantity`): an optional sign, digits with an optional fraction (`1`, `1.5`,
/// `1.`, `.5`), then an optional suffix: binary `Ki Mi Gi Ti Pi Ei`, decimal `n u m k M G T P E`, or a
/// decimal exponent `e`/`E` followed by an optionally signed integer.
pub fn parse_quantity(text: &str) -> Result<i64, QuantityError> {
    if text.is_empty() {
        return Err(QuantityError::Empty);
    }
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(unsigned) => (true, unsigned),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (number, suffix) = split_leading(unsigned, |c| c.is_ascii_digit() || c == '.');
    let (integer, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (integer.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(QuantityError::Number);
    }
    let scale = Scale::of(suffix)?;
    // value = digits × 2^binary_shift × 10^(decimal_exponent − fraction digits); in milli-units the
    // decimal exponent grows by 3.
    let fraction_len = i64::try_from(fraction.len()).map_err(|_| QuantityError::Number)?;
    let exponent = scale
        .decimal_exponent
        .checked_add(3)
        .and_then(|e| e.checked_sub(fraction_len))
        .ok_or(QuantityError::TooLarge)?;
    let magnitude = match small_digits(integer, fraction) {
        Some(digits) => scale_small(digits, scale.binary_shift, exponent)?,
        None => scale_big(integer, fraction, scale.binary_shift, exponent)?,
    };
    // The sign goes on before the range check, so that `i64::MIN` milli-units (whose magnitude is one more
    // than `i64::MAX`) parses back from its own rendering.
    let magnitude = i128::try_from(magnitude).map_err(|_| QuantityError::TooLarge)?;
    i64::try_from(if negative { -magnitude } else { magnitude })
        .map_err(|_| QuantityError::TooLarge)
}

/// Parses a quantity and rounds it up (away from zero) to whole units: what `Quantity.Value()` returns, and
/// how bytes, pods and extended resources are counted.
pub fn parse_units(text: &str) -> Result<i64, QuantityError> {
    parse_quantity(text).map(milli_to_units)
}

/// Whole units from milli-units, rounding away from zero like [`parse_quantity`].
pub fn milli_to_units(milli: i64) -> i64 {
    let units = milli / 1000;
    match milli % 1000 {
        0 => units,
        r if r > 0 => units + 1,
        _ => units - 1,
    }
}

/// A canonical quantity string for milli-units: `2`, `100m`.
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// A canonical quantity string for a whole number of bytes: the largest binary suffix that divides it
/// exactly (`2Gi`, `10Mi`), else the plain number.
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    SUFFIXES
        .iter()
        .find(|(_, shift)| bytes != 0 && bytes % (1i64 << shift) == 0)
        .map_or_else(
            || bytes.to_string(),
            |(suffix, shift)| format!("{}{suffix}", bytes >> shift),
        )
}

/// What a suffix multiplies the number by: `2^binary_shift × 10^decimal_exponent`.
struct Scale {
    binary_shift: u32,
    decimal_exponent: i64,
}

impl Scale {
    fn of(suffix: &str) -> Result<Self, QuantityError> {
        let decimal = |decimal_exponent| Scale {
            binary_shift: 0,
            decimal_exponent,
        };
        let binary = |binary_shift| Scale {
            binary_shift,
            decimal_exponent: 0,
        };
        Ok(match suffix {
            "" => decimal(0),
            "n" => decimal(-9),
            "u" => decimal(-6),
            "m" => decimal(-3),
            "k" => decimal(3),
            "M" => decimal(6),
            "G" => decimal(9),
            "T" => decimal(12),
            "P" => decimal(15),
            "E" => decimal(18),
            "Ki" => binary(10),
            "Mi" => binary(20),
            "Gi" => binary(30),
            "Ti" => binary(40),
            "Pi" => binary(50),
            "Ei" => binary(60),
            _ => decimal(exponent(suffix).ok_or_else(|| QuantityError::Suffix(suffix.to_owned()))?),
        })
    }
}

/// The integer of a decimal-exponent suffix (`e3`, `E-2`, `e+6`), if `suffix` is one.
fn exponent(suffix: &str) -> Option<i64> {
    let rest = suffix.strip_prefix(['e', 'E'])?;
    let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Exponents beyond any i64 quantity are clamped: they still over- or underflow below.
    Some(
        rest.parse::<i64>()
            .unwrap_or(if rest.starts_with('-') { -1_000 } else { 1_000 }),
    )
}

/// The digits as one integer when there are at most 19 significant ones (the fast path).
fn small_digits(integer: &str, fraction: &str) -> Option<u64> {
    let mut value: u64 = 0;
    let mut significant = 0;
    for b in integer.bytes().chain(fraction.bytes()) {
        if value == 0 && b == b'0' {
            continue;
        }
        significant += 1;
        if significant > 19 {
            return None;
        }
        value = value * 10 + u64::from(b - b'0');
    }
    Some(value)
}

/// `ceil(digits × 2^shift × 10^exponent)` for a digit count that fits in a `u64`.
fn scale_small(digits: u64, binary_shift: u32, exponent: i64) -> Result<u128, QuantityError> {
    if digits == 0 {
        return Ok(0);
    }
    // digits < 10^19 and 2^shift ≤ 2^60, so the product stays below 2^124.
    let value = u128::from(digits) << binary_shift;
    let scaled = if exponent >= 0 {
        u32::try_from(exponent)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
            .and_then(|p| value.checked_mul(p))
            .ok_or(QuantityError::TooLarge)?
    } else {
        match u32::try_from(-exponent)
            .ok()
            .and_then(|e| 10u128.checked_pow(e))
        {
            Some(divisor) => value.div_ceil(divisor),
            // 10^39 and beyond exceed any value, so only the sign of the remainder is left.
            None => u128::from(value != 0),
        }
    };
    Ok(scaled)
}

/// The exact path for long numbers: multiply the decimal digit string by `2^shift`, then move the decimal
/// point by `exponent` and round up whatever falls below it.
fn scale_big(
    integer: &str,
    fraction: &str,
    binary_shift: u32,
    exponent: i64,
) -> Result<u128, QuantityError> {
    let mut digits: Vec<u8> = integer
        .bytes()
        .chain(fraction.bytes())
        .map(|b| b - b'0')
        .collect();
    let multiplier = 1u128 << binary_shift;
    let mut carry: u128 = 0;
    for digit in digits.iter_mut().rev() {
        let product = u128::from(*digit) * multiplier + carry;
        *digit = (product % 10) as u8;
        carry = product / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
    let len = i64::try_from(digits.len()).map_err(|_| QuantityError::TooLarge)?;
    // Digits at index < whole_len are whole milli-units; the rest are below one and round up.
    let whole_len = len.saturating_add(exponent).clamp(0, len) as usize;
    let (whole, below) = digits.split_at(whole_len);
    let round_up = below.iter().any(|&d| d != 0);
    let trailing_zeros = u32::try_from(exponent.max(0)).map_err(|_| QuantityError::TooLarge)?;
    let mut value: u128 = 0;
    for &digit in whole {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u128::from(digit)))
            .ok_or(QuantityError::TooLarge)?;
    }
    if value != 0 {
        value = 10u128
            .checked_pow(trailing_zeros)
            .and_then(|p| value.checked_mul(p))
            .ok_or(QuantityError::TooLarge)?;
    }
    value
        .checked_add(u128::from(round_up))
        .ok_or(QuantityError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KI: i64 = 1024;
    const MI: i64 = 1024 * KI;
    const GI: i64 = 1024 * MI;

    #[test]
    fn parses_every_suffix_to_milli_units() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("1", 1_000),
            ("+1", 1_000),
            ("-1", -1_000),
            ("100m", 100),
            ("1500m", 1_500),
            ("0.1", 100),
            ("1.", 1_000),
            (".5", 500),
            ("2e3", 2_000_000),
            ("2E3", 2_000_000),
            ("2e+3", 2_000_000),
            ("5e-3", 5),
            ("1n", 1),
            ("1000000n", 1),
            ("1u", 1),
            ("2000u", 2),
            ("1k", 1_000_000),
            ("1M", 1_000_000_000),
            ("1G", 1_000_000_000_000),
            ("1T", 1_000_000_000_000_000),
            ("1P", 1_000_000_000_000_000_000),
            ("1Ki", KI * 1000),
            ("1Mi", MI * 1000),
            ("1.5Gi", GI * 3 / 2 * 1000),
            ("1Ti", 1024 * GI * 1000),
            ("2Pi", 2 * 1024 * 1024 * GI * 1000),
            ("0.5Ki", 512_000),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_quantity(text), Ok(*expected), "{text}");
        }
        // 10^18 units is 10^21 milli-units: beyond i64, although `Quantity` itself could hold it.
        assert_eq!(parse_quantity("1E"), Err(QuantityError::TooLarge));
    }

    #[test]
    fn rounds_finer_than_milli_away_from_zero() {
        assert_eq!(parse_quantity("0.1m"), Ok(1));
        assert_eq!(parse_quantity("1.0001"), Ok(1_001));
        assert_eq!(parse_quantity("1n"), Ok(1));
        assert_eq!(parse_quantity("-0.1m"), Ok(-1));
        assert_eq!(parse_quantity("1e-40"), Ok(1));
        assert_eq!(parse_quantity("0e-40"), Ok(0));
        // 1/1024 Ki = 1 byte exactly; 0.001Ki = 1.024 bytes = 1024 milli exactly.
        assert_eq!(parse_quantity("0.001Ki"), Ok(1_024));
        assert_eq!(parse_quantity("0.0001Ki"), Ok(103)); // 102.4 milli
        assert_eq!(parse_units("0.0001Ki"), Ok(1));
        assert_eq!(parse_units("1.5"), Ok(2));
        assert_eq!(parse_units("100Mi"), Ok(100 * MI));
    }

    #[test]
    fn rejects_malformed_quantities() {
        for text in [
            "",
            "m",
            ".",
            "1..2",
            "1.2.3",
            "1K",
            "1Kib",
            "1e",
            "1e1.5",
            "1ee3",
            "abc",
            "1 Gi",
            " 1",
            "--1",
            "1mi",
            "0x10",
            "é",
            "1é",
            "-é",
            "1Gié",
            "1e🦀",
            "1eé3",
            "1.5\u{301}",
            "+-1",
        ] {
            assert!(parse_quantity(text).is_err(), "{text:?} should not parse");
        }
        assert_eq!(
            parse_quantity("1Kb"),
            Err(QuantityError::Suffix("Kb".into()))
        );
        assert_eq!(parse_quantity("10E"), Err(QuantityError::TooLarge));
        assert_eq!(parse_quantity("1e400"), Err(QuantityError::TooLarge));
        assert_eq!(parse_quantity("8Ei"), Err(QuantityError::TooLarge));
        assert_eq!(parse_quantity("1é"), Err(QuantityError::Suffix("é".into())));
    }

    #[test]
    fn the_whole_i64_range_parses_back_from_its_rendering() {
        for milli in [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX] {
            assert_eq!(parse_quantity(&format_milli(milli)), Ok(milli), "{milli}");
        }
        assert_eq!(
            parse_quantity("-9223372036854775809m"),
            Err(QuantityError::TooLarge)
        );
    }

    #[test]
    fn long_numbers_take_the_exact_path() {
        // 20+ significant digits: the arbitrary-precision path must still be exact.
        assert_eq!(parse_quantity("1.00000000000000000001"), Ok(1_001));
        assert_eq!(parse_quantity("0.000000000000000000001Ki"), Ok(1));
        assert_eq!(
            parse_quantity("12345678901234567890m"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(
            parse_quantity("1234567890123456789.0m"),
            Ok(1_234_567_890_123_456_789)
        );
        assert_eq!(
            parse_quantity("1.0000000000000000001Ei"),
            Err(QuantityError::TooLarge)
        );
        assert_eq!(parse_quantity("0.00000000000000000000000001Ei"), Ok(1)); // 0.0000288 milli-bytes → up
        assert_eq!(
            parse_quantity("00000000000000000000000000002Mi"),
            Ok(2 * MI * 1000)
        );
    }

    #[test]
    fn fast_and_exact_paths_agree() {
        let numbers = [
            "0", "1", "7", "15", "0.1", "1.5", "3.14159", "0.0003", "999.999", "1234567",
        ];
        let shifts = [0, 10, 20, 30, 40];
        for number in numbers {
            let (integer, fraction) = number.split_once('.').unwrap_or((number, ""));
            let digits = small_digits(integer, fraction).expect("short");
            for shift in shifts {
                for exponent in -12..=6 {
                    assert_eq!(
                        scale_small(digits, shift, exponent),
                        scale_big(integer, fraction, shift, exponent),
                        "{number} << {shift} e{exponent}"
                    );
                }
            }
        }
    }

    #[test]
    fn formats_canonical_strings() {
        assert_eq!(format_milli(1_000), "1");
        assert_eq!(format_milli(100), "100m");
        assert_eq!(format_bytes(2 * GI), "2Gi");
        assert_eq!(format_bytes(10 * MI), "10Mi");
        assert_eq!(format_bytes(1_500), "1500");
        assert_eq!(format_bytes(0), "0");
        assert_eq!(milli_to_units(-1_500), -2);
    }
}
