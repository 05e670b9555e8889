//! The prices offerings are given: on-demand from the Price List API, spot from the price history.

use super::*;

impl AwsCloud {
    /// The on-demand prices of the Price List API (none in an isolated VPC), fetched again twice a day.
    pub(super) async fn on_demand_prices(&self, now: SystemTime) -> Arc<OnDemandPrices> {
        let Some(client) = &self.pricing else {
            return Arc::default();
        };
        let fetch = || on_demand::fetch(client, &self.region, self.settings.call_timeout);
        self.on_demand
            .lock()
            .await
            .get(now, "on-demand", fetch)
            .await
    }

    /// The spot prices of the price history, fetched again when older than an hour.
    pub(super) async fn spot_prices(&self, now: SystemTime) -> Arc<SpotPrices> {
        let fetch = || async {
            let rows = self.spot_price_history(now).await?;
            Ok(SpotPrices::from_rows(rows, now))
        };
        self.spot.lock().await.get(now, "spot", fetch).await
    }

    pub(super) async fn spot_price_history(&self, now: SystemTime) -> Result<Vec<Row>, CloudError> {
        let start = aws_sdk_ec2::primitives::DateTime::from(now);
        let filter = ec2::Filter::builder()
            .name("product-description")
            .values("Linux/UNIX")
            .values("Linux/UNIX (Amazon VPC)")
            .build();
        let rows = collect_pages("DescribeSpotPriceHistory", |token| {
            let request = self
                .ec2
                .describe_spot_price_history()
                .start_time(start)
                .filters(filter.clone())
                .max_results(1000)
                .set_next_token(token);
            async move {
                let out = self
                    .call("DescribeSpotPriceHistory", request.send())
                    .await?;
                Ok((out.spot_price_history.unwrap_or_default(), out.next_token))
            }
        })
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|p| {
                Some(Row {
                    instance_type: p.instance_type?.as_str().to_owned(),
                    zone: p.availability_zone?,
                    price: p.spot_price?,
                    timestamp: SystemTime::try_from(p.timestamp?).ok()?,
                })
            })
            .collect())
    }
}
