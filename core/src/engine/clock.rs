//! The time of a decision, behind a trait: the wall clock in the cluster, a virtual one in tests and
//! simulation.

use std::time::SystemTime;

/// Where `now` comes from.
pub trait Clock: Send + Sync {
    fn now(&self) -> SystemTime;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
