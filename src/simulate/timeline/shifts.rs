//! ARC zonal shifts in a timeline (`spec.enableZonalShift`): the shifted zone's offerings out of the catalog while
//! a shift lasts, the NodePools' Events, and the instances of claims deleted there kept until it ends.

use super::*;

impl TimelineRun<'_> {
    /// The key zonal shifts name `zone` by in the catalog (its zone ID where the catalog has them, else its name).
    pub(super) fn zone_key(&self, zone: &str) -> Option<String> {
        self.catalog
            .instance_types
            .iter()
            .flat_map(|it| &it.offerings)
            .find(|o| o.zone == zone)
            .map(|o| zonal_shift::zone_key(o).to_owned())
    }

    /// ARC begins a shift away from the event's zone (one already shifted gets the new expiry).
    pub(super) fn begin_shift(&mut self, shift: &ZonalShiftSpec) {
        let Some(key) = self.zone_key(&shift.zone) else {
            let said = format!("no offering is in zone {}: nothing to shift", shift.zone);
            self.entries.push(self.entry("zonal-shift", said));
            return;
        };
        let length = crate::disruption::parse_go_duration(&shift.duration).unwrap_or_default();
        let until = self.now + length;
        self.zonal_shifts.retain(|s| s.away_from != key);
        self.zonal_shifts.push(ZonalShift {
            away_from: key,
            expiry: SystemTime::from(until),
            applied: true,
        });
        let said = format!(
            "traffic shifted away from zone {} until {until} (ARC zonal shift)",
            shift.zone
        );
        self.entries.push(self.entry("zonal-shift", said));
    }

    /// Takes the offerings of zones shifted away from out of the shared catalog when the shifted zones (or the
    /// overlaid catalog) changed, records the NodePools' Events, and terminates the instances held in zones that
    /// cleared.
    pub(super) fn shift_zones(&mut self, overlaid: bool) {
        let mut listed = ZonalShifts::default();
        listed.replace(self.zonal_shifts.iter().cloned());
        let shifted = listed.shifted(SystemTime::from(self.now));
        if shifted == self.shifted && !overlaid {
            return;
        }
        self.shared_catalog = if shifted.is_empty() {
            self.overlaid_catalog.clone()
        } else {
            let mut catalog = (*self.overlaid_catalog).clone();
            zonal_shift::apply(&shifted, &mut catalog.instance_types);
            Arc::new(catalog)
        };
        if shifted == self.shifted {
            return;
        }
        // The simulated classes launch wherever the catalog offers.
        let zones: BTreeSet<(String, String)> = self
            .catalog
            .instance_types
            .iter()
            .flat_map(|it| &it.offerings)
            .map(|o| (o.zone.clone(), zonal_shift::zone_key(o).to_owned()))
            .collect();
        let zones: Vec<ZoneInfo> = zones
            .into_iter()
            .map(|(zone, zone_id)| ZoneInfo { zone, zone_id })
            .collect();
        let pools: Vec<(&NodePool, Vec<ZoneInfo>)> =
            self.pools.iter().map(|p| (p, zones.clone())).collect();
        let told = notices(&self.shifted, &shifted, &pools);
        drop(pools);
        for notice in told {
            let mut entry = self.entry("zonal-shift", notice.message());
            entry.nodepool = Some(notice.nodepool.clone());
            entry.reason = Some(notice.reason().to_owned());
            self.entries.push(entry);
        }
        let (released, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| !shifted.contains(&h.key));
        self.held = held;
        for h in released {
            let mut entry = self.entry(
                "zonal-shift",
                format!(
                    "{}'s instance terminated: zone {} is no longer shifted away from",
                    h.claim, h.zone
                ),
            );
            entry.node_claims = vec![h.claim];
            self.entries.push(entry);
        }
        self.shifted = shifted;
    }
}
