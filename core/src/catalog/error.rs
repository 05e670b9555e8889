//! What can go wrong building a catalog, worded so the reader knows what to fix.

use thiserror::Error;

use super::quantity::QuantityError;

/// Why a catalog, a pricing file or catalog settings could not be built.
#[derive(Debug, Error, PartialEq)]
pub enum CatalogError {
    /// A JSON document does not have the documented shape; `path` is where (`instanceTypes[3].cpu`).
    #[error("{document}: at {path}: {message} (the format is documented in docs/catalog.md)")]
    Json {
        document: &'static str,
        path: String,
        message: String,
    },
    #[error("invalid quantity {value:?} for {resource}: {source}")]
    Quantity {
        resource: String,
        value: String,
        #[source]
        source: QuantityError,
    },
    #[error("no embedded instance-type catalog for region {region:?}; embedded regions: {}; pass --instance-types FILE to describe another region", embedded.join(", "))]
    UnknownRegion {
        region: String,
        embedded: Vec<&'static str>,
    },
    #[error("instance type {name:?}: {reason}")]
    InstanceType { name: String, reason: String },
    #[error("{what}: a price must be a finite number of USD per hour, at least 0, not {price}")]
    Price { what: String, price: f64 },
    #[error("EC2NodeClass {field} = {value:?}: {reason}")]
    Setting {
        field: String,
        value: String,
        reason: String,
    },
}

/// Deserializes `text` as `T`, reporting the JSON path of the first value that does not fit.
pub(super) fn from_json<'de, T: serde::Deserialize<'de>>(
    document: &'static str,
    text: &'de str,
) -> Result<T, CatalogError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        CatalogError::Json {
            document,
            path: error.path().to_string(),
            message: error.into_inner().to_string(),
        }
    })?;
    deserializer.end().map_err(|error| CatalogError::Json {
        document,
        path: ".".to_owned(),
        message: error.to_string(),
    })?;
    Ok(value)
}
