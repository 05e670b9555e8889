use super::ami::{validate_alias, UNSUPPORTED_ALIAS_FAMILY};
use super::kubelet::{quoted_list, RESERVED_RESOURCES};
use super::*;

fn alias_errors(alias: &str) -> Vec<String> {
    let mut findings = Findings::default();
    validate_alias(alias, &FieldPath::new("alias"), &mut findings);
    findings.errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn presence_rules() {
    let any = Presence::AnyOf(&["tags", "id"]);
    assert!(any.broken_by(&[]));
    assert!(any.broken_by(&["ownerID"]));
    assert!(!any.broken_by(&["id"]));
    let alone = Presence::Alone("id", &["tags", "name"]);
    assert!(alone.broken_by(&["id", "name"]));
    assert!(!alone.broken_by(&["id"]));
    assert!(!alone.broken_by(&["tags", "name"]));
}

#[test]
fn aliases() {
    for ok in [
        "al2023@latest",
        "al2@v20240625",
        "bottlerocket@v1.10.0",
        "windows2025@latest",
        "windows2022@latest@x",
    ] {
        assert_eq!(alias_errors(ok), Vec::<String>::new(), "{ok}");
    }
    let malformed = r#"alias: Invalid value: "string": 'alias' is improperly formatted, must match the format 'family@version'"#;
    let unsupported = format!(r#"alias: Invalid value: "string": {UNSUPPORTED_ALIAS_FAMILY}"#);
    let windows =
        r#"alias: Invalid value: "string": windows families may only specify version 'latest'"#;
    assert_eq!(alias_errors("al2023@"), vec![malformed]);
    assert_eq!(alias_errors("al2023"), vec![malformed]);
    assert_eq!(alias_errors("al2023@v1\n"), vec![malformed]);
    assert_eq!(
        alias_errors("@latest"),
        vec![malformed.to_owned(), unsupported.clone()]
    );
    assert_eq!(alias_errors("ubuntu@latest"), vec![unsupported]);
    assert_eq!(alias_errors("windows2019@v1"), vec![windows]);
    assert_eq!(alias_errors("windows2019"), vec![malformed, windows]);
}

#[test]
fn lists_print_like_karpenter() {
    assert_eq!(
        quoted_list(&RESERVED_RESOURCES),
        "['cpu','memory','ephemeral-storage','pid']"
    );
}
