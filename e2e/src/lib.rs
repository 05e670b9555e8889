//! End-to-end harness for kerf (real control plane); see issue 4.
