//! The parts of an EC2 instance type name that become labels: `m5d.2xlarge` is category `m`, generation `5`,
//! family `m5d` and size `2xlarge`.
//!
//! The rules are Karpenter's: category and generation come from the name's start (letters, an optional
//! `-<n>tb` memory tag as in `u-6tb1`, then digits) when a `.` follows somewhere; family and size are the two
//! halves around the only `.`.

use crate::api::validation::grammar::split_leading;

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
    let (category, rest) = split_leading(name, |c| c.is_ascii_lowercase());
    if category.is_empty() {
        return None;
    }
    // Skip a memory tag such as `-6tb` (`u-6tb1.metal`); anything else after a `-` is not one.
    let untagged = rest
        .strip_prefix('-')
        .map(|tagged| split_leading(tagged, |c| c.is_ascii_digit()))
        .filter(|(size, _)| !size.is_empty())
        .and_then(|(_, after)| after.strip_prefix("tb"))
        .unwrap_or(rest);
    let (generation, after) = split_leading(untagged, |c| c.is_ascii_digit());
    (!generation.is_empty() && after.contains('.')).then_some((category, generation))
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

    #[test]
    fn multi_byte_names_split_at_character_boundaries() {
        assert_eq!(
            parse_name("mé5.large"),
            NameParts {
                family: Some("mé5"),
                size: Some("large"),
                ..NameParts::default()
            }
        );
        assert_eq!(parse_name("m5é.🦀").category, Some("m"));
        assert_eq!(parse_name("u-6é1.metal").generation, None);
        assert_eq!(parse_name("u-6t\u{301}b1.x").generation, None);
        assert_eq!(parse_name("é"), NameParts::default());
    }
}
