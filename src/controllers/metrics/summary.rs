//! Prometheus summaries, which prometheus-client cannot express: Karpenter declares two
//! (`karpenter_nodes_termination_duration_seconds`, `karpenter_pods_startup_duration_seconds`) with the
//! objectives 0, 0.5, 0.9, 0.99 and 1 (`metrics.SummaryObjectives()`), over client_golang's default window of
//! the last 10 minutes. The quantiles here are exact over that window (at most [`MAX_WINDOW`] observations per
//! series, the oldest dropped first); `_sum` and `_count` cover every observation since the start, as
//! client_golang's do. They are written into the text after the registry's families.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::{self, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Karpenter's quantiles.
pub const OBJECTIVES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];
/// client_golang's `DefMaxAge`: observations older than this leave the quantiles.
pub const MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// Observations kept per series for the quantiles: a bound on memory when thousands of pods start at once.
pub const MAX_WINDOW: usize = 4096;
/// Series kept per summary (one per NodePool at most in practice); a new one beyond it is not recorded.
pub const MAX_SERIES: usize = 1024;

/// One summary family: its name, help and label names, and a series per label values.
#[derive(Debug)]
pub struct Summary {
    name: &'static str,
    help: &'static str,
    label_names: &'static [&'static str],
    series: Mutex<BTreeMap<Vec<String>, Series>>,
}

#[derive(Debug, Default)]
struct Series {
    window: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

impl Summary {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        label_names: &'static [&'static str],
    ) -> Summary {
        Summary {
            name,
            help,
            label_names,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records `value` for the series of `label_values` (in the order of the label names).
    pub fn observe(&self, label_values: &[&str], value: f64) {
        self.observe_at(label_values, value, Instant::now());
    }

    pub fn observe_at(&self, label_values: &[&str], value: f64, now: Instant) {
        if label_values.len() != self.label_names.len() || !value.is_finite() {
            tracing::warn!(
                summary = self.name,
                ?label_values,
                value,
                "observation dropped: wrong labels or not a number"
            );
            return;
        }
        let key: Vec<String> = label_values.iter().map(|v| (*v).to_owned()).collect();
        let mut series = self.lock();
        if !series.contains_key(&key) && series.len() >= MAX_SERIES {
            tracing::warn!(summary = self.name, "observation dropped: too many series");
            return;
        }
        let one = series.entry(key).or_default();
        one.sum += value;
        one.count += 1;
        if one.window.len() == MAX_WINDOW {
            one.window.pop_front();
        }
        one.window.push_back((now, value));
    }

    /// The family in the text format at `now`; nothing while it has no series.
    pub fn encode(&self, out: &mut String, now: Instant) -> fmt::Result {
        let mut series = self.lock();
        if series.is_empty() {
            return Ok(());
        }
        // With the full stop prometheus-client ends its help texts with.
        writeln!(out, "# HELP {} {}.", self.name, self.help)?;
        writeln!(out, "# TYPE {} summary", self.name)?;
        for (values, one) in series.iter_mut() {
            while one
                .window
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > MAX_AGE)
            {
                one.window.pop_front();
            }
            let mut window: Vec<f64> = one.window.iter().map(|(_, v)| *v).collect();
            window.sort_by(f64::total_cmp);
            let pairs: Vec<(&str, &str)> = self
                .label_names
                .iter()
                .copied()
                .zip(values.iter().map(String::as_str))
                .collect();
            for objective in OBJECTIVES {
                let quantile = objective.to_string();
                let mut labels = pairs.clone();
                labels.push(("quantile", &quantile));
                writeln!(
                    out,
                    "{}{} {}",
                    self.name,
                    label_text(&labels),
                    number(nearest_rank(&window, objective))
                )?;
            }
            let labels = label_text(&pairs);
            writeln!(out, "{}_sum{labels} {}", self.name, number(one.sum))?;
            writeln!(out, "{}_count{labels} {}", self.name, one.count)?;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<String>, Series>> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `q`-quantile of the sorted `values` by nearest rank; NaN without values (as client_golang reports).
fn nearest_rank(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.saturating_sub(1).min(values.len() - 1)]
}

/// A sample value as the text format spells it.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        value.to_string()
    }
}

/// `{a="x",b="y"}` with the values escaped, or nothing without labels.
fn label_text(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(name, value)| {
            let escaped = value
                .replace('\\', r"\\")
                .replace('"', "\\\"")
                .replace('\n', r"\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_cover_the_window_while_sum_and_count_cover_everything() {
        let summary = Summary::new("s_seconds", "a summary", &["nodepool"]);
        let start = Instant::now();
        summary.observe_at(&["a"], 100.0, start);
        for value in 1..=10 {
            summary.observe_at(&["a"], f64::from(value), start + MAX_AGE);
        }
        let mut text = String::new();
        summary
            .encode(&mut text, start + MAX_AGE + Duration::from_secs(1))
            .expect("encodable");
        assert!(
            text.starts_with("# HELP s_seconds a summary.\n# TYPE s_seconds summary\n"),
            "{text}"
        );
        // The first observation aged out of the quantiles…
        assert!(
            text.contains("s_seconds{nodepool=\"a\",quantile=\"0\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("s_seconds{nodepool=\"a\",quantile=\"0.5\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("s_seconds{nodepool=\"a\",quantile=\"0.99\"} 10\n"),
            "{text}"
        );
        assert!(
            text.contains("s_seconds{nodepool=\"a\",quantile=\"1\"} 10\n"),
            "{text}"
        );
        // …but not out of the sum and count.
        assert!(
            text.contains("s_seconds_sum{nodepool=\"a\"} 155\n"),
            "{text}"
        );
        assert!(
            text.contains("s_seconds_count{nodepool=\"a\"} 11\n"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_window_reports_nan_and_bad_observations_are_dropped() {
        let summary = Summary::new("s", "h", &[]);
        let start = Instant::now();
        summary.observe_at(&[], 2.0, start);
        summary.observe_at(&[], f64::NAN, start);
        summary.observe_at(&["extra"], 1.0, start);
        let mut text = String::new();
        summary
            .encode(&mut text, start + MAX_AGE * 2)
            .expect("encodable");
        assert!(text.contains("s{quantile=\"0.5\"} NaN\n"), "{text}");
        assert!(text.contains("s_count 1\n"), "{text}");

        let empty = Summary::new("e", "h", &[]);
        let mut text = String::new();
        empty.encode(&mut text, start).expect("encodable");
        assert!(text.is_empty());
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_text(&[("a", "x\"y\\z\n")]), r#"{a="x\"y\\z\n"}"#);
    }
}
