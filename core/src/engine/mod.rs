//! The engine: the decisions the controller and `kerf simulate` share, so both make them one way. It holds the
//! [`Clock`] every decision reads `now` from, what a launched node is labelled with ([`launch`]), pod events
//! and `status.lastPodEventTime` ([`pod_events`]), and nominations that protect the destinations of pods on
//! their way ([`nominations`]), the feature gates that switch decisions on ([`feature_gates`]), which unhealthy
//! nodes to replace ([`repair`]), how static NodePools keep their replicas ([`static_capacity`]), and which
//! NodePools hear of a zonal shift ([`zonal_shift`]). Pure: no I/O, no async.

pub mod blocked_pools;
pub mod buffers;
mod clock;
pub mod conditions;
pub mod consistency;
pub mod disruption_events;
pub mod disruption_input;
pub mod feature_gates;
pub mod launch;
pub mod marks;
pub mod nominations;
pub mod overlay;
pub mod pod_events;
pub mod provisioning;
pub mod repair;
pub mod reservations;
pub mod static_capacity;
pub mod usage;
pub mod zonal_shift;

pub use clock::{Clock, SystemClock};
pub use feature_gates::FeatureGates;
pub use nominations::Nominations;
