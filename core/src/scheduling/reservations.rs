//! Capacity reservations during one solve (Karpenter's reservation manager): how many more instances each
//! reservation takes, and which reservations each planned claim holds.
//!
//! A claim holds, pessimistically, every reservation one of its instance types could launch into, since which
//! type the launch picks is not known yet. A planned claim that holds reservations launches into one of them: its
//! requirements get `karpenter.sh/capacity-type In [reserved]` and the reservation ids
//! ([`Reservations::finish`]).

use super::offerings::allows;
use crate::api::labels;
use crate::api::requirements::{Requirement, Requirements};
use crate::catalog::{Catalog, CAPACITY_RESERVATION_ID};
use std::collections::{BTreeMap, BTreeSet};

/// What happens when a claim could use reserved capacity that this solve has already given away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReservedMode {
    /// Provisioning: the pod waits for the next solve (when a reservation may be free again) rather than fall
    /// back to on-demand or spot, relax its preferences, or try a NodePool of lower weight.
    #[default]
    Strict,
    /// Disruption simulations: use what is left, reserved or not.
    Fallback,
}

/// Why reserved capacity keeps a pod off a claim (Karpenter's reserved offering errors, in its words).
pub const ALL_RESERVED: &str =
    "one or more instance types with compatible reserved offerings are available, but could not be reserved";
pub const WOULD_LOSE_RESERVATIONS: &str =
    "satisfying updated nodeclaim constraints would remove all compatible reserved offering options";

/// The reservations of a catalog, with what is left of each during a solve.
#[derive(Clone, Debug, Default)]
pub struct Reservations {
    /// Instances each reservation still takes, by id.
    left: BTreeMap<String, u32>,
    /// Per claim of the solve (by index): the reservations it holds.
    held: Vec<BTreeSet<String>>,
}

impl Reservations {
    /// The reservations `catalog`'s offerings launch into. An id offered twice (two NodePools' classes read it at
    /// different times) keeps the smaller capacity.
    pub fn new(catalog: &Catalog) -> Self {
        let mut left: BTreeMap<String, u32> = BTreeMap::new();
        for o in catalog.instance_types.iter().flat_map(|it| &it.offerings) {
            if let Some(r) = &o.reservation {
                left.entry(r.id.clone())
                    .and_modify(|c| *c = (*c).min(r.capacity))
                    .or_insert(r.capacity);
            }
        }
        Reservations {
            left,
            held: Vec::new(),
        }
    }

    /// Whether the catalog offers no reserved capacity at all: nothing to track.
    pub fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// The reservations claim `claim` (`None` for a new one) would hold with `types` (catalog indices) under
    /// `requirements`: those of the available reserved offerings the requirements allow that still have room, or
    /// that the claim holds already. Under [`ReservedMode::Strict`] an error when such offerings exist but none
    /// can be held, or when the claim would lose every reservation it holds.
    pub fn reservable(
        &self,
        mode: ReservedMode,
        claim: Option<usize>,
        catalog: &Catalog,
        types: &[usize],
        requirements: &Requirements,
    ) -> Result<BTreeSet<String>, &'static str> {
        let held = claim.and_then(|c| self.held.get(c));
        let mut compatible = false;
        let mut ids = BTreeSet::new();
        for o in types
            .iter()
            .flat_map(|i| &catalog.instance_types[*i].offerings)
        {
            let Some(r) = &o.reservation else {
                continue;
            };
            if !allows(requirements, o) {
                continue;
            }
            compatible = true;
            let holds = held.is_some_and(|h| h.contains(&r.id));
            if holds || self.left.get(&r.id).is_some_and(|left| *left > 0) {
                ids.insert(r.id.clone());
            }
        }
        if mode == ReservedMode::Strict {
            if compatible && ids.is_empty() {
                return Err(ALL_RESERVED);
            }
            if ids.is_empty() && held.is_some_and(|h| !h.is_empty()) {
                return Err(WOULD_LOSE_RESERVATIONS);
            }
        }
        Ok(ids)
    }

    /// Claim `claim` now holds `ids`: the new ones are taken, the ones it no longer holds given back.
    pub fn hold(&mut self, claim: usize, ids: BTreeSet<String>) {
        if self.held.len() <= claim {
            self.held.resize_with(claim + 1, BTreeSet::new);
        }
        for id in ids.difference(&self.held[claim]) {
            if let Some(left) = self.left.get_mut(id) {
                *left = left.saturating_sub(1);
            }
        }
        for id in self.held[claim].difference(&ids) {
            if let Some(left) = self.left.get_mut(id) {
                *left += 1;
            }
        }
        self.held[claim] = ids;
    }

    /// The requirements claim `claim` launches with: `requirements`, narrowed to its reservations if it holds
    /// any.
    pub fn finish(&self, claim: usize, requirements: &Requirements) -> Option<Requirements> {
        let held = self.held.get(claim).filter(|h| !h.is_empty())?;
        let mut finished = requirements.clone();
        finished.add(Requirement::one_of(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_TYPE_RESERVED],
        ));
        finished.add(Requirement::one_of(CAPACITY_RESERVATION_ID, held.iter()));
        Some(finished)
    }
}

#[cfg(test)]
mod tests;
