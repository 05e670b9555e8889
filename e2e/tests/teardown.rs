//! A test that panics with a live cluster leaves no control-plane process behind: `Cluster`'s drop
//! stops every process `cluster.sh` recorded. Always starts its own cluster (ignores KERF_E2E_CLUSTER).

use std::path::Path;

use anyhow::Result;
use kerf_e2e::{announce, missing_prerequisites, required, Cluster};

/// Alive and not a zombie (an exited child that its new parent has not reaped yet is gone for us).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

#[test]
fn a_panicking_test_leaves_no_process_behind() -> Result<()> {
    let missing = missing_prerequisites();
    if !missing.is_empty() {
        anyhow::ensure!(
            !required(),
            "KERF_E2E=1 but missing: {}",
            missing.join(", ")
        );
        announce(&format!(
            "SKIPPED a_panicking_test_leaves_no_process_behind: no real control plane (missing: {}); \
             set KERF_E2E=1 to make this a failure.",
            missing.join(", ")
        ));
        return Ok(());
    }

    let (tx, rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let cluster = Cluster::start().await.expect("the cluster starts");
            let pids = cluster.pids().expect("the PIDs are recorded");
            tx.send((cluster.dir().to_path_buf(), pids)).unwrap();
            panic!("deliberate panic while the cluster runs");
        });
    });
    assert!(test.join().is_err(), "the thread was meant to panic");

    let (dir, pids) = rx.recv()?;
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "watchdog"
        ]
    );
    for (name, pid) in &pids {
        assert!(
            !alive(*pid),
            "{name} ({pid}) is still running after the panic"
        );
    }
    // A failed test's directory is kept for its logs; this panic was deliberate.
    assert!(Path::new(&dir).join("logs/kube-apiserver.log").exists());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
