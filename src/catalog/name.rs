//! The parts of an EC2 instance type name that become labels: `m5d.2xlarge` is category `m`, generation `5`,
//! family `m5d` and size `2xlarge`.
//!
//! The rules are Karpenter's: category and generation come from the name's start (letters, an optional
//! `-<n>tb` memory tag as in `u-6tb1`, then digits) when a `.` follows somewhere; family and size are the two
//! halves around the only `.`.

/// The labelled parts of an instance type name; a part the name does not have is `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameParts<'a> {
    pub category: Option<&'a str>,
    pub generation: Option<&'a str>,
    pub family: Option<&'a str>,
    pub size: Option<&'a str>,
}

/// Splits `name` into its labelled parts.
pub fn parse_name(name: &str) -> NameParts<'_> {
    let (family, size) = match name.split_once('.') {
        Some((family, size)) if !size.contains('.') => (Some(family), Some(size)),
        _ => (None, None),
    };
    let (category, generation) = category_and_generation(name).unzip();
    NameParts {
        category,
        generation,
        family,
        size,
    }
}

/// `letters [-<digits>tb] digits …​.…`: the leading letters and the digits after them.
fn category_and_generation(name: &str) -> Option<(&str, &str)> {
    let letters = leading(name, |b| b.is_ascii_lowercase());
    if letters == 0 {
        return None;
    }
    let mut rest = &name[letters..];
    if let Some(tagged) = rest.strip_prefix('-') {
        let digits = leading(tagged, |b| b.is_ascii_digit());
        if digits > 0 && tagged[digits..].starts_with("tb") {
            rest = &tagged[digits + 2..];
        }
    }
    let digits = leading(rest, |b| b.is_ascii_digit());
    (digits > 0 && rest[digits..].contains('.')).then(|| (&name[..letters], &rest[..digits]))
}

/// How many leading bytes of `text` satisfy `accept`.
fn leading(text: &str, accept: impl Fn(u8) -> bool) -> usize {
    text.bytes().take_while(|&b| accept(b)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(
        category: &'a str,
        generation: &'a str,
        family: &'a str,
        size: &'a str,
    ) -> NameParts<'a> {
        NameParts {
            category: Some(category),
            generation: Some(generation),
            family: Some(family),
            size: Some(size),
        }
    }

    #[test]
    fn splits_names_like_karpenter() {
        let cases = [
            ("m5d.2xlarge", parts("m", "5", "m5d", "2xlarge")),
            ("m5.large", parts("m", "5", "m5", "large")),
            ("u-6tb1.metal", parts("u", "1", "u-6tb1", "metal")),
            ("u-12tb1.112xlarge", parts("u", "1", "u-12tb1", "112xlarge")),
            ("u7i-6tb.112xlarge", parts("u", "7", "u7i-6tb", "112xlarge")),
            ("c7gn.metal-48xl", parts("c", "7", "c7gn", "metal-48xl")),
            ("x2iedn.32xlarge", parts("x", "2", "x2iedn", "32xlarge")),
            ("im4gn.large", parts("im", "4", "im4gn", "large")),
            ("mac2-m2pro.metal", parts("mac", "2", "mac2-m2pro", "metal")),
            ("p6-b200.48xlarge", parts("p", "6", "p6-b200", "48xlarge")),
            ("c7i-flex.large", parts("c", "7", "c7i-flex", "large")),
            ("g4dn.12xlarge", parts("g", "4", "g4dn", "12xlarge")),
        ];
        for (name, expected) in cases {
            assert_eq!(parse_name(name), expected, "{name}");
        }
    }

    #[test]
    fn names_without_the_shape_leave_parts_unset() {
        assert_eq!(parse_name("fake-it-0"), NameParts::default());
        assert_eq!(
            parse_name("custom.big"),
            NameParts {
                family: Some("custom"),
                size: Some("big"),
                ..NameParts::default()
            }
        );
        assert_eq!(
            parse_name("a1.b.c"),
            NameParts {
                category: Some("a"),
                generation: Some("1"),
                ..NameParts::default()
            }
        );
        assert_eq!(parse_name("u-6tb"), NameParts::default());
    }
}
