//! The cluster DNS address nodes are given when the EC2NodeClass's `kubelet.clusterDNS` does not set one: the
//! ClusterIP of the `kube-system/kube-dns` Service, found once at start as Karpenter's operator finds it. Not
//! finding it is not fatal (the node images then use their own default), so the caller logs and goes on.

use super::CALL_TIMEOUT;
use k8s_openapi::api::core::v1::Service;
use kube::{Api, Client};
use std::net::IpAddr;

/// Why the address was not found.
#[derive(Debug, thiserror::Error)]
pub enum KubeDnsError {
    #[error("reading Service kube-system/kube-dns: {0}")]
    Read(#[from] kube::Error),
    #[error("reading Service kube-system/kube-dns timed out after {0:?}")]
    TimedOut(std::time::Duration),
    #[error("Service kube-system/kube-dns does not exist")]
    Missing,
    #[error("Service kube-system/kube-dns has clusterIP {0:?}, not an IP address")]
    NotAnAddress(String),
}

/// The ClusterIP of `kube-system/kube-dns`.
pub async fn kube_dns_ip(client: &Client) -> Result<IpAddr, KubeDnsError> {
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let service = tokio::time::timeout(CALL_TIMEOUT, services.get_opt("kube-dns"))
        .await
        .map_err(|_| KubeDnsError::TimedOut(CALL_TIMEOUT))??
        .ok_or(KubeDnsError::Missing)?;
    let ip = service.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    ip.parse().map_err(|_| KubeDnsError::NotAnAddress(ip))
}

/// The address for the nodes' user data, from the in-cluster configuration or `KUBECONFIG`; `None` (logged) when
/// no cluster or no kube-dns Service answers: nodes then keep their image's DNS default.
pub async fn discover() -> Option<String> {
    let client = Client::try_default().await.ok()?;
    match kube_dns_ip(&client).await {
        Ok(ip) => {
            tracing::info!(%ip, "discovered the kube-dns address for the nodes' user data");
            Some(ip.to_string())
        }
        Err(error) => {
            tracing::info!(%error, "no kube-dns address: nodes keep their image's DNS default");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;

    /// A client whose one call answers `status` with `body` for the kube-dns Service.
    async fn answered(status: u16, body: serde_json::Value) -> Result<IpAddr, KubeDnsError> {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let (request, send) = handle.next_request().await.expect("a request");
            assert_eq!(
                request.uri().path(),
                "/api/v1/namespaces/kube-system/services/kube-dns"
            );
            let response = Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).expect("json")))
                .expect("response");
            send.send_response(response);
        });
        let client = Client::new(service, "default");
        let result = kube_dns_ip(&client).await;
        server.await.expect("server");
        result
    }

    #[tokio::test]
    async fn the_address_is_the_services_cluster_ip() {
        let found = answered(
            200,
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system"},
            "spec": {"clusterIP": "10.100.0.10"}}),
        )
        .await
        .expect("found");
        assert_eq!(found.to_string(), "10.100.0.10");
        let missing = answered(
            404,
            json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "services \"kube-dns\" not found"}),
        )
        .await;
        assert!(matches!(missing, Err(KubeDnsError::Missing)), "{missing:?}");
        let headless = answered(
            200,
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns"}, "spec": {"clusterIP": "None"}}),
        )
        .await;
        assert!(matches!(headless, Err(KubeDnsError::NotAnAddress(ip)) if ip == "None"));
    }
}
