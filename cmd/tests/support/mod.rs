//! What the simulate tests share.

use kerf::catalog::{Catalog, CatalogSettings, Pricing};

/// us-east-1 with the on-demand prices of the shared reference data (read, not copied into the repository).
pub fn catalog() -> Catalog {
    let prices = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/ec2-on-demand-prices.json"
    ))
    .expect("../shared/data/ec2-on-demand-prices.json beside the checkout");
    Catalog::embedded(
        "us-east-1",
        &CatalogSettings::default(),
        &Pricing::from_json(&prices).expect("pricing"),
    )
    .expect("catalog")
}
