//! The `kerf` command line.

pub mod controller;
pub mod input;
pub mod simulate;
pub mod snapshot;
pub mod validate;
pub mod webhook;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kerf",
    version,
    about = "A Kubernetes node provisioner for AWS, API-compatible with Karpenter v1"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `kerf=debug`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", global = true)]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Apply the webhooks' defaulting and validation to manifests, offline.
    Validate(validate::ValidateArgs),
    /// Serve the admission webhooks over HTTPS.
    Webhook(webhook::WebhookArgs),
    /// Run the controllers: provision nodes for pending pods, carry NodeClaims through their lifecycle, terminate.
    Controller(Box<controller::ControllerArgs>),
    /// Simulate a scenario: which nodes kerf would launch for its pods, and what they cost.
    Simulate(simulate::SimulateArgs),
    /// Write the cluster (NodePools, EC2NodeClasses, NodeClaims, Nodes, pods, PDBs, DaemonSets) as a scenario for
    /// `kerf simulate`.
    Snapshot(snapshot::SnapshotArgs),
    /// Print the CustomResourceDefinitions.
    Crds(CrdsArgs),
}

#[derive(clap::Args, Debug)]
pub struct CrdsArgs {
    /// With Karpenter's CEL validation rules (`x-kubernetes-validations`), for an apiserver that evaluates them
    /// (1.25 and later). Without it, the CRDs the chart installs, which every supported apiserver accepts.
    #[arg(long)]
    pub cel_rules: bool,
}
