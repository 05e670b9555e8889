//! kerf-aws's CreateFleet batching against moto: a burst of launches of one configuration goes out as one
//! CreateFleet, its instances handed out one per NodeClaim and tagged with it. The call counts are server-wide,
//! so this file runs in its own process, hence on its own emulator, and its tests take turns.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Result};
use kerf::cloud::CloudProvider;
use kerf_e2e::aws::AwsEmu;

/// One test at a time counts calls.
static COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_burst_of_launches_is_one_create_fleet_and_each_instance_is_its_claim_s() -> Result<()> {
    let Some(emu) =
        AwsEmu::shared_in_or_skip("batching", "a_burst_of_launches_is_one_create_fleet")?
    else {
        return Ok(());
    };
    let _turn = COUNTING.lock().await;
    let launchable = emu.launchable("batch").await?;
    let cloud = &launchable.cloud;
    // A first launch creates the launch template; the burst then reaches the batcher at once.
    let warm_up = launchable.request("batch-warm", &["c5.large"], &["on-demand"])?;
    cloud.create(&warm_up, SystemTime::now()).await?;
    emu.reset_calls().await?;

    let claims: Vec<String> = (0..8).map(|n| format!("batch-{n}")).collect();
    let requests = claims
        .iter()
        .map(|c| launchable.request(c, &["c5.large"], &["on-demand"]))
        .collect::<Result<Vec<_>>>()?;
    let now = SystemTime::now();
    let launched = futures::future::join_all(requests.iter().map(|r| cloud.create(r, now))).await;
    let launched = launched.into_iter().collect::<Result<Vec<_>, _>>()?;
    let ids: BTreeSet<_> = launched.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), claims.len(), "one instance per claim: {ids:?}");
    let calls = emu.calls().await?;
    assert_eq!(calls.get("CreateFleet"), Some(&1), "{calls:?}");

    // Each instance carries its own claim's name (tagged right after the batched call).
    for (instance, claim) in launched.iter().zip(&claims) {
        let mut tagged = None;
        for _ in 0..50 {
            tagged = cloud
                .get(&instance.provider_id)
                .await?
                .tags
                .get("karpenter.sh/nodeclaim")
                .cloned();
            if tagged.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if tagged.as_ref() != Some(claim) {
            bail!("{} is tagged {tagged:?}, not {claim}", instance.id);
        }
        assert_eq!(instance.tags.get("team").map(String::as_str), Some("e2e"));
    }
    let calls = emu.calls().await?;
    assert_eq!(calls.get("CreateTags"), Some(&8), "{calls:?}");
    Ok(())
}
