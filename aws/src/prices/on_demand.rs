//! On-demand prices from the AWS Price List API (`pricing:GetProducts`): one hourly Linux price per instance
//! type in the cluster's region, fetched at most once per [`REFRESH`] (AWS publishes new prices rarely). The
//! API is served from a few regions only ([`endpoint_region`]); an emulator without it, or a VPC without a
//! route to it, leaves the table empty and the pricing file in charge.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_pricing::types::{Filter, FilterType};
use kerf_core::cloud::CloudError;
use serde_json::Value;

use crate::errors::bounded;
use crate::pagination::collect_pages;

/// How long fetched prices are used before they are fetched again.
pub const REFRESH: Duration = Duration::from_secs(12 * 60 * 60);
/// Products per GetProducts page (the API's maximum).
const PAGE_SIZE: i32 = 100;

/// The product attributes that select the price a Linux node pays: shared tenancy, no pre-installed software
/// or licence, capacity actually used (not reservations), in the region.
fn filters(region: &str) -> Vec<(&'static str, String)> {
    vec![
        ("regionCode", region.to_owned()),
        ("productFamily", "Compute Instance".into()),
        ("operatingSystem", "Linux".into()),
        ("tenancy", "Shared".into()),
        ("preInstalledSw", "NA".into()),
        ("licenseModel", "No License required".into()),
        ("capacitystatus", "Used".into()),
    ]
}

/// The region whose Price List endpoint serves `region`'s prices: the API lives in us-east-1,
/// eu-central-1, ap-south-1 and, for the China partition, cn-northwest-1.
pub fn endpoint_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else {
        "us-east-1"
    }
}

/// On-demand prices (per hour) by instance type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OnDemandPrices {
    prices: HashMap<String, f64>,
}

impl OnDemandPrices {
    /// The prices in Price List `documents` (one JSON product with its terms each), and how many documents
    /// had no readable positive hourly price. A type listed twice keeps its lowest price.
    pub fn from_documents<S: AsRef<str>>(
        documents: impl IntoIterator<Item = S>,
    ) -> (OnDemandPrices, usize) {
        let mut prices: HashMap<String, f64> = HashMap::new();
        let mut skipped = 0;
        for document in documents {
            let Some((instance_type, price)) = price_of(document.as_ref()) else {
                skipped += 1;
                continue;
            };
            let lowest = prices.entry(instance_type).or_insert(price);
            *lowest = lowest.min(price);
        }
        (OnDemandPrices { prices }, skipped)
    }

    pub fn get(&self, instance_type: &str) -> Option<f64> {
        self.prices.get(instance_type).copied()
    }

    pub fn len(&self) -> usize {
        self.prices.len()
    }
}

/// The instance type and hourly on-demand price of one Price List document.
fn price_of(document: &str) -> Option<(String, f64)> {
    let product: Value = serde_json::from_str(document).ok()?;
    let instance_type = product
        .pointer("/product/attributes/instanceType")?
        .as_str()?;
    let price = product
        .pointer("/terms/OnDemand")?
        .as_object()?
        .values()
        .filter_map(|term| term.get("priceDimensions")?.as_object())
        .flat_map(|dimensions| dimensions.values())
        .filter(|d| d.get("unit").and_then(Value::as_str) == Some("Hrs"))
        .filter_map(|d| {
            let per_unit = d.get("pricePerUnit")?;
            per_unit
                .get("USD")
                .or_else(|| per_unit.get("CNY"))?
                .as_str()
        })
        .filter_map(|text| text.parse::<f64>().ok())
        .find(|price| price.is_finite() && *price > 0.0)?;
    Some((instance_type.to_owned(), price))
}

/// Fetches every on-demand price of `region`, each page bounded by `timeout`.
pub async fn fetch(
    client: &aws_sdk_pricing::Client,
    region: &str,
    timeout: Duration,
) -> Result<OnDemandPrices, CloudError> {
    let mut request = client
        .get_products()
        .service_code("AmazonEC2")
        .max_results(PAGE_SIZE);
    for (field, value) in filters(region) {
        let filter = Filter::builder()
            .r#type(FilterType::TermMatch)
            .field(field)
            .value(value)
            .build()
            .map_err(|e| CloudError::InvalidRequest(format!("a GetProducts filter: {e}")))?;
        request = request.filters(filter);
    }
    let documents = collect_pages("GetProducts", |token| {
        let page = request.clone().set_next_token(token).send();
        async move {
            let out = bounded("GetProducts", timeout, page).await?;
            Ok((out.price_list.unwrap_or_default(), out.next_token))
        }
    })
    .await?;
    let (prices, skipped) = OnDemandPrices::from_documents(&documents);
    tracing::info!(
        types = prices.len(),
        products = documents.len(),
        skipped,
        "on-demand prices read from the Price List API"
    );
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Price List product as GetProducts returns it (one JSON text), with one on-demand price dimension.
    fn product(instance_type: &str, unit: &str, usd: &str) -> String {
        json!({
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {"instanceType": instance_type, "regionCode": "us-west-2",
                               "operatingSystem": "Linux", "tenancy": "Shared"},
                "sku": "SKU1"
            },
            "serviceCode": "AmazonEC2",
            "terms": {"OnDemand": {"SKU1.TERM": {
                "priceDimensions": {"SKU1.TERM.DIM": {
                    "unit": unit, "pricePerUnit": {"USD": usd}, "description": "per On Demand Linux hour"
                }},
                "sku": "SKU1", "offerTermCode": "TERM"
            }}}
        })
        .to_string()
    }

    #[test]
    fn each_type_gets_its_hourly_price_and_unreadable_products_are_counted() {
        let (prices, skipped) = OnDemandPrices::from_documents([
            product("m5.large", "Hrs", "0.0960000000"),
            product("c5.large", "Hrs", "0.0850000000"),
            product("c5.large", "Hrs", "0.0900000000"),
            product("r5.large", "Quantity", "100.0"),
            product("t3.nano", "Hrs", "0.0000000000"),
            "not json".to_owned(),
            json!({"product": {"attributes": {}}}).to_string(),
        ]);
        assert_eq!(prices.get("m5.large"), Some(0.096));
        assert_eq!(prices.get("c5.large"), Some(0.085), "the lowest of two");
        assert_eq!(prices.get("r5.large"), None, "not an hourly price");
        assert_eq!(prices.get("t3.nano"), None, "a zero price is no price");
        assert_eq!(prices.len(), 2);
        assert_eq!(skipped, 4);
    }

    #[test]
    fn the_endpoint_region_serves_the_partition() {
        assert_eq!(endpoint_region("us-west-2"), "us-east-1");
        assert_eq!(endpoint_region("eu-west-1"), "eu-central-1");
        assert_eq!(endpoint_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(endpoint_region("cn-north-1"), "cn-northwest-1");
        assert_eq!(endpoint_region("sa-east-1"), "us-east-1");
    }

    mod over_http {
        use super::*;
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::post;
        use std::sync::{Arc, Mutex};

        /// What the fake Price List endpoint saw: each request's target header and JSON body.
        type Seen = Arc<Mutex<Vec<(String, Value)>>>;

        /// A Price List endpoint on a local port that answers GetProducts in two pages, or with `status`.
        async fn serve(status: StatusCode) -> (String, Seen) {
            let seen: Seen = Arc::default();
            let record = Arc::clone(&seen);
            let app = axum::Router::new().route(
                "/",
                post(move |headers: HeaderMap, body: String| {
                    let record = Arc::clone(&record);
                    async move {
                        let target = headers
                            .get("x-amz-target")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        let second_page = body.get("NextToken").is_some();
                        record.lock().expect("not poisoned").push((target, body));
                        let page = if second_page {
                            json!({"FormatVersion": "aws_v1",
                                   "PriceList": [product("c5.large", "Hrs", "0.085")]})
                        } else {
                            json!({"FormatVersion": "aws_v1", "NextToken": "page-2",
                                   "PriceList": [product("m5.large", "Hrs", "0.096")]})
                        };
                        let body = if status.is_success() {
                            page.to_string()
                        } else {
                            json!({"__type": "AccessDeniedException", "message": "denied"})
                                .to_string()
                        };
                        (
                            status,
                            [("content-type", "application/x-amz-json-1.1")],
                            body,
                        )
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a local port");
            let url = format!("http://{}", listener.local_addr().expect("an address"));
            tokio::spawn(async move { axum::serve(listener, app).await });
            (url, seen)
        }

        fn client(url: &str) -> aws_sdk_pricing::Client {
            let config = aws_sdk_pricing::Config::builder()
                .behavior_version_latest()
                .region(aws_sdk_pricing::config::Region::new("us-east-1"))
                .endpoint_url(url)
                .credentials_provider(aws_sdk_pricing::config::Credentials::new(
                    "key", "secret", None, None, "test",
                ))
                .build();
            aws_sdk_pricing::Client::from_conf(config)
        }

        #[tokio::test]
        async fn every_page_is_read_with_the_region_and_linux_filters() {
            let (url, seen) = serve(StatusCode::OK).await;
            let prices = fetch(&client(&url), "us-west-2", Duration::from_secs(10))
                .await
                .expect("prices");
            assert_eq!(prices.get("m5.large"), Some(0.096));
            assert_eq!(prices.get("c5.large"), Some(0.085));
            let seen = seen.lock().expect("not poisoned").clone();
            assert_eq!(seen.len(), 2, "two pages");
            assert_eq!(seen[0].0, "AWSPriceListService.GetProducts");
            assert_eq!(seen[0].1["ServiceCode"], "AmazonEC2");
            assert_eq!(seen[1].1["NextToken"], "page-2");
            let filters = seen[0].1["Filters"].as_array().expect("filters");
            assert!(filters.contains(
                &json!({"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-west-2"})
            ));
            assert!(filters.contains(
                &json!({"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"})
            ));
        }

        #[tokio::test]
        async fn an_error_answer_is_the_service_error() {
            let (url, _) = serve(StatusCode::BAD_REQUEST).await;
            let error = fetch(&client(&url), "us-west-2", Duration::from_secs(10))
                .await
                .expect_err("denied");
            match error {
                CloudError::Api {
                    operation, code, ..
                } => {
                    assert_eq!(operation, "GetProducts");
                    assert_eq!(code, "AccessDeniedException");
                }
                other => panic!("unexpected error {other:?}"),
            }
        }
    }
}
