//! The Kubernetes minor version AMI aliases resolve EKS-optimized images for, read from the apiserver at start
//! as Karpenter's operator reads it (`/version`), unless `--kubernetes-version` says it. An EKS apiserver
//! reports minors like `30+`: the digits are the version.

use super::CALL_TIMEOUT;
use kube::Client;

/// Why the version was not read.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("no cluster configuration (in-cluster or KUBECONFIG): {0}")]
    Config(#[from] kube::config::InferConfigError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("reading the apiserver's /version: {0}")]
    Read(#[from] kube::Error),
    #[error("reading the apiserver's /version timed out after {0:?}")]
    TimedOut(std::time::Duration),
    #[error("the apiserver reports version major {major:?} minor {minor:?}, not numbers")]
    NotANumber { major: String, minor: String },
}

/// `major.minor` (`1.30`) from the apiserver's version fields; `None` unless both start with digits.
pub fn minor_version(major: &str, minor: &str) -> Option<String> {
    let digits = |s: &str| -> Option<String> {
        let d: String = s.chars().take_while(char::is_ascii_digit).collect();
        (!d.is_empty()).then_some(d)
    };
    Some(format!("{}.{}", digits(major)?, digits(minor)?))
}

/// The `major.minor` of the apiserver of the in-cluster configuration or `KUBECONFIG`.
pub async fn discover() -> Result<String, VersionError> {
    let config = kube::Config::infer().await?;
    let client = Client::try_from(config).map_err(VersionError::Client)?;
    apiserver_minor_version(&client).await
}

/// The apiserver's `major.minor`.
pub async fn apiserver_minor_version(client: &Client) -> Result<String, VersionError> {
    let info = tokio::time::timeout(CALL_TIMEOUT, client.apiserver_version())
        .await
        .map_err(|_| VersionError::TimedOut(CALL_TIMEOUT))??;
    minor_version(&info.major, &info.minor).ok_or(VersionError::NotANumber {
        major: info.major,
        minor: info.minor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minor_version_is_read_as_eks_and_upstream_spell_it() {
        assert_eq!(minor_version("1", "30"), Some("1.30".into()));
        assert_eq!(minor_version("1", "30+"), Some("1.30".into()));
        assert_eq!(minor_version("1", "20"), Some("1.20".into()));
        assert_eq!(minor_version("", "30"), None);
        assert_eq!(minor_version("1", "x"), None);
    }
}
