//! A real TLS server on the resolver: rotated files are served, broken files are not.

use std::{
    net::SocketAddr,
    path::Path,
    sync::Arc,
    time::{Duration, SystemTime},
};

use kerf_certs::{server_config, CertError, ReloadingCertResolver, SelfSigned, DEFAULT_VALIDITY};
use rustls::{crypto::aws_lc_rs, ClientConfig, RootCertStore};
use rustls_pki_types::{pem::PemObject, CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

const POLL: Duration = Duration::from_millis(50);
const DEADLINE: Duration = Duration::from_secs(10);

/// Two serving certificates, each with its own CA; clients trust both CAs, as a `caBundle`
/// does while a rotation is under way.
fn two_leaves() -> (SelfSigned, SelfSigned) {
    let generate = || {
        SelfSigned::generate(
            ["localhost", "127.0.0.1"],
            SystemTime::now(),
            DEFAULT_VALIDITY,
        )
        .expect("generate")
    };
    (generate(), generate())
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("pem")
}

/// Accepts TLS connections until the test ends; the handshake is all the test needs.
async fn start_server(resolver: Arc<ReloadingCertResolver>) -> SocketAddr {
    let config = server_config(resolver).expect("server config");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move { acceptor.accept(stream).await });
        }
    });
    addr
}

/// Connects trusting every CA in `cas` and returns the leaf the server presented.
async fn presented(addr: SocketAddr, cas: &[&SelfSigned]) -> CertificateDer<'static> {
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots.add(der(&ca.ca_cert_pem)).expect("root");
    }
    let config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .expect("handshake");
    tls.get_ref()
        .1
        .peer_certificates()
        .expect("peer certificates")[0]
        .clone()
}

/// Polls `condition` until it holds, failing after [`DEADLINE`].
async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn wait_for(addr: SocketAddr, cas: &[&SelfSigned], expected: &CertificateDer<'_>) {
    eventually("the rotated certificate", async || {
        &presented(addr, cas).await == expected
    })
    .await;
}

/// Waits until the watcher has tried and rejected the files as they are now.
async fn wait_for_rejection(resolver: &ReloadingCertResolver, before: u64) {
    eventually("a rejected reload", async || {
        resolver.failed_reloads() > before
    })
    .await;
}

fn overwrite(path: &Path, contents: &str) {
    let temporary = path.with_extension("partial");
    std::fs::write(&temporary, contents).expect("write");
    std::fs::rename(&temporary, path).expect("rename");
}

#[tokio::test]
async fn rotated_files_are_served_and_garbage_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, second) = two_leaves();
    let paths = first.write_files(dir.path()).expect("write first");
    let (resolver, _task) =
        ReloadingCertResolver::watch(&paths.cert, &paths.key, POLL).expect("watch");
    let addr = start_server(resolver.clone()).await;
    let cas = [&first, &second];

    assert_eq!(presented(addr, &cas).await, der(&first.cert_pem));
    assert_eq!(resolver.reloads(), 0);

    second.write_files(dir.path()).expect("write second");
    wait_for(addr, &cas, &der(&second.cert_pem)).await;
    assert_eq!(resolver.reloads(), 1);

    // Garbage, then a certificate whose key has not landed yet: neither replaces the served pair.
    let before = resolver.failed_reloads();
    overwrite(&paths.cert, "not a certificate");
    wait_for_rejection(&resolver, before).await;
    assert_eq!(presented(addr, &cas).await, der(&second.cert_pem));

    let before = resolver.failed_reloads();
    overwrite(&paths.cert, &first.cert_pem);
    wait_for_rejection(&resolver, before).await;
    assert_eq!(presented(addr, &cas).await, der(&second.cert_pem));
    assert_eq!(resolver.reloads(), 1);

    // The matching key lands: the pair loads again.
    overwrite(&paths.key, &first.key_pem);
    wait_for(addr, &cas, &der(&first.cert_pem)).await;
    assert_eq!(resolver.reloads(), 2);
}

#[tokio::test]
async fn symlink_swap_like_a_mounted_secret() {
    // Kubelet writes `..<timestamp>/tls.crt`, points `..data` at it, and `tls.crt -> ..data/tls.crt`.
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, second) = two_leaves();
    let version = |name: &str, generated: &SelfSigned| {
        let versioned = dir.path().join(name);
        std::fs::create_dir(&versioned).expect("mkdir");
        generated.write_files(&versioned).expect("write");
    };
    version("..v1", &first);
    version("..v2", &second);
    std::os::unix::fs::symlink("..v1", dir.path().join("..data")).expect("symlink");
    for file in ["tls.crt", "tls.key"] {
        std::os::unix::fs::symlink(Path::new("..data").join(file), dir.path().join(file))
            .expect("symlink");
    }
    let (resolver, _task) =
        ReloadingCertResolver::watch(dir.path().join("tls.crt"), dir.path().join("tls.key"), POLL)
            .expect("watch");
    let addr = start_server(resolver.clone()).await;
    let cas = [&first, &second];
    assert_eq!(presented(addr, &cas).await, der(&first.cert_pem));

    let swap = dir.path().join("..data_tmp");
    std::os::unix::fs::symlink("..v2", &swap).expect("symlink");
    std::fs::rename(&swap, dir.path().join("..data")).expect("swap");
    wait_for(addr, &cas, &der(&second.cert_pem)).await;
}

#[tokio::test]
async fn watch_refuses_files_it_cannot_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, "garbage").expect("write");
    std::fs::write(&key, "garbage").expect("write");
    let error = ReloadingCertResolver::watch(&cert, &key, POLL).expect_err("garbage");
    assert!(
        matches!(error, CertError::NoCertificate { .. }),
        "{error:?}"
    );
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// A serving certificate valid for a day from `start` (generated ones start five minutes early).
fn valid_from(start: SystemTime) -> SelfSigned {
    SelfSigned::generate(["localhost", "127.0.0.1"], start, DAY).expect("generate")
}

#[tokio::test]
async fn expired_or_future_certificates_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    for start in [SystemTime::now() - 2 * DAY, SystemTime::now() + 2 * DAY] {
        let paths = valid_from(start).write_files(dir.path()).expect("write");
        let error =
            ReloadingCertResolver::watch(&paths.cert, &paths.key, POLL).expect_err("refused");
        let message = error.to_string();
        assert!(
            matches!(error, CertError::NotValidNow { .. }) && message.contains(" is valid from 20"),
            "{message}"
        );
        // Both dates and now, RFC 3339 at whole seconds (after the file's path, which may hold a `Z` itself).
        let dates = message
            .split_once(" is valid from ")
            .map_or("", |(_, dates)| dates);
        assert_eq!(dates.matches('Z').count(), 3, "{message}");
    }
}

#[tokio::test]
async fn rotation_to_an_expired_certificate_keeps_the_served_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, _) = two_leaves();
    let expired = valid_from(SystemTime::now() - 2 * DAY);
    let paths = first.write_files(dir.path()).expect("write first");
    let (resolver, _task) =
        ReloadingCertResolver::watch(&paths.cert, &paths.key, POLL).expect("watch");
    let addr = start_server(resolver.clone()).await;
    let cas = [&first, &expired];

    let before = resolver.failed_reloads();
    expired.write_files(dir.path()).expect("write expired");
    wait_for_rejection(&resolver, before).await;
    assert_eq!(presented(addr, &cas).await, der(&first.cert_pem));
    assert_eq!(resolver.reloads(), 0);
    // Counted once per change, not once per tick.
    tokio::time::sleep(POLL * 4).await;
    assert_eq!(resolver.failed_reloads(), before + 1);
}

#[tokio::test]
async fn a_certificate_not_valid_yet_is_served_from_its_not_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, _) = two_leaves();
    // notBefore two seconds from now (generation starts certificates five minutes early).
    let soon = valid_from(SystemTime::now() + Duration::from_secs(5 * 60 + 2));
    let paths = first.write_files(dir.path()).expect("write first");
    let (resolver, _task) =
        ReloadingCertResolver::watch(&paths.cert, &paths.key, POLL).expect("watch");
    let addr = start_server(resolver.clone()).await;
    let cas = [&first, &soon];

    let before = resolver.failed_reloads();
    soon.write_files(dir.path()).expect("write soon");
    wait_for_rejection(&resolver, before).await;
    assert_eq!(presented(addr, &cas).await, der(&first.cert_pem));
    // The client checks validity too, so wait for the server to swap before handshaking.
    eventually("the certificate's notBefore", async || {
        resolver.reloads() == 1
    })
    .await;
    assert_eq!(presented(addr, &cas).await, der(&soon.cert_pem));
    assert_eq!(resolver.failed_reloads(), before + 1);
}
