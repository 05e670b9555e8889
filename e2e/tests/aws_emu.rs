//! The emulator handle: tests of one process share one server, which stops when the last handle goes.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use kerf_e2e::aws::AwsEmu;
use kerf_e2e::poll;

#[tokio::test]
async fn handles_share_one_server_that_stops_with_the_last() -> Result<()> {
    let Some(first) = AwsEmu::shared_in_or_skip(
        "handles",
        "handles_share_one_server_that_stops_with_the_last",
    )?
    else {
        return Ok(());
    };
    let second = AwsEmu::shared_in_or_skip(
        "handles",
        "handles_share_one_server_that_stops_with_the_last",
    )?
    .expect("moto is installed");
    assert!(Arc::ptr_eq(&first, &second));

    // The fault endpoint answers, and stores what it was given.
    let faults = serde_json::json!({"capacity": [{"instanceType": "m5.large"}], "api": []});
    first.set_faults(&faults).await?;
    let shown: serde_json::Value = reqwest::get(format!("{}/_emu/faults", first.endpoint()))
        .await?
        .json()
        .await?;
    assert_eq!(shown, faults);
    first.clear_faults().await?;

    let pid: i32 = std::fs::read_to_string(first.dir().join("server.pid"))?
        .trim()
        .parse()?;
    let endpoint = first.endpoint().to_owned();
    drop(first);
    assert!(reqwest::get(format!("{endpoint}/moto-api/")).await.is_ok());
    drop(second);
    poll("the server to exit", Duration::from_secs(10), || async {
        Ok((!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(()))
    })
    .await?;
    assert!(reqwest::get(format!("{endpoint}/moto-api/")).await.is_err());
    Ok(())
}
