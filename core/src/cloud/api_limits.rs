//! The AWS API call budget: a client-side token bucket per API, so a burst of launches or a resync of many
//! classes spends the account's request rate evenly instead of meeting `RequestLimitExceeded` (EC2 throttles
//! each API with a token bucket of its own, per account and region). Calls wait for a token; what they wait is
//! bounded by the call's timeout. Pure: the buckets take the time from the caller.
//!
//! The defaults follow EC2's per-API buckets by kind of call: reads (`Describe*`, `Get*`, `List*`) 100 tokens
//! refilled at 20 per second, the other calls 50 refilled at 5 per second. `--aws-api-rate-limits` sets others,
//! `API=RATE[:BURST]` separated by commas, where `API` is an operation kerf calls, or `read` / `write` for a kind.
//! `--aws-api-max-attempts` gives APIs their own number of attempts ([`ApiAttempts`]) over `--aws-max-attempts`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The EC2, IAM and SSM operations kerf calls, by their AWS names: what `--aws-api-rate-limits` may name. (EKS
/// `DescribeCluster` is called once at start, ARC `GetManagedResource` every 30 s, the Price List API once a day and
/// SQS by long polls: none is budgeted.)
pub const OPERATIONS: &[&str] = &[
    "AddRoleToInstanceProfile",
    "CreateFleet",
    "CreateInstanceProfile",
    "CreateLaunchTemplate",
    "CreateTags",
    "DeleteInstanceProfile",
    "DeleteLaunchTemplate",
    "DescribeCapacityReservations",
    "DescribeImages",
    "DescribeInstanceStatus",
    "DescribeInstanceTypeOfferings",
    "DescribeInstanceTypes",
    "DescribeInstances",
    "DescribeLaunchTemplates",
    "DescribePlacementGroups",
    "DescribeSecurityGroups",
    "DescribeSpotPriceHistory",
    "DescribeSubnets",
    "GetInstanceProfile",
    "GetParameter",
    "RemoveRoleFromInstanceProfile",
    "RunInstances",
    "TerminateInstances",
];

/// At most this many entries in `--aws-api-rate-limits` (more than there are operations is a mistake).
const MAX_ENTRIES: usize = 64;
/// Bounds of a rate (calls per second) and of a burst.
const MAX_RATE: f64 = 10_000.0;
const MAX_BURST: u32 = 10_000;

/// One bucket's size: `burst` calls at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u32,
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.per_second, self.burst)
    }
}

/// The limit of every API: the named ones, else the default of its kind.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiRateLimits {
    read: RateLimit,
    write: RateLimit,
    named: BTreeMap<String, RateLimit>,
}

impl Default for ApiRateLimits {
    fn default() -> Self {
        ApiRateLimits {
            read: RateLimit {
                per_second: 20.0,
                burst: 100,
            },
            write: RateLimit {
                per_second: 5.0,
                burst: 50,
            },
            named: BTreeMap::new(),
        }
    }
}

impl ApiRateLimits {
    /// The limit of `operation`.
    pub fn limit(&self, operation: &str) -> RateLimit {
        if let Some(limit) = self.named.get(operation) {
            return *limit;
        }
        if is_read(operation) {
            self.read
        } else {
            self.write
        }
    }

    /// Parses `API=RATE[:BURST],…` over the defaults (empty: the defaults). A burst left out is the rate rounded
    /// up (at least 1). Every entry names a known operation or `read` / `write`; rates are positive.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut limits = ApiRateLimits::default();
        for (name, limit) in entries(text, "API=RATE[:BURST]")? {
            let limit = parse_limit(limit).map_err(|e| format!("{name}: {e}"))?;
            match name {
                "read" => limits.read = limit,
                "write" => limits.write = limit,
                _ => {
                    let name = known(name).map_err(|e| format!("{e}, or read / write"))?;
                    limits.named.insert(name, limit);
                }
            }
        }
        Ok(limits)
    }
}

/// Attempts per call of the APIs given their own (`--aws-api-max-attempts`, `API=N` separated by commas, 1 to
/// 10); the others keep the global number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiAttempts {
    named: BTreeMap<String, u32>,
}

impl ApiAttempts {
    /// The attempts `operation` was given, if any.
    pub fn of(&self, operation: &str) -> Option<u32> {
        self.named.get(operation).copied()
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let mut attempts = ApiAttempts::default();
        for (name, n) in entries(text, "API=ATTEMPTS")? {
            let n: u32 = n
                .parse()
                .ok()
                .filter(|n| (1..=MAX_ATTEMPTS).contains(n))
                .ok_or_else(|| format!("{name}: attempts {n:?} must be 1 to {MAX_ATTEMPTS}"))?;
            attempts.named.insert(known(name)?, n);
        }
        Ok(attempts)
    }
}

/// The most attempts of one call.
pub const MAX_ATTEMPTS: u32 = 10;

/// The `NAME=VALUE` entries of a comma-separated list (at most [`MAX_ENTRIES`]), trimmed.
fn entries<'t>(text: &'t str, form: &str) -> Result<Vec<(&'t str, &'t str)>, String> {
    let entries: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.len() > MAX_ENTRIES {
        return Err(format!(
            "at most {MAX_ENTRIES} entries, got {}",
            entries.len()
        ));
    }
    entries
        .into_iter()
        .map(|entry| {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?}: expected {form}"))?;
            Ok((name.trim(), value.trim()))
        })
        .collect()
}

/// `name` if it is an operation kerf calls.
fn known(name: &str) -> Result<String, String> {
    if OPERATIONS.contains(&name) {
        Ok(name.to_owned())
    } else {
        Err(format!(
            "unknown API {name:?}; use one of {}",
            OPERATIONS.join(", ")
        ))
    }
}

/// Reads are the calls that change nothing: EC2 gives them the larger buckets.
fn is_read(operation: &str) -> bool {
    ["Describe", "Get", "List"]
        .iter()
        .any(|prefix| operation.starts_with(prefix))
}

fn parse_limit(text: &str) -> Result<RateLimit, String> {
    let (rate, burst) = match text.split_once(':') {
        Some((rate, burst)) => (rate, Some(burst)),
        None => (text, None),
    };
    let rate = rate.trim().trim_end_matches("/s");
    let per_second: f64 = rate
        .parse()
        .map_err(|_| format!("rate {rate:?} is not a number of calls per second"))?;
    if !per_second.is_finite() || per_second <= 0.0 || per_second > MAX_RATE {
        return Err(format!(
            "rate {per_second} must be above 0 and at most {MAX_RATE}"
        ));
    }
    let burst = match burst {
        Some(burst) => burst
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("burst {burst:?} is not a whole number"))?,
        // Bounded above, so the conversion cannot overflow.
        None => per_second.ceil().max(1.0) as u32,
    };
    if burst == 0 || burst > MAX_BURST {
        return Err(format!("burst {burst} must be 1 to {MAX_BURST}"));
    }
    Ok(RateLimit { per_second, burst })
}

/// One API's bucket. A call takes a token at once, possibly into debt: the caller waits until the bucket would
/// have had it, so that waiting callers are served in order and none is starved.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    limit: RateLimit,
    tokens: f64,
    /// When `tokens` was counted, on the caller's clock.
    at: Duration,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(limit: RateLimit, now: Duration) -> Self {
        TokenBucket {
            limit,
            tokens: f64::from(limit.burst),
            at: now,
        }
    }

    /// Takes a token at `now`: how long the call must wait first (zero while the bucket has tokens).
    pub fn take(&mut self, now: Duration) -> Duration {
        let elapsed = now.saturating_sub(self.at).as_secs_f64();
        self.tokens =
            (self.tokens + elapsed * self.limit.per_second).min(f64::from(self.limit.burst));
        self.at = self.at.max(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.limit.per_second)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_have_ec2s_default_buckets_and_named_apis_their_own() {
        let defaults = ApiRateLimits::default();
        assert_eq!(defaults.limit("DescribeInstances").burst, 100);
        assert_eq!(defaults.limit("DescribeInstances").per_second, 20.0);
        assert_eq!(defaults.limit("CreateFleet").burst, 50);
        assert_eq!(defaults.limit("CreateFleet").per_second, 5.0);
        let set =
            ApiRateLimits::parse("CreateFleet=2:4, read=50/s, TerminateInstances=0.5").unwrap();
        assert_eq!(
            set.limit("CreateFleet"),
            RateLimit {
                per_second: 2.0,
                burst: 4
            }
        );
        assert_eq!(set.limit("DescribeSubnets").per_second, 50.0);
        assert_eq!(set.limit("DescribeSubnets").burst, 50, "burst = rate");
        assert_eq!(set.limit("TerminateInstances").burst, 1);
        assert_eq!(set.limit("CreateTags"), defaults.limit("CreateTags"));
        assert_eq!(ApiRateLimits::parse("").unwrap(), defaults);
    }

    #[test]
    fn a_bad_entry_names_what_is_wrong() {
        for (text, says) in [
            ("CreatFleet=5", "unknown API \"CreatFleet\""),
            ("CreateFleet", "expected API=RATE[:BURST]"),
            ("CreateFleet=fast", "not a number"),
            ("CreateFleet=0", "must be above 0"),
            ("CreateFleet=-1", "must be above 0"),
            ("CreateFleet=NaN", "must be above 0"),
            ("CreateFleet=inf", "must be above 0"),
            ("CreateFleet=5:0", "burst 0"),
            ("CreateFleet=5:x", "not a whole number"),
            ("CreateFleet=5:99999999999", "not a whole number"),
        ] {
            let error = ApiRateLimits::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
        let many = vec!["read=1"; MAX_ENTRIES + 1].join(",");
        assert!(ApiRateLimits::parse(&many).is_err());
    }

    #[test]
    fn attempts_are_set_per_api_within_bounds() {
        let attempts = ApiAttempts::parse("CreateFleet=1, DescribeInstances=5").unwrap();
        assert_eq!(attempts.of("CreateFleet"), Some(1));
        assert_eq!(attempts.of("DescribeInstances"), Some(5));
        assert_eq!(attempts.of("DescribeSubnets"), None);
        assert_eq!(ApiAttempts::parse("").unwrap(), ApiAttempts::default());
        for (text, says) in [
            ("CreateFleet=0", "must be 1 to 10"),
            ("CreateFleet=11", "must be 1 to 10"),
            ("CreateFleet=two", "must be 1 to 10"),
            ("CreatFleet=2", "unknown API"),
            ("CreateFleet", "expected API=ATTEMPTS"),
        ] {
            let error = ApiAttempts::parse(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn a_bucket_lets_a_burst_through_then_paces_calls_at_its_rate() {
        let limit = RateLimit {
            per_second: 2.0,
            burst: 3,
        };
        let t0 = Duration::from_secs(100);
        let mut bucket = TokenBucket::new(limit, t0);
        let waits: Vec<Duration> = (0..6).map(|_| bucket.take(t0)).collect();
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [0, 0, 0, 500, 1000, 1500]);
        // Two seconds later the debt (1.5 s of calls) is paid and one token is back.
        let later = t0 + Duration::from_secs(2);
        assert_eq!(bucket.take(later), Duration::ZERO);
        assert_eq!(bucket.take(later).as_millis(), 500);
        // A long idle refills to the burst, never beyond.
        let idle = later + Duration::from_secs(3600);
        let waits: Vec<u128> = (0..4).map(|_| bucket.take(idle).as_millis()).collect();
        assert_eq!(waits, [0, 0, 0, 500]);
        // A clock that goes back does not refill.
        assert!(bucket.take(t0) > Duration::ZERO);
    }
}
