//! Readiness the application controls.

use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

/// A shared switch behind `GET /readyz`. The application flips it, e.g. to report ready only
/// once the caches its hooks read from have synced; clones share one state.
#[derive(Clone, Debug)]
pub struct ReadyFlag(Arc<AtomicBool>);

impl ReadyFlag {
    pub fn new(ready: bool) -> Self {
        Self(Arc::new(AtomicBool::new(ready)))
    }

    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
