//! `catalog/prices.py`, the script that refreshes the shipped on-demand price snapshot from AWS's public Price
//! List offer files: run here on a small offer file of a made-up region, it keeps only the price of the instances
//! kerf launches (on-demand, Linux, shared tenancy, no pre-installed software, used capacity), leaves the other
//! regions' prices as they were, and writes a file kerf's price reader takes. Its second source, Karpenter's
//! generated Go price files (`--karpenter-file`), is run on a made-up file of that shape; and the shipped snapshot
//! holds the regions catalog/README.md says it does.

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
    assert!(
        written["source"].as_str().is_some_and(
            |s| s.contains("AWS Price List offer files, snapshot 2026-11-27 (xx-test-1)")
        ),
        "{}",
        written["source"]
    );

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

/// A price file in the shape of Karpenter's generated ones (pkg/providers/pricing/zz_generated.pricing_*.go), made
/// up here: two regions kerf's snapshot lacks, one it has (with prices that differ from the snapshot's), and a
/// China region, whose prices Karpenter keeps in CNY.
const KARPENTER_FILE: &str = r#"//go:build !ignore_autogenerated

/*
A made-up price table for kerf's tests.
*/

package pricing

// generated at 2026-10-02T08:15:00Z for us-east-1

import ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

var InitialOnDemandPricesTest = map[string]map[ec2types.InstanceType]float64{
	// xx-test-1
	"xx-test-1": {
		// m5 family
		"m5.large": 0.111000, "m5.xlarge": 0.222000, "m5.2xlarge": 0.444000,
		// t3 family
		"t3.micro": 0.012500, "t3.small": 0.025000,
	},
	"xx-test-2": {
		"c6g.large": 0.081600, "c6g.xlarge": 0.163200, // a trailing comment
		"m5.large": 0.133000,
	},
	"us-east-1": {
		"m5.large": 9.990000, "zz9.large": 1.000000,
	},
	"cn-test-1": {
		"m5.large": 0.880000,
	},
}
"#;

/// Runs the script with `args`, updating the snapshot `out`.
fn prices_py(out: &Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/prices.py"))
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("python3 runs")
}

fn json_of(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("readable")).expect("json")
}

fn shipped() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/on-demand-prices.json")
}

#[test]
fn a_karpenter_price_file_adds_the_regions_the_snapshot_lacks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("zz_generated.pricing_test.go");
    std::fs::write(&go, KARPENTER_FILE).expect("go file");
    let out = dir.path().join("prices.json");
    std::fs::copy(shipped(), &out).expect("copy of the snapshot");
    let before = json_of(&out);

    let done = prices_py(
        &out,
        &[
            "--only-new-regions".as_ref(),
            "--karpenter-file".as_ref(),
            go.as_os_str(),
        ],
    );
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    assert!(stderr.contains("cn-test-1: skipped"), "{stderr}");

    let written = json_of(&out);
    let regions = &written["onDemandUsdPerHour"];
    assert_eq!(
        regions["xx-test-1"],
        serde_json::json!({"m5.large": 0.111, "m5.xlarge": 0.222, "m5.2xlarge": 0.444,
                           "t3.micro": 0.0125, "t3.small": 0.025})
    );
    assert_eq!(
        regions["xx-test-2"],
        serde_json::json!({"c6g.large": 0.0816, "c6g.xlarge": 0.1632, "m5.large": 0.133})
    );
    assert_eq!(
        regions["us-east-1"], before["onDemandUsdPerHour"]["us-east-1"],
        "a region the snapshot has is left as it was"
    );
    assert!(
        regions.get("cn-test-1").is_none(),
        "CNY prices never go under USD"
    );
    for (region, prices) in before["onDemandUsdPerHour"].as_object().expect("regions") {
        assert_eq!(&regions[region], prices, "{region} is kept");
    }
    let source = written["source"].as_str().expect("source");
    assert!(
        source.contains("Karpenter's static price snapshot (aws/karpenter-provider-aws), snapshot 2026-10-02 (xx-test-1, xx-test-2)"),
        "{source}"
    );
    assert!(source.contains("(us-east-1"), "{source}");

    // One type per line, as the Price List path writes it.
    let text = std::fs::read_to_string(&out).expect("written");
    assert!(text.lines().any(|line| line == "\"t3.micro\": 0.0125,"));

    let pricing = Pricing::from_json(&text).expect("kerf reads it");
    assert_eq!(pricing.on_demand("xx-test-1", "m5.large"), Some(0.111));
    assert_eq!(pricing.on_demand("xx-test-2", "c6g.xlarge"), Some(0.1632));
    assert_eq!(pricing.on_demand("xx-test-2", "t3.micro"), None);
    assert_eq!(
        pricing.on_demand("us-east-1", "m5.large"),
        before["onDemandUsdPerHour"]["us-east-1"]["m5.large"].as_f64()
    );
    assert_eq!(pricing.on_demand("us-east-1", "zz9.large"), None);
    assert_eq!(pricing.source(), Some(source));

    // Again: nothing is new any more, and the file does not change.
    let again = prices_py(
        &out,
        &[
            "--only-new-regions".as_ref(),
            "--karpenter-file".as_ref(),
            go.as_os_str(),
        ],
    );
    assert!(again.status.success());
    assert_eq!(std::fs::read_to_string(&out).expect("written"), text);
}

#[test]
fn without_only_new_regions_a_karpenter_file_replaces_the_regions_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("zz_generated.pricing_test.go");
    std::fs::write(&go, KARPENTER_FILE).expect("go file");
    let out = dir.path().join("prices.json");
    std::fs::write(
        &out,
        r#"{"onDemandUsdPerHour": {"us-east-1": {"m5.large": 0.096}, "eu-west-9": {"m5.large": 0.1}},
            "source": "AWS public on-demand Linux prices (USD per hour), snapshot 2026-07-20"}"#,
    )
    .expect("snapshot");

    let done = prices_py(
        &out,
        &[
            "--karpenter-file".as_ref(),
            go.as_os_str(),
            "--regions".as_ref(),
            "us-east-1,xx-test-2".as_ref(),
            "--date".as_ref(),
            "2026-12-01".as_ref(),
        ],
    );
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let written = json_of(&out);
    assert_eq!(
        written["onDemandUsdPerHour"],
        serde_json::json!({
            "eu-west-9": {"m5.large": 0.1},
            "us-east-1": {"m5.large": 9.99, "zz9.large": 1.0},
            "xx-test-2": {"c6g.large": 0.0816, "c6g.xlarge": 0.1632, "m5.large": 0.133},
        })
    );
    assert_eq!(
        written["source"],
        "AWS public on-demand Linux prices (USD per hour): AWS Price List offer files, snapshot 2026-07-20 \
         (eu-west-9); Karpenter's static price snapshot (aws/karpenter-provider-aws), snapshot 2026-12-01 \
         (us-east-1, xx-test-2)"
    );
}

#[test]
fn a_malformed_karpenter_file_names_its_line_and_leaves_the_snapshot_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("prices.json");
    std::fs::copy(shipped(), &out).expect("copy of the snapshot");
    let before = std::fs::read(&out).expect("snapshot");
    let cases = [
        // A missing comma between two entries of line 4.
        (
            "package pricing\n\nvar P = map[string]map[string]float64{\n\t\"xx-test-1\": {\"m5.large\": 0.1 \"m5.xlarge\": 0.2},\n}\n",
            "line 4",
        ),
        // A price that is not a number.
        (
            "var P = map[string]map[string]float64{\n\"xx-test-1\": {\n\"m5.large\": \"0.1\",\n},\n}\n",
            "line 3",
        ),
        // A negative price.
        (
            "var P = map[string]map[string]float64{\n\"xx-test-1\": {\"m5.large\": -0.1},\n}\n",
            "line 2",
        ),
        // A region block that never closes.
        (
            "var P = map[string]map[string]float64{\n\"xx-test-1\": {\n\"m5.large\": 0.1,\n",
            "line 3",
        ),
        // A string that runs off its line.
        (
            "var P = map[string]map[string]float64{\n\"xx-test-1\": {\n\"m5.large: 0.1,\n}}\n",
            "line 3",
        ),
        // Not a price file at all.
        ("\u{feff}\u{0}{{{ odd }}} é", "not one of Karpenter's generated price files"),
    ];
    for (number, (text, where_)) in cases.iter().enumerate() {
        let go = dir.path().join(format!("bad-{number}.go"));
        std::fs::write(&go, text).expect("go file");
        let done = prices_py(&out, &["--karpenter-file".as_ref(), go.as_os_str()]);
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert!(!done.status.success(), "case {number}: {stderr}");
        assert!(
            stderr.contains(&format!("bad-{number}.go: ")) && stderr.contains(where_),
            "case {number}: {stderr}"
        );
        assert!(!stderr.contains("Traceback"), "case {number}: {stderr}");
        assert_eq!(
            std::fs::read(&out).expect("snapshot"),
            before,
            "case {number}"
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|entry| entry.expect("entry").file_name())
        .filter(|name| name.to_string_lossy().starts_with(".prices-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn the_shipped_snapshot_prices_the_us_gov_regions_in_usd() {
    let snapshot = json_of(&shipped());
    let regions = snapshot["onDemandUsdPerHour"].as_object().expect("regions");
    for region in ["us-east-1", "us-gov-east-1", "us-gov-west-1"] {
        let price = regions[region]["m5.large"]
            .as_f64()
            .unwrap_or_else(|| panic!("{region} prices m5.large"));
        assert!((0.05..0.5).contains(&price), "{region}: {price}");
    }
    // Karpenter's cn-north-1 prices are CNY: the snapshot does not hold them, and China takes us-east-1's.
    assert!(!regions.keys().any(|region| region.starts_with("cn-")));
    let pricing = Pricing::snapshot();
    let gov = pricing
        .on_demand("us-gov-west-1", "m5.large")
        .expect("priced");
    assert!((0.05..0.5).contains(&gov), "{gov}");
    assert_eq!(
        pricing.on_demand("cn-north-1", "m5.large"),
        pricing.on_demand("us-east-1", "m5.large")
    );
    let source = snapshot["source"].as_str().expect("source");
    assert!(
        source.contains("(us-gov-east-1, us-gov-west-1)") && source.contains("Karpenter"),
        "{source}"
    );
}
