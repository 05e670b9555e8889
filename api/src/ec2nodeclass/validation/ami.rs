//! AMI selection (api-rules.md §3.2): the presence rules of `amiSelectorTerms`, aliases (`family@version`) and
//! `amiFamily`, which an alias implies and which is required without one.

use super::super::types::*;
use super::{check_terms, AMI_TERMS};
use crate::validation::{FieldError, FieldPath, Findings, SchemaType};

/// An alias family, the `amiFamily` it implies, and the message when `amiFamily` contradicts it.
struct AliasFamily {
    name: &'static str,
    family: AmiFamily,
    windows: bool,
    mismatch: &'static str,
}

const ALIAS_FAMILIES: [AliasFamily; 6] = [
    AliasFamily {
        name: "al2",
        family: AmiFamily::Al2,
        windows: false,
        mismatch: "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
    },
    AliasFamily {
        name: "al2023",
        family: AmiFamily::Al2023,
        windows: false,
        mismatch: "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    },
    AliasFamily {
        name: "bottlerocket",
        family: AmiFamily::Bottlerocket,
        windows: false,
        mismatch:
            "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias",
    },
    AliasFamily {
        name: "windows2019",
        family: AmiFamily::Windows2019,
        windows: true,
        mismatch:
            "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias",
    },
    AliasFamily {
        name: "windows2022",
        family: AmiFamily::Windows2022,
        windows: true,
        mismatch:
            "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias",
    },
    AliasFamily {
        name: "windows2025",
        family: AmiFamily::Windows2025,
        windows: true,
        mismatch:
            "if set, amiFamily must be 'Windows2025' or 'Custom' when using a Windows2025 alias",
    },
];

pub(super) const UNSUPPORTED_ALIAS_FAMILY: &str = "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'";

/// The family part of an alias: the text before its first `@` (all of it when there is none).
fn alias_family_name(alias: &str) -> &str {
    alias.split_once('@').map_or(alias, |(family, _)| family)
}

fn alias_family(alias: &str) -> Option<&'static AliasFamily> {
    let name = alias_family_name(alias);
    ALIAS_FAMILIES.iter().find(|family| family.name == name)
}

/// The term rules, the alias rules and the `amiFamily` rules.
pub(super) fn validate_ami_selection(
    terms: &[AmiSelectorTerm],
    family: Option<AmiFamily>,
    spec: &FieldPath,
    findings: &mut Findings,
) {
    check_terms(Some(terms), &AMI_TERMS, spec, findings);
    let list = spec.child(AMI_TERMS.field);
    if terms.len() > 1 && terms.iter().any(|t| t.alias.is_some()) {
        let message = "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms";
        findings.error(FieldError::rule(&list, SchemaType::Array, message));
    }
    for (i, term) in terms.iter().enumerate() {
        if let Some(alias) = &term.alias {
            validate_alias(alias, &list.index(i).child("alias"), findings);
        }
    }
    validate_ami_family(terms, family, spec, findings);
}

/// An alias is `family@version`, with a known family, and Windows families only take `latest`.
pub(super) fn validate_alias(alias: &str, path: &FieldPath, findings: &mut Findings) {
    let version = alias.split_once('@').map(|(_, version)| version);
    let family = alias_family_name(alias);
    // CEL's `self.matches('^[a-zA-Z0-9]+@.+$')`: `.` matches anything but a newline.
    let well_formed = !family.is_empty()
        && family.bytes().all(|b| b.is_ascii_alphanumeric())
        && version.is_some_and(|v| !v.is_empty() && !v.contains('\n'));
    if !well_formed {
        let message = "'alias' is improperly formatted, must match the format 'family@version'";
        findings.error(FieldError::rule(path, SchemaType::String, message));
    }
    match alias_family(alias) {
        None => findings.error(FieldError::rule(
            path,
            SchemaType::String,
            UNSUPPORTED_ALIAS_FAMILY,
        )),
        // 4c: upstream's `self.split('@')[1]` errors generically when there is no `@`; kerf gives the message.
        Some(family)
            if family.windows && version.and_then(|v| v.split('@').next()) != Some("latest") =>
        {
            let message = "windows families may only specify version 'latest'";
            findings.error(FieldError::rule(path, SchemaType::String, message));
        }
        Some(_) => {}
    }
}

/// `amiFamily` (at `spec`, type `object`): required without an alias, and consistent with the alias when set.
fn validate_ami_family(
    terms: &[AmiSelectorTerm],
    family: Option<AmiFamily>,
    spec: &FieldPath,
    findings: &mut Findings,
) {
    let aliases: Vec<&str> = terms.iter().filter_map(|t| t.alias.as_deref()).collect();
    if let Some(family) = family {
        for alias_family in &ALIAS_FAMILIES {
            let used = aliases
                .iter()
                .any(|alias| alias_family_name(alias) == alias_family.name);
            if used && family != alias_family.family && family != AmiFamily::Custom {
                findings.error(FieldError::rule(
                    spec,
                    SchemaType::Object,
                    alias_family.mismatch,
                ));
            }
        }
    } else if aliases.is_empty() {
        let message = "must specify amiFamily if amiSelectorTerms does not contain an alias";
        findings.error(FieldError::rule(spec, SchemaType::Object, message));
    }
}
