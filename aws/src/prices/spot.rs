//! Spot prices from EC2's spot price history: the newest price per (instance type, zone), fetched at most once
//! per [`REFRESH`]. Rows older than [`MAX_AGE`] are ignored (an emulator's placeholder rows, or a pool nobody
//! has bid on for a week), so those offerings keep the pricing file's price, or none.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// How long fetched prices are used before they are fetched again.
pub const REFRESH: Duration = Duration::from_secs(60 * 60);
/// How old a history row may be and still count as the current price.
pub const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// One row of DescribeSpotPriceHistory, as EC2 returns it (the price is text).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub instance_type: String,
    pub zone: String,
    pub price: String,
    pub timestamp: SystemTime,
}

/// Spot prices per (instance type, zone).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpotPrices {
    prices: HashMap<(String, String), (SystemTime, f64)>,
}

impl SpotPrices {
    /// The newest price per (type, zone) among `rows` no older than [`MAX_AGE`] at `now`; rows with a price
    /// that is not a finite, non-negative number are skipped.
    pub fn from_rows(rows: impl IntoIterator<Item = Row>, now: SystemTime) -> SpotPrices {
        let mut prices: HashMap<(String, String), (SystemTime, f64)> = HashMap::new();
        for row in rows {
            let recent = now
                .duration_since(row.timestamp)
                .map_or(true, |age| age <= MAX_AGE); // a row from the future is current
            let Ok(price) = row.price.parse::<f64>() else {
                continue;
            };
            if !recent || !price.is_finite() || price < 0.0 {
                continue;
            }
            let key = (row.instance_type, row.zone);
            if prices.get(&key).is_none_or(|(at, _)| row.timestamp > *at) {
                prices.insert(key, (row.timestamp, price));
            }
        }
        SpotPrices { prices }
    }

    pub fn get(&self, instance_type: &str, zone: &str) -> Option<f64> {
        self.prices
            .get(&(instance_type.to_owned(), zone.to_owned()))
            .map(|(_, price)| *price)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn row(instance_type: &str, zone: &str, price: &str, at: SystemTime) -> Row {
        Row {
            instance_type: instance_type.into(),
            zone: zone.into(),
            price: price.into(),
            timestamp: at,
        }
    }

    #[test]
    fn the_newest_recent_row_per_type_and_zone_is_the_price() {
        let now = t(1_000_000);
        let prices = SpotPrices::from_rows(
            [
                row("m5.large", "us-west-2a", "0.0400", t(999_000)),
                row("m5.large", "us-west-2a", "0.0350", t(999_500)),
                row("m5.large", "us-west-2b", "0.0420", t(999_000)),
                row("c5.large", "us-west-2a", "0.00001", SystemTime::UNIX_EPOCH),
                row("c5.xlarge", "us-west-2a", "n/a", t(999_000)),
            ],
            now,
        );
        assert_eq!(prices.get("m5.large", "us-west-2a"), Some(0.035));
        assert_eq!(prices.get("m5.large", "us-west-2b"), Some(0.042));
        assert_eq!(
            prices.get("c5.large", "us-west-2a"),
            None,
            "a stale row is no price"
        );
        assert_eq!(prices.get("c5.xlarge", "us-west-2a"), None);
    }
}
