//! Resource amounts as Karpenter's gauges report them: a `resource_type` label of the resource name lower-cased
//! with `-` as `_`, CPU in cores (milli precision) and everything else in whole units (`Quantity.Value()`).

use crate::catalog::{parse_quantity, parse_units, Resources, CPU};
use std::collections::BTreeMap;

/// The `resource_type` label of resource `name`.
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// The gauge value of `quantity` of resource `name`; `None` (logged) when it is not a quantity.
pub fn quantity_value(name: &str, quantity: &str) -> Option<f64> {
    let parsed = if name == CPU {
        parse_quantity(quantity).map(|milli| milli as f64 / 1000.0)
    } else {
        parse_units(quantity).map(|units| units as f64)
    };
    match parsed {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::debug!(resource = name, quantity, %error, "not a quantity; left out of the metrics");
            None
        }
    }
}

/// Every resource of a Kubernetes resource list, as `(resource_type, value)`.
pub fn list_values<'a, Q: AsRef<str> + 'a>(
    list: impl IntoIterator<Item = (&'a String, Q)>,
) -> Vec<(String, f64)> {
    list.into_iter()
        .filter_map(|(name, quantity)| {
            Some((
                resource_type(name),
                quantity_value(name, quantity.as_ref())?,
            ))
        })
        .collect()
}

/// The non-zero amounts of `resources` (kerf's units: millicores for CPU), as `(resource_type, value)`.
pub fn resources_values(resources: &Resources) -> Vec<(String, f64)> {
    let core = [
        (crate::catalog::CPU, resources.cpu),
        (crate::catalog::MEMORY, resources.memory),
        (crate::catalog::PODS, resources.pods),
        (
            crate::catalog::EPHEMERAL_STORAGE,
            resources.ephemeral_storage,
        ),
    ];
    core.into_iter()
        .chain(resources.extended.iter().map(|(n, a)| (n.as_str(), *a)))
        .filter(|(_, amount)| *amount != 0)
        .map(|(name, amount)| {
            let value = if name == CPU {
                amount as f64 / 1000.0
            } else {
                amount as f64
            };
            (resource_type(name), value)
        })
        .collect()
}

/// A resource list whose quantities are `IntOrString` (NodePool limits and status), as strings.
pub fn int_or_string_list(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>>,
) -> Vec<(String, f64)> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    list_values(list.into_iter().flatten().map(|(name, q)| {
        let text = match q {
            IntOrString::Int(n) => n.to_string(),
            IntOrString::String(s) => s.clone(),
        };
        (name, text)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_keeps_its_millis_and_the_rest_rounds_up_to_units() {
        assert_eq!(quantity_value("cpu", "1500m"), Some(1.5));
        assert_eq!(quantity_value("memory", "1Gi"), Some(1_073_741_824.0));
        assert_eq!(quantity_value("ephemeral-storage", "0.5"), Some(1.0));
        assert_eq!(quantity_value("memory", "lots"), None);
        assert_eq!(resource_type("ephemeral-storage"), "ephemeral_storage");
        assert_eq!(resource_type("nvidia.com/gpu"), "nvidia.com/gpu");
        let mut resources = Resources {
            cpu: 250,
            memory: 0,
            pods: 2,
            ..Resources::default()
        };
        resources.extended.insert("nvidia.com/gpu".into(), 1);
        assert_eq!(
            resources_values(&resources),
            vec![
                ("cpu".to_owned(), 0.25),
                ("pods".to_owned(), 2.0),
                ("nvidia.com/gpu".to_owned(), 1.0)
            ]
        );
    }
}
