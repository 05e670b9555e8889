//! What the simulate tests share.

use kerf::catalog::{Catalog, CatalogSettings, Pricing};

/// us-east-1 with the on-demand prices of the shared reference data (read, not copied into the repository).
pub fn catalog() -> Catalog {
    priced(&on_demand_prices())
}

fn on_demand_prices() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/ec2-on-demand-prices.json"
    ))
    .expect("../shared/data/ec2-on-demand-prices.json beside the checkout")
}

/// The same catalog with spot prices too: each type's spot price in every zone is `share` of its on-demand one.
#[allow(dead_code)] // not every test binary that shares this module prices spot
pub fn catalog_with_spot(share: f64) -> Catalog {
    let mut prices: serde_json::Value =
        serde_json::from_str(&on_demand_prices()).expect("prices are JSON");
    let spot: serde_json::Map<String, serde_json::Value> = prices["onDemandUsdPerHour"]
        .as_object()
        .expect("onDemandUsdPerHour")
        .iter()
        .map(|(region, types)| {
            let types = types
                .as_object()
                .expect("types")
                .iter()
                .filter_map(|(name, price)| Some((name.clone(), (price.as_f64()? * share).into())))
                .collect::<serde_json::Map<_, _>>();
            (region.clone(), types.into())
        })
        .collect();
    prices["spotUsdPerHour"] = spot.into();
    priced(&prices.to_string())
}

fn priced(prices: &str) -> Catalog {
    Catalog::embedded(
        "us-east-1",
        &CatalogSettings::default(),
        &Pricing::from_json(prices).expect("pricing"),
    )
    .expect("catalog")
}
