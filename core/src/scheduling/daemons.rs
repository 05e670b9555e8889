//! DaemonSet overhead (controller-behaviour.md §1.3, §1.6): the DaemonSet pods a node would run take room from
//! the pods the solve places there. A template's instance types are grouped by which DaemonSets would run on
//! them; each group has its own overhead and host ports.

use super::cluster::DaemonSetPod;
use super::pod::{HostPort, PodInfo};
use super::taints::untolerated;
use super::template::Template;
use crate::api::labels;
use crate::api::nodepool::Taint;
use crate::api::requirements::{AllowUndefined, Requirement, Requirements};
use crate::catalog::{Catalog, Resources};
use std::collections::BTreeMap;

/// What the DaemonSets of one group take on each node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DaemonGroup {
    pub overhead: Resources,
    pub ports: Vec<HostPort>,
}

/// A template's instance types grouped by the DaemonSets that would run on them.
#[derive(Clone, Debug)]
pub struct DaemonGroups {
    /// Per catalog index: allocatable minus the type's daemon overhead, what the solve's pods may use.
    pub room: Vec<Resources>,
    /// Per catalog index: the type's group in `groups`.
    pub group: Vec<usize>,
    pub groups: Vec<DaemonGroup>,
}

impl DaemonGroups {
    /// The groups of `template`'s types: a DaemonSet runs on a type when it tolerates the template's taints
    /// (`PreferNoSchedule` ignored) and its requirements meet both the template's and the type's.
    pub fn new(
        template: &Template,
        daemonsets: &[DaemonSetPod],
        catalog: &Catalog,
        allocatable: &[Resources],
        allow: &AllowUndefined,
    ) -> Self {
        let mut groups = vec![DaemonGroup::default()];
        let mut group = vec![0; allocatable.len()];
        let tolerating: Vec<&PodInfo> = daemonsets
            .iter()
            .map(|d| &d.pod)
            .filter(|pod| untolerated(&pod.tolerations, &template.taints, false).is_none())
            .collect();
        if !tolerating.is_empty() {
            // A launched node is registered and initialized by the time its DaemonSet pods run: DaemonSets that
            // select those labels count, as Karpenter's template adds them for this check alone.
            let mut template_requirements = template.requirements.clone();
            for key in [labels::NODE_REGISTERED, labels::NODE_INITIALIZED] {
                template_requirements.add(Requirement::one_of(key, ["true"]));
            }
            let mut ids: BTreeMap<Vec<usize>, usize> = BTreeMap::from([(Vec::new(), 0)]);
            for &i in template.instance_types.iter() {
                let it = &catalog.instance_types[i];
                let members: Vec<usize> = (0..tolerating.len())
                    .filter(|d| {
                        tolerating[*d].variants.iter().any(|v| {
                            template_requirements.is_compatible(v, allow)
                                && it.requirements.has_intersection(v)
                        })
                    })
                    .collect();
                group[i] = *ids.entry(members).or_insert_with_key(|members| {
                    groups.push(overhead(members.iter().map(|d| tolerating[*d])));
                    groups.len() - 1
                });
            }
        }
        let room = allocatable
            .iter()
            .zip(&group)
            .map(|(a, g)| a.clone() - &groups[*g].overhead)
            .collect();
        DaemonGroups {
            room,
            group,
            groups,
        }
    }

    /// The smallest overhead (CPU, then memory) among the groups of `types`: what a claim adds to its requests.
    pub fn smallest(&self, types: impl IntoIterator<Item = usize>) -> Option<&DaemonGroup> {
        types
            .into_iter()
            .map(|i| &self.groups[self.group[i]])
            .min_by_key(|g| (g.overhead.cpu, g.overhead.memory))
    }
}

/// The summed requests and the host ports of `pods`.
pub fn overhead<'a>(pods: impl IntoIterator<Item = &'a PodInfo>) -> DaemonGroup {
    let mut group = DaemonGroup::default();
    for pod in pods {
        group.overhead += &pod.requests;
        group.ports.extend(pod.host_ports.iter().cloned());
    }
    group
}

/// Whether the DaemonSet pod `pod` would run on a node with `taints` and `requirements` (`PreferNoSchedule`
/// ignored); `allow_undefined` says which labels the node may still get.
pub fn runs_on(
    pod: &PodInfo,
    taints: &[Taint],
    requirements: &Requirements,
    allow_undefined: &AllowUndefined,
) -> bool {
    untolerated(&pod.tolerations, taints, false).is_none()
        && pod
            .variants
            .iter()
            .any(|v| requirements.is_compatible(v, allow_undefined))
}
