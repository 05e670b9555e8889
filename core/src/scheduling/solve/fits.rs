//! What a pod could run on by itself, for a bound on what any plan costs ([`crate::scheduling::bound`]): the
//! new nodes of each NodePool that would take it alone, with every preference relaxed, and their room and price.

use super::*;

/// One kind of new node: a NodePool (by its place in the weight order) launching one instance type (catalog
/// index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NewNode {
    pub template: usize,
    pub instance_type: usize,
}

impl Scheduler<'_> {
    /// The new nodes that could run `pod` alone: its most relaxed requirements (every preference dropped),
    /// soft taints ignored, each of its volume alternatives. Empty when no NodePool can take it.
    pub fn new_nodes_for(&self, pod: &PodInfo) -> Vec<NewNode> {
        let Some(requirements) = pod.variants.last() else {
            return Vec::new();
        };
        let volumes = with_volumes(vec![Vec::new()], pod);
        let mut nodes = Vec::new();
        for (t, template) in self.prepared.templates.iter().enumerate() {
            let mut types: Vec<usize> = volumes
                .iter()
                .filter_map(|extra| {
                    self.fresh_claim(
                        t,
                        template.instance_types.clone(),
                        pod,
                        requirements,
                        extra,
                        false,
                    )
                    .ok()
                })
                .flat_map(|claim| claim.instance_types.iter().copied().collect::<Vec<_>>())
                .collect();
            types.sort_unstable();
            types.dedup();
            nodes.extend(types.into_iter().map(|instance_type| NewNode {
                template: t,
                instance_type,
            }));
        }
        nodes
    }

    /// What `node` leaves for pods: the type's allocatable less the DaemonSets its pool runs there.
    pub fn room(&self, node: NewNode) -> &Resources {
        &self.prepared.daemons[node.template].room[node.instance_type]
    }

    /// The cheapest known price of `node`'s offerings that its NodePool allows, USD per hour.
    pub fn price(&self, node: NewNode) -> Option<f64> {
        let template = &self.prepared.templates[node.template];
        cheapest_offering(
            &self.catalog.instance_types[node.instance_type],
            &template.requirements,
        )
        .and_then(|o| o.price)
    }
}
