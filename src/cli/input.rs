//! The manifests `kerf validate` and `kerf simulate` read, and the flags that bound them (docs/limits.md).

use crate::manifest::{parse_documents, read_text, Document, Limits, ManifestError};
use std::path::Path;

#[derive(clap::Args, Debug, Clone)]
pub struct InputArgs {
    /// Refuse input larger than this many bytes (all files together).
    #[arg(long, default_value_t = Limits::default().max_bytes)]
    pub max_input_bytes: usize,
    /// Refuse objects whose collections nest deeper than this (the YAML reader's own ceiling is 128).
    #[arg(long, default_value_t = Limits::default().max_depth as u64,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub max_depth: u64,
    /// Refuse input with more objects than this (documents and `List` items, all files together).
    #[arg(long, default_value_t = Limits::default().max_objects)]
    pub max_objects: usize,
}

impl InputArgs {
    /// A reader of files within these limits.
    pub fn reader(&self) -> InputReader {
        InputReader {
            limits: Limits {
                max_bytes: self.max_input_bytes,
                max_depth: usize::try_from(self.max_depth).unwrap_or(usize::MAX),
                max_objects: self.max_objects,
            },
            bytes: 0,
            objects: 0,
        }
    }
}

/// Reads the files of one command, keeping count of what they hold together.
pub struct InputReader {
    limits: Limits,
    bytes: usize,
    objects: usize,
}

impl InputReader {
    /// The objects of `path` (`-` is standard input).
    pub fn documents(&mut self, path: &Path) -> Result<Vec<Document>, ManifestError> {
        let left = Limits {
            max_bytes: self.limits.max_bytes.saturating_sub(self.bytes),
            max_objects: self.limits.max_objects.saturating_sub(self.objects),
            ..self.limits
        };
        // The limits are the command's, not what this file had left of them.
        let whole = |err| match err {
            ManifestError::TooLarge { .. } => ManifestError::TooLarge {
                limit: self.limits.max_bytes,
            },
            ManifestError::TooManyObjects { index, .. } => ManifestError::TooManyObjects {
                index,
                limit: self.limits.max_objects,
            },
            other => other,
        };
        let text = if path.as_os_str() == "-" {
            read_text(std::io::stdin().lock(), left.max_bytes)
        } else {
            std::fs::File::open(path)
                .map_err(ManifestError::from)
                .and_then(|file| read_text(file, left.max_bytes))
        }
        .map_err(whole)?;
        let documents = parse_documents(&text, &left).map_err(whole)?;
        self.bytes += text.len();
        self.objects += documents.len();
        Ok(documents)
    }
}
