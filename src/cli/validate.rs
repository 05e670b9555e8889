//! `kerf validate`: offline admission, the same defaulting and validation as the webhooks.

use crate::admission;
use crate::manifest::{group_kind, parse_documents};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Manifest files (YAML or JSON, several documents each); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// How to print the accepted objects, defaults filled in.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Yaml)]
    pub output: Output,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Yaml,
    Json,
}

/// Exit codes: every object accepted, some rejected, input unreadable.
pub const ACCEPTED: u8 = 0;
pub const REJECTED: u8 = 1;
pub const UNREADABLE: u8 = 2;

/// Runs `kerf validate`; returns the exit code.
pub fn run(args: &ValidateArgs, stdout: &mut impl Write, stderr: &mut impl Write) -> u8 {
    let mut accepted = Vec::new();
    let mut code = ACCEPTED;
    for file in &args.files {
        let name = file.display().to_string();
        let objects = match read(file)
            .map_err(|e| e.to_string())
            .and_then(|t| parse_documents(&t).map_err(|e| e.to_string()))
        {
            Ok(objects) => objects,
            Err(err) => {
                let _ = writeln!(stderr, "error: {name}: {err}");
                return UNREADABLE;
            }
        };
        for object in objects {
            let (group, kind) = group_kind(&object);
            let Some(kind) = admission::for_kind(group, kind) else {
                accepted.push(object);
                continue;
            };
            let admitted = kind.admit(&object, None);
            for warning in &admitted.warnings {
                let _ = writeln!(stderr, "Warning: {name}: {warning}");
            }
            match admitted.rejection(kind) {
                Some(invalid) => {
                    let _ = writeln!(stderr, "error: {name}: {invalid}");
                    code = REJECTED;
                }
                None => accepted.push(admitted.object),
            }
        }
    }
    if let Err(err) = print(&accepted, args.output, stdout) {
        let _ = writeln!(stderr, "error: cannot print the objects: {err}");
        return UNREADABLE;
    }
    code
}

fn read(file: &PathBuf) -> std::io::Result<String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(file)
    }
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
