//! Instance prices for offline runs (`--pricing-file`) and tests. In a cluster, prices come from the AWS
//! Pricing API and spot price history instead; either way a price kerf does not know stays unknown.
//!
//! The file (docs/catalog.md):
//!
//! ```json
//! {"source": "free text",
//!  "onDemandUsdPerHour": {"us-east-1": {"m5.large": 0.096}},
//!  "spotUsdPerHour": {"us-east-1": {"m5.large": {"us-east-1a": 0.035, "us-east-1b": 0.037},
//!                                   "c5.large": 0.031}}}
//! ```
//!
//! Every member is optional. A spot price is per zone (as EC2 quotes it), or one number for every zone.
//!
//! Without a file, prices come from the on-demand snapshot kerf ships ([`Pricing::snapshot`]); a file's prices
//! go over it ([`Pricing::over`]).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::{from_json, CatalogError};
use super::offering::CapacityType;

/// USD-per-hour prices by region and instance type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pricing {
    source: Option<String>,
    on_demand: BTreeMap<String, BTreeMap<String, f64>>,
    spot: BTreeMap<String, BTreeMap<String, SpotPrice>>,
    /// Karpenter's defaults for a snapshot: a region without on-demand prices takes this region's, and a region
    /// without any spot price prices spot at on-demand (the most spot costs) until spot prices are known.
    defaults: Option<String>,
}

/// The on-demand price snapshot kerf ships (`catalog/on-demand-prices.json`), as Karpenter ships one.
const SNAPSHOT: &str = include_str!("../../../catalog/on-demand-prices.json");
/// The region whose snapshot prices stand in for a region the snapshot lacks (Karpenter's fallback).
const SNAPSHOT_FALLBACK_REGION: &str = "us-east-1";

/// The spot price of one type in one region.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
enum SpotPrice {
    Everywhere(f64),
    ByZone(BTreeMap<String, f64>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PricingFile {
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    on_demand_usd_per_hour: BTreeMap<String, BTreeMap<String, f64>>,
    #[serde(default)]
    spot_usd_per_hour: BTreeMap<String, BTreeMap<String, SpotPrice>>,
}

impl Pricing {
    /// No prices at all: every offering's price is unknown.
    pub fn none() -> Self {
        Self::default()
    }

    /// The shipped on-demand snapshot, with Karpenter's defaults: regions it lacks take us-east-1's prices, and
    /// spot is priced at on-demand until a pricing file or the spot price history says otherwise.
    pub fn snapshot() -> Self {
        let mut pricing = Self::from_json(SNAPSHOT).unwrap_or_default();
        pricing.defaults = Some(SNAPSHOT_FALLBACK_REGION.to_owned());
        pricing
    }

    /// These prices over `base`: a price here wins, `base` fills in the rest (and keeps its defaults).
    pub fn over(self, base: Pricing) -> Pricing {
        let mut merged = base;
        for (region, types) in self.on_demand {
            merged.on_demand.entry(region).or_default().extend(types);
        }
        for (region, types) in self.spot {
            merged.spot.entry(region).or_default().extend(types);
        }
        merged.source = match (self.source, merged.source) {
            (Some(top), Some(bottom)) => Some(format!("{top}; then {bottom}")),
            (top, bottom) => top.or(bottom),
        };
        merged
    }

    /// Reads a pricing file (see the module documentation). Negative, infinite or NaN prices are errors.
    pub fn from_json(text: &str) -> Result<Self, CatalogError> {
        let file: PricingFile = from_json("pricing file", text)?;
        for (region, types) in &file.on_demand_usd_per_hour {
            for (instance_type, price) in types {
                check_price(
                    || format!("pricing file onDemandUsdPerHour.{region}.{instance_type}"),
                    *price,
                )?;
            }
        }
        for (region, types) in &file.spot_usd_per_hour {
            for (instance_type, price) in types {
                let what = || format!("pricing file spotUsdPerHour.{region}.{instance_type}");
                match price {
                    SpotPrice::Everywhere(price) => check_price(what, *price)?,
                    SpotPrice::ByZone(zones) => {
                        for (zone, price) in zones {
                            check_price(|| format!("{}.{zone}", what()), *price)?;
                        }
                    }
                }
            }
        }
        Ok(Pricing {
            source: file.source,
            on_demand: file.on_demand_usd_per_hour,
            spot: file.spot_usd_per_hour,
            defaults: None,
        })
    }

    /// Where the prices come from, as the file's `source` says.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    pub fn on_demand(&self, region: &str, instance_type: &str) -> Option<f64> {
        let prices = match (self.on_demand.get(region), &self.defaults) {
            (Some(prices), _) => prices,
            (None, Some(fallback)) => self.on_demand.get(fallback)?,
            (None, None) => return None,
        };
        prices.get(instance_type).copied()
    }

    pub fn spot(&self, region: &str, instance_type: &str, zone: &str) -> Option<f64> {
        match self.spot.get(region)?.get(instance_type)? {
            SpotPrice::Everywhere(price) => Some(*price),
            SpotPrice::ByZone(zones) => zones.get(zone).copied(),
        }
    }

    /// The price of one offering. Reserved capacity is paid for already: as Karpenter's AWS provider does, it costs
    /// its type's on-demand price divided by [`RESERVED_PRICE_DIVISOR`] (nearly free, yet ordered as on-demand is),
    /// or nothing when that price is unknown.
    pub fn price(
        &self,
        region: &str,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
    ) -> Option<f64> {
        match capacity_type {
            CapacityType::OnDemand => self.on_demand(region, instance_type),
            CapacityType::Spot => self.spot(region, instance_type, zone).or_else(|| {
                let unknown_region = !self.spot.contains_key(region);
                (self.defaults.is_some() && unknown_region)
                    .then(|| self.on_demand(region, instance_type))
                    .flatten()
            }),
            CapacityType::Reserved => Some(
                self.on_demand(region, instance_type)
                    .map_or(0.0, |price| price / RESERVED_PRICE_DIVISOR),
            ),
        }
    }
}

/// What a reserved offering's price is its type's on-demand price divided by.
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// Fails unless `price` is a finite, non-negative number of USD per hour.
pub(super) fn check_price(what: impl FnOnce() -> String, price: f64) -> Result<(), CatalogError> {
    if price.is_finite() && price >= 0.0 {
        Ok(())
    } else {
        Err(CatalogError::Price {
            what: what(),
            price,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_on_demand_and_both_spot_shapes() {
        let pricing = Pricing::from_json(
            r#"{"onDemandUsdPerHour": {"us-east-1": {"m5.large": 0.096}},
                "spotUsdPerHour": {"us-east-1": {"m5.large": {"us-east-1a": 0.035}, "c5.large": 0.031}}}"#,
        )
        .expect("valid pricing file");
        assert_eq!(pricing.on_demand("us-east-1", "m5.large"), Some(0.096));
        assert_eq!(pricing.on_demand("us-west-2", "m5.large"), None);
        assert_eq!(
            pricing.spot("us-east-1", "m5.large", "us-east-1a"),
            Some(0.035)
        );
        assert_eq!(pricing.spot("us-east-1", "m5.large", "us-east-1b"), None);
        assert_eq!(
            pricing.spot("us-east-1", "c5.large", "us-east-1f"),
            Some(0.031)
        );
        assert_eq!(
            pricing.price(
                "us-east-1",
                "m5.large",
                "us-east-1a",
                CapacityType::Reserved
            ),
            Some(0.096 / RESERVED_PRICE_DIVISOR)
        );
        assert_eq!(pricing.source(), None);
    }

    #[test]
    fn rejects_bad_prices_and_unknown_members() {
        let negative = Pricing::from_json(r#"{"onDemandUsdPerHour": {"r": {"t": -1}}}"#);
        assert!(
            matches!(negative, Err(CatalogError::Price { .. })),
            "{negative:?}"
        );
        let typo = Pricing::from_json(r#"{"onDemandUSDPerHour": {}}"#).expect_err("unknown member");
        assert!(typo.to_string().contains("onDemandUSDPerHour"), "{typo}");
        let wrong =
            Pricing::from_json(r#"{"spotUsdPerHour": {"r": {"t": "cheap"}}}"#).expect_err("string");
        assert!(wrong.to_string().contains("spotUsdPerHour.r.t"), "{wrong}");
    }

    /// Karpenter's pricing provider: the shipped on-demand snapshot prices a region it lacks with us-east-1's, and
    /// spot at the on-demand price until spot prices are known; a file's prices go over it.
    #[test]
    fn the_snapshot_prices_out_of_the_box_and_a_file_goes_over_it() {
        let snapshot = Pricing::snapshot();
        let m5 = snapshot
            .on_demand("us-east-1", "m5.large")
            .expect("m5.large in the snapshot");
        assert!(m5 > 0.05 && m5 < 0.2, "{m5}");
        assert_eq!(snapshot.on_demand("eu-west-9", "m5.large"), Some(m5));
        assert_eq!(
            snapshot.price("us-east-1", "m5.large", "us-east-1a", CapacityType::Spot),
            Some(m5)
        );
        assert_eq!(snapshot.on_demand("us-east-1", "no-such.type"), None);
        let file = Pricing::from_json(
            r#"{"source": "mine", "onDemandUsdPerHour": {"us-east-1": {"m5.large": 0.5}},
                "spotUsdPerHour": {"us-east-1": {"c5.large": 0.02}}}"#,
        )
        .expect("file");
        let layered = file.over(Pricing::snapshot());
        assert_eq!(layered.on_demand("us-east-1", "m5.large"), Some(0.5));
        assert!(layered.on_demand("us-east-1", "c5.large").is_some());
        assert_eq!(
            layered.price("us-east-1", "c5.large", "us-east-1b", CapacityType::Spot),
            Some(0.02)
        );
        // The file has spot prices for the region: a type it does not price has no spot price.
        assert_eq!(
            layered.price("us-east-1", "m5.large", "us-east-1b", CapacityType::Spot),
            None
        );
        assert!(layered
            .source()
            .is_some_and(|s| s.starts_with("mine; then ")));
        // A file alone keeps kerf's old meaning: what it does not price is unknown.
        let alone =
            Pricing::from_json(r#"{"onDemandUsdPerHour": {"us-east-1": {"m5.large": 0.5}}}"#)
                .expect("file");
        assert_eq!(alone.on_demand("us-west-2", "m5.large"), None);
        assert_eq!(
            alone.price("us-east-1", "m5.large", "z", CapacityType::Spot),
            None
        );
    }
}
