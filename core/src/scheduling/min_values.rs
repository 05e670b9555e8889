//! NodePool `minValues` (controller-behaviour.md §1.7): a claim must keep enough distinct values of a key among
//! its instance types, so a launch has that many alternatives.

use crate::api::requirements::Requirements;
use crate::catalog::Catalog;
use std::collections::BTreeSet;

/// What to do when a claim cannot keep `minValues` distinct values (Karpenter's `MIN_VALUES_POLICY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinValuesPolicy {
    /// The pod is not placed there (the default).
    #[default]
    Strict,
    /// The numbers are lowered to what the types offer.
    BestEffort,
}

/// A requirement whose `minValues` the instance types do not reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmet {
    pub key: String,
    pub min_values: usize,
    pub found: usize,
}

impl std::fmt::Display for Unmet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "minValues requirement not met: {} needs {} distinct values, the instance types offer {}",
            self.key, self.min_values, self.found
        )
    }
}

/// The length of the shortest prefix of `types` (catalog indices, price order) with at least `minValues`
/// distinct admitted values for every requirement that has one; the first unmet requirement when even all of
/// `types` fall short.
pub fn shortest_prefix(
    catalog: &Catalog,
    requirements: &Requirements,
    types: &[usize],
) -> Result<usize, Unmet> {
    let mut needed = 0;
    for r in requirements.iter() {
        let Some(min_values) = r.min_values() else {
            continue;
        };
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut reached = None;
        for (n, i) in types.iter().enumerate() {
            let values = catalog.instance_types[*i]
                .requirements
                .get(r.key())
                .and_then(|own| own.values());
            seen.extend(
                values
                    .into_iter()
                    .flatten()
                    .map(String::as_str)
                    .filter(|v| r.has(v)),
            );
            if seen.len() >= min_values {
                reached = Some(n + 1);
                break;
            }
        }
        match reached {
            Some(n) => needed = needed.max(n),
            None => {
                return Err(Unmet {
                    key: r.key().to_owned(),
                    min_values,
                    found: seen.len(),
                })
            }
        }
    }
    Ok(needed)
}

/// Whether any requirement has `minValues`.
pub fn any(requirements: &Requirements) -> bool {
    requirements.iter().any(|r| r.min_values().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::operator::Operator;
    use crate::api::requirements::Requirement;
    use serde_json::json;

    /// Types in price order with these families.
    fn catalog(families: &[&str]) -> Catalog {
        let types: Vec<_> = families
            .iter()
            .enumerate()
            .map(|(i, family)| json!({"name": format!("t{i}"), "cpu": "2", "memory": "4Gi", "pods": 10, "arch": "amd64",
                "os": ["linux"], "labels": {"karpenter.k8s.aws/instance-family": family},
                "offerings": [{"zone": "z", "capacityType": "on-demand", "price": 1.0 + i as f64, "available": true}]}))
            .collect();
        Catalog::from_instance_types_json(&json!({"instanceTypes": types}).to_string())
            .expect("catalog")
    }

    fn families(min_values: usize) -> Requirements {
        Requirements::from_iter([Requirement::new(
            "karpenter.k8s.aws/instance-family",
            Operator::Exists,
            Vec::<String>::new(),
            Some(min_values),
        )
        .expect("requirement")])
    }

    #[test]
    fn the_shortest_prefix_with_enough_distinct_values() {
        let catalog = catalog(&["a", "a", "b", "a", "c", "d"]);
        let types: Vec<usize> = (0..6).collect();
        assert_eq!(shortest_prefix(&catalog, &families(1), &types), Ok(1));
        // The third value first appears at the fifth type.
        assert_eq!(shortest_prefix(&catalog, &families(3), &types), Ok(5));
        assert_eq!(
            shortest_prefix(&catalog, &families(5), &types),
            Err(Unmet {
                key: "karpenter.k8s.aws/instance-family".to_owned(),
                min_values: 5,
                found: 4
            })
        );
        assert_eq!(
            shortest_prefix(&catalog, &Requirements::new(), &types),
            Ok(0)
        );
    }
}
