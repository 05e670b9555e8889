//! `kerf validate`: offline admission, the same defaulting and validation as the webhooks.

use super::input::InputArgs;
use crate::admission;
use crate::admission::advice::advise_with_volumes;
use crate::admission::spot::catalog_warnings;
use crate::api::nodepool::NodePool;
use crate::catalog::{Catalog, CatalogSettings, Pricing};
use crate::manifest::{group_kind, Identities};
use crate::scheduling::volumes::{self, VolumeIndex};
use crate::scheduling::{PodInfo, Scheduler};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Manifest files (YAML or JSON, several documents each); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// How to print the accepted objects, defaults filled in.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Yaml)]
    pub output: Output,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    #[command(flatten)]
    pub input: InputArgs,
}

/// The region of the embedded catalog when none is given (`kerf webhook`, `kerf validate`, and the controller's
/// pod advice).
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where the instance types and prices for pod advice come from.
#[derive(clap::Args, Debug, Clone)]
pub struct CatalogArgs {
    /// AWS region of the embedded instance-type catalog.
    #[arg(long, env = "AWS_REGION", default_value = DEFAULT_REGION)]
    pub region: String,
    /// Prices (USD per hour) for on-demand and spot offerings, over the on-demand snapshot kerf ships (which
    /// alone prices spot at on-demand); see docs/catalog.md.
    #[arg(long)]
    pub pricing_file: Option<PathBuf>,
    /// Replaces the embedded catalog with instance types from this file (see docs/catalog.md).
    #[arg(long)]
    pub instance_types: Option<PathBuf>,
}

impl CatalogArgs {
    /// The catalog these arguments describe, with default node settings.
    pub fn load(&self) -> Result<Catalog, String> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
        };
        if let Some(path) = &self.instance_types {
            return Catalog::from_instance_types_json(&read(path)?)
                .map_err(|e| format!("{}: {e}", path.display()));
        }
        let pricing = match &self.pricing_file {
            Some(path) => Pricing::from_json(&read(path)?)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .over(Pricing::snapshot()),
            None => Pricing::snapshot(),
        };
        Catalog::embedded(&self.region, &CatalogSettings::default(), &pricing)
            .map_err(|e| e.to_string())
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Yaml,
    Json,
}

/// Exit codes: every object accepted, some rejected (by the webhooks' rules, or by the apiserver's own checks
/// of names and of two objects with one name), input unreadable (not YAML, a key given twice, or beyond the
/// input limits).
pub const ACCEPTED: u8 = 0;
pub const REJECTED: u8 = 1;
pub const UNREADABLE: u8 = 2;

/// Runs `kerf validate`; returns the exit code.
pub fn run(args: &ValidateArgs, stdout: &mut impl Write, stderr: &mut impl Write) -> u8 {
    let catalog = match args.catalog.load() {
        Ok(catalog) => catalog,
        Err(err) => {
            let _ = writeln!(stderr, "error: {err}");
            return UNREADABLE;
        }
    };
    let mut accepted = Vec::new();
    let mut code = ACCEPTED;
    let mut reader = args.input.reader();
    let mut identities = Identities::default();
    for file in &args.files {
        let name = file.display().to_string();
        let documents = match reader.documents(file) {
            Ok(documents) => documents,
            Err(err) => {
                let _ = writeln!(stderr, "error: {name}: {err}");
                return UNREADABLE;
            }
        };
        for document in documents {
            let at = format!("{name}: document {}", document.index);
            if let Err(err) = identities.admit(&document) {
                let _ = writeln!(stderr, "error: {at}: {err}");
                code = REJECTED;
                continue;
            }
            let object = document.object;
            let (group, kind) = group_kind(&object);
            let Some(kind) = admission::for_kind(group, kind) else {
                accepted.push(object);
                continue;
            };
            let admitted = kind.admit(&object, None);
            for warning in &admitted.warnings {
                let _ = writeln!(stderr, "Warning: {at}: {warning}");
            }
            if admitted.errors.is_empty() {
                for warning in catalog_warnings(&admitted.object, &catalog) {
                    let _ = writeln!(stderr, "Warning: {at}: {warning}");
                }
            }
            match admitted.rejection(kind) {
                Some(invalid) => {
                    let _ = writeln!(stderr, "error: {at}: {invalid}");
                    code = REJECTED;
                }
                None => accepted.push(admitted.object),
            }
        }
    }
    if let Err(err) = annotate_pods(&mut accepted, &catalog) {
        let _ = writeln!(stderr, "error: {err}");
        return UNREADABLE;
    }
    if let Err(err) = print(&accepted, args.output, stdout) {
        let _ = writeln!(stderr, "error: cannot print the objects: {err}");
        return UNREADABLE;
    }
    code
}

/// Adds kerf's advice annotations to every Pod, from the NodePools among `objects`, as the pod webhook would.
fn annotate_pods(objects: &mut [Value], catalog: &Catalog) -> Result<(), String> {
    if !objects.iter().any(|o| group_kind(o) == ("", "Pod")) {
        return Ok(());
    }
    let nodepools: Vec<NodePool> = objects
        .iter()
        .filter(|o| group_kind(o) == (admission::NODEPOOL.group, admission::NODEPOOL.kind))
        .filter_map(|o| serde_json::from_value(o.clone()).ok())
        .collect();
    let scheduler = Scheduler::new(&nodepools, catalog);
    let volumes = volume_index(objects);
    for object in objects.iter_mut().filter(|o| group_kind(o) == ("", "Pod")) {
        let pod: Pod = serde_json::from_value(object.clone())
            .map_err(|e| format!("a Pod does not parse: {e}"))?;
        let info = PodInfo::from_pod(&pod).map_err(|e| e.to_string())?;
        let advice = advise_with_volumes(&scheduler, info, &pod, &volumes);
        let annotations = advice.annotations().map_err(|e| e.to_string())?;
        let metadata = object
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| json!({})));
        if let Some(Value::Object(metadata)) = metadata {
            let existing = metadata.entry("annotations").or_insert_with(|| json!({}));
            for (key, value) in annotations {
                existing[key] = Value::String(value);
            }
        }
    }
    Ok(())
}

/// The PersistentVolumeClaims, PersistentVolumes and StorageClasses among `objects`, where pods' volumes let them
/// go (objects that do not parse are left out: the apiserver would refuse them).
/// A claim that names a volume among them is bound to it, as the PersistentVolume controller would bind it.
fn volume_index(objects: &[Value]) -> VolumeIndex {
    fn of<T: serde::de::DeserializeOwned>(objects: &[Value], kind: (&str, &str)) -> Vec<T> {
        objects
            .iter()
            .filter(|o| group_kind(o) == kind)
            .filter_map(|o| serde_json::from_value(o.clone()).ok())
            .collect()
    }
    let mut claims = of(objects, ("", "PersistentVolumeClaim"));
    let volumes = of(objects, ("", "PersistentVolume"));
    volumes::complete_bindings(&mut claims, &volumes);
    VolumeIndex::from_objects(
        claims.into_iter().map(Arc::new),
        volumes.into_iter().map(Arc::new),
        of(objects, ("storage.k8s.io", "StorageClass"))
            .into_iter()
            .map(Arc::new),
    )
}

fn print(
    objects: &[Value],
    output: Output,
    out: &mut impl Write,
) -> Result<(), Box<dyn std::error::Error>> {
    match output {
        Output::Yaml => {
            for object in objects {
                write!(out, "---\n{}", serde_yaml::to_string(object)?)?;
            }
        }
        Output::Json => {
            let document = match objects {
                [one] => one.clone(),
                many => json!({"apiVersion": "v1", "kind": "List", "items": many}),
            };
            writeln!(out, "{}", serde_json::to_string_pretty(&document)?)?;
        }
    }
    Ok(())
}
