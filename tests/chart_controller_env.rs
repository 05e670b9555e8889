//! The chart's controller Deployment sets only environment variables `kerf controller` reads, and every chart
//! setting that maps to a flag reaches it: a renamed flag or a misspelt variable would otherwise be ignored
//! silently (clap does not complain about variables it does not know). Read from the template's text, since the
//! tests here have no `helm` (the e2e chart test renders it).

use clap::CommandFactory;
use kerf::cli::Cli;
use std::collections::BTreeSet;

const TEMPLATE: &str = include_str!("../charts/kerf/templates/controller.yaml");
const SCHEMA: &str = include_str!("../charts/kerf/values.schema.json");

/// Variables the container gets that are not `kerf controller` settings.
const NOT_FLAGS: [&str; 2] = [
    // The pod's name, for the Lease identity (read directly).
    "POD_NAME",
    // mimalloc's own setting.
    "MIMALLOC_ALLOW_THP",
];

/// The names of the container's environment variables, as the template writes them (`{name: X, ...}` or
/// `- name: X`).
fn template_variables() -> BTreeSet<String> {
    TEMPLATE
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("- {name: ")
                .or_else(|| line.strip_prefix("- name: "))?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// The environment variables `kerf controller` (and the global flags) read.
fn controller_variables() -> BTreeSet<String> {
    let cli = Cli::command();
    let controller = cli
        .find_subcommand("controller")
        .expect("a controller subcommand");
    cli.get_arguments()
        .chain(controller.get_arguments())
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_variable_the_chart_sets_is_one_the_controller_reads() {
    let chart = template_variables();
    let known = controller_variables();
    for name in ["PREFERENCE_POLICY", "MIN_VALUES_POLICY", "SCHEDULER_CONFIG"] {
        assert!(chart.contains(name), "the chart does not set {name}");
        assert!(known.contains(name), "kerf controller does not read {name}");
    }
    let unknown: Vec<&String> = chart
        .iter()
        .filter(|name| !known.contains(*name) && !NOT_FLAGS.contains(&name.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "the chart sets variables kerf controller does not read: {unknown:?}"
    );
}

/// `settings.schedulerConfig` is in the values schema with the shape `--scheduler-config` takes, and a document
/// the schema's example shape describes is one the controller accepts.
#[test]
fn the_scheduler_config_value_has_the_flags_shape() {
    let schema: serde_json::Value = serde_json::from_str(SCHEMA).expect("values.schema.json");
    let config = &schema["properties"]["settings"]["properties"]["schedulerConfig"];
    let constraint = &config["properties"]["podTopologySpread"]["properties"]["defaultConstraints"]
        ["items"]["properties"];
    for field in ["maxSkew", "topologyKey", "whenUnsatisfiable", "minDomains"] {
        assert!(constraint.get(field).is_some(), "{field} missing: {config}");
    }
    // What the schema refuses by `additionalProperties: false`, the flag refuses too.
    assert!(constraint.get("labelSelector").is_none());
    let rendered = serde_json::json!({"podTopologySpread": {"defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]}});
    let parsed = kerf::scheduling::SchedulerConfig::parse(&rendered.to_string()).expect("accepted");
    assert_eq!(parsed.default_constraints.len(), 1);
}
