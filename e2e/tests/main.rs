//! The end-to-end suite: one test binary, so that its tests run side by side (`--test-threads`, which `make e2e`
//! sets) instead of one file after another, most of each test being a wait on a real control plane and
//! controller. Each module is one capability; docs/testing.md lists them.
//!
//! Tests that change what every caller of a server sees keep one of their own (`AwsEmu::shared_in_or_skip`,
//! `Testbed::start_in_or_skip`). `admission_load`, whose bounds are on latency, is run alone by `make e2e`.

mod admission;
mod admission_load;
mod aws_batching;
mod aws_cloud;
mod aws_emu;
mod aws_faults;
mod aws_sqs;
mod capacity_buffer;
mod capacity_reservations;
mod chart;
mod control_plane;
mod disruption;
mod drift;
mod housekeeping;
mod interruption;
mod kubelet;
mod leader;
mod lifecycle;
mod metrics;
mod node_overlay;
mod nodeclass_conditions;
mod parity;
mod provisioning;
mod static_capacity;
mod teardown;
mod termination;
mod zonal_shift;
