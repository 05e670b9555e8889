//! The Kubernetes edge: reflectors that keep NodePools and EC2NodeClasses in memory for pod advice, the
//! self-signed certificate mode (its Secret and the `caBundle` of the webhook configurations), what the
//! controllers write besides their own objects (Events), the controller's client ([`client`], HTTP/2 when the
//! apiserver offers it) and the bound on its calls ([`throttle`]). Everything here talks to the apiserver; the decisions it feeds are pure and live elsewhere.

pub mod ca_bundle;
pub mod client;
pub mod events;
pub mod eviction;
pub mod kube_dns;
pub mod leader;
pub mod pools;
pub mod reflect;
pub mod self_signed;
pub mod throttle;
pub mod version;
pub mod volumes;

/// How long one apiserver call may take before it is abandoned and retried later.
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
