//! What drives decisions in time. So far: the [`Clock`] every controller reads `now` from, so that tests and
//! `kerf simulate` can run the same code on a virtual clock.

mod clock;

pub use clock::{Clock, SystemClock};
