//! `catalog/prices.py`, the script that refreshes the shipped on-demand price snapshot from AWS's public Price
//! List offer files: run here on a small offer file of a made-up region, it keeps only the price of the instances
//! kerf launches (on-demand, Linux, shared tenancy, no pre-installed software, used capacity), leaves the other
//! regions' prices as they were, and writes a file kerf's price reader takes.

use kerf::catalog::Pricing;
use std::path::Path;
use std::process::Command;

/// An offer file as AWS writes them: metadata lines, then the header, then one row per price. Only the first
/// row is a kerf node's price; each other one differs in one column that rules it out.
const OFFER: &str = r#""FormatVersion","v1.0"
"Disclaimer","This pricing list is for informational purposes only."
"Publication Date","2026-11-01T00:00:00Z"
"Version","20261101000000"
"OfferCode","AmazonEC2"
"SKU","OfferTermCode","RateCode","TermType","PriceDescription","EffectiveDate","StartingRange","EndingRange","Unit","PricePerUnit","Currency","Product Family","Instance Type","Operating System","Tenancy","Pre Installed S/W","CapacityStatus","License Model"
"A","JRTCKXETXF","A.1","OnDemand","$0.107 per On Demand Linux m5.large Instance Hour","2026-11-01","0","Inf","Hrs","0.1070000000","USD","Compute Instance","m5.large","Linux","Shared","NA","Used","No License required"
"B","JRTCKXETXF","B.1","OnDemand","Windows","2026-11-01","0","Inf","Hrs","0.2030000000","USD","Compute Instance","m5.large","Windows","Shared","NA","Used","License included"
"C","JRTCKXETXF","C.1","OnDemand","Dedicated","2026-11-01","0","Inf","Hrs","0.1180000000","USD","Compute Instance","m5.large","Linux","Dedicated","NA","Used","No License required"
"D","4NA7Y494T4","D.1","Reserved","1yr","2026-11-01","0","Inf","Hrs","0.0670000000","USD","Compute Instance","m5.large","Linux","Shared","NA","Used","No License required"
"E","JRTCKXETXF","E.1","OnDemand","Reservation","2026-11-01","0","Inf","Hrs","0.0000000000","USD","Compute Instance","c5.large","Linux","Shared","NA","UnusedCapacityReservation","No License required"
"F","JRTCKXETXF","F.1","OnDemand","SQL Web","2026-11-01","0","Inf","Hrs","0.1500000000","USD","Compute Instance","c5.large","Linux","Shared","SQL Web","Used","No License required"
"G","JRTCKXETXF","G.1","OnDemand","zero","2026-11-01","0","Inf","Hrs","0.0000000000","USD","Compute Instance","c5.xlarge","Linux","Shared","NA","Used","No License required"
"#;

/// Runs the script on the offer file `offer` as region `xx-test-1`, updating the snapshot `out`, with `extra` flags.
fn refresh(offer: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/prices.py"))
        .arg("--offer-file")
        .arg(offer)
        .args(["--region", "xx-test-1", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .expect("python3 runs")
}

#[test]
fn the_refresh_script_keeps_kerf_nodes_prices_and_the_other_regions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let offer = dir.path().join("index.csv");
    std::fs::write(&offer, OFFER).expect("offer file");
    let out = dir.path().join("prices.json");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/on-demand-prices.json");
    std::fs::copy(&shipped, &out).expect("copy of the snapshot");

    let done = refresh(&offer, &out, &["--date", "2026-11-27"]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("written")).expect("json");
    assert_eq!(
        written["onDemandUsdPerHour"]["xx-test-1"],
        serde_json::json!({"m5.large": 0.107})
    );
    let before: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&shipped).expect("snapshot")).expect("json");
    assert_eq!(
        written["onDemandUsdPerHour"]["us-east-1"], before["onDemandUsdPerHour"]["us-east-1"],
        "the other regions are kept"
    );
    assert!(written["source"]
        .as_str()
        .is_some_and(|s| s.ends_with("snapshot 2026-11-27")));

    let pricing = Pricing::from_json(&std::fs::read_to_string(&out).expect("written"))
        .expect("kerf reads it");
    assert_eq!(pricing.on_demand("xx-test-1", "m5.large"), Some(0.107));
    assert_eq!(pricing.on_demand("xx-test-1", "c5.large"), None);
}

#[test]
fn a_file_that_is_not_an_offer_file_leaves_the_snapshot_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let offer = dir.path().join("index.csv");
    std::fs::write(&offer, "\"a\",\"b\"\n1,2\n").expect("offer file");
    let out = dir.path().join("prices.json");
    std::fs::write(&out, "{\"onDemandUsdPerHour\": {}, \"source\": \"s\"}").expect("snapshot");
    let done = refresh(&offer, &out, &[]);
    assert!(!done.status.success());
    assert!(String::from_utf8_lossy(&done.stderr).contains("not an EC2 offer file"));
    assert_eq!(
        std::fs::read_to_string(&out).expect("kept"),
        "{\"onDemandUsdPerHour\": {}, \"source\": \"s\"}"
    );
}
