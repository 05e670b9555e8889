//! Budget schedules: the robfig/cron v3 standard dialect Karpenter evaluates (api-rules.md §2.8), in UTC.
//!
//! kerf parses the five fields itself so that a bad schedule is rejected with a precise reason
//! (`beginning of range (6) beyond end of range (0): sat-sun`), then hands the expanded fields to the `cron`
//! crate to find hits. robfig ORs day-of-month and day-of-week when both are restricted while the `cron` crate
//! ANDs them, so such a schedule becomes two `cron` schedules whose hits are merged.

use std::fmt;

/// A parsed schedule: the set of values each field allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSchedule {
    minutes: u64,
    hours: u32,
    days_of_month: u32,
    months: u16,
    days_of_week: u8,
    /// Whether the day fields were `*` / `?` (robfig's "star bit"), which decides AND versus OR.
    dom_star: bool,
    dow_star: bool,
}

/// Why a schedule does not parse; the text follows robfig's errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(String);

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Field = Field {
    name: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl CronSchedule {
    /// Parses a descriptor (`@daily`) or five whitespace-separated fields.
    pub fn parse(spec: &str) -> Result<Self, CronError> {
        let spec = spec.trim_end();
        if let Some(descriptor) = spec.strip_prefix('@') {
            let fields = match descriptor {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => return Err(CronError(format!("unrecognized descriptor: {spec}"))),
            };
            return Self::parse(fields);
        }
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            return Err(CronError(
                "time zones are not supported: schedules are evaluated in UTC".into(),
            ));
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields.as_slice() else {
            return Err(CronError(format!(
                "expected exactly 5 fields, found {}",
                fields.len()
            )));
        };
        Ok(CronSchedule {
            minutes: parse_field(minute, &MINUTE)?,
            hours: narrow(parse_field(hour, &HOUR)?),
            days_of_month: narrow(parse_field(dom, &DOM)?),
            months: narrow(parse_field(month, &MONTH)?),
            days_of_week: narrow(parse_field(dow, &DOW)?),
            dom_star: is_star(dom),
            dow_star: is_star(dow),
        })
    }

    /// Whether the schedule can ever fire. robfig gives up after five years and reports no hit, which makes
    /// Karpenter treat the budget as always active: `0 0 30 2 *` is such a schedule.
    pub fn ever_fires(&self) -> bool {
        if !self.dow_star {
            return true; // some weekday always comes round (OR with the day of month, or AND with `*`)
        }
        const MAX_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        (1..=12u32)
            .filter(|m| self.months & (1 << m) != 0)
            .any(|m| {
                let max_day = MAX_DAYS[(m - 1) as usize];
                (1..=max_day).any(|d| self.days_of_month & (1 << d) != 0)
            })
    }

    /// Whether the schedule fires at this UTC time: whole minutes only, with robfig's day rule (day of month
    /// OR day of week when both are restricted, AND otherwise). A direct reading of the fields, independent of
    /// the `cron` crate, so that tests can check the translation minute by minute.
    pub fn fires_at(&self, time: k8s_openapi::jiff::civil::DateTime) -> bool {
        let bit = |set: u64, value: i8| u8::try_from(value).is_ok_and(|v| set & (1 << v) != 0);
        let dom = bit(self.days_of_month.into(), time.day());
        let dow = bit(
            self.days_of_week.into(),
            time.weekday().to_sunday_zero_offset(),
        );
        let day = if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        };
        time.second() == 0
            && time.subsec_nanosecond() == 0
            && bit(self.minutes, time.minute())
            && bit(self.hours.into(), time.hour())
            && bit(self.months.into(), time.month())
            && day
    }

    /// The equivalent `cron` crate schedules (seconds first, Sunday = 1), whose hits together are this one's.
    pub fn to_cron_crate(&self) -> Result<Vec<cron::Schedule>, CronError> {
        let minutes = list(self.minutes, 0, 59, 0);
        let hours = list(self.hours.into(), 0, 23, 0);
        let months = list(self.months.into(), 1, 12, 0);
        let doms = list(self.days_of_month.into(), 1, 31, 0);
        let dows = list(self.days_of_week.into(), 0, 6, 1);
        let expressions = if self.dom_star || self.dow_star {
            // robfig ANDs when either day field is `*`: the `*` side matches every day anyway.
            vec![format!("0 {minutes} {hours} {doms} {months} {dows}")]
        } else {
            vec![
                format!("0 {minutes} {hours} {doms} {months} *"),
                format!("0 {minutes} {hours} * {months} {dows}"),
            ]
        };
        expressions
            .iter()
            .map(|e| {
                e.parse::<cron::Schedule>()
                    .map_err(|err| CronError(format!("{e}: {err}")))
            })
            .collect()
    }
}

fn narrow<T: TryFrom<u64> + Default>(bits: u64) -> T {
    T::try_from(bits).unwrap_or_default()
}

fn is_star(field: &str) -> bool {
    field == "*" || field == "?"
}

/// The set bits of `bits` in `min..=max`, shifted by `offset`, as a comma-separated list.
fn list(bits: u64, min: u32, max: u32, offset: u32) -> String {
    let values: Vec<String> = (min..=max)
        .filter(|v| bits & (1 << v) != 0)
        .map(|v| (v + offset).to_string())
        .collect();
    values.join(",")
}

/// Parses one field (a comma-separated list of items) into a bitset of the values it allows.
fn parse_field(text: &str, field: &Field) -> Result<u64, CronError> {
    text.split(',')
        .try_fold(0u64, |bits, item| Ok(bits | parse_item(item, field)?))
}

fn parse_item(item: &str, field: &Field) -> Result<u64, CronError> {
    if item.is_empty() {
        return Err(CronError(format!("empty item in {} field", field.name)));
    }
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => {
            let step: u32 = step
                .parse()
                .map_err(|_| CronError(format!("failed to parse int from {step}")))?;
            if step == 0 {
                return Err(CronError(format!(
                    "step of range should be a positive number: {item}"
                )));
            }
            (range, Some(step))
        }
        None => (item, None),
    };
    let (start, end) = if is_star(range) {
        (field.min, field.max)
    } else if let Some((lo, hi)) = range.split_once('-') {
        (value(lo, field)?, value(hi, field)?)
    } else {
        let start = value(range, field)?;
        // `N/S` runs from N to the field's maximum.
        (start, if step.is_some() { field.max } else { start })
    };
    if start < field.min {
        return Err(CronError(format!(
            "beginning of range ({start}) below minimum ({}): {item}",
            field.min
        )));
    }
    if end > field.max {
        return Err(CronError(format!(
            "end of range ({end}) above maximum ({}): {item}",
            field.max
        )));
    }
    if start > end {
        return Err(CronError(format!(
            "beginning of range ({start}) beyond end of range ({end}): {item}"
        )));
    }
    let step = step.unwrap_or(1) as usize;
    Ok((start..=end)
        .step_by(step)
        .fold(0, |bits, v| bits | (1 << v)))
}

/// A number or (case-insensitive) name.
fn value(text: &str, field: &Field) -> Result<u32, CronError> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = field.names.iter().position(|n| *n == lower) {
        return Ok(field.min + i as u32);
    }
    text.parse()
        .map_err(|_| CronError(format!("failed to parse int from {text}")))
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {}",
            list(self.minutes, 0, 59, 0),
            list(self.hours.into(), 0, 23, 0),
            list(self.days_of_month.into(), 1, 31, 0),
            list(self.months.into(), 1, 12, 0),
            list(self.days_of_week.into(), 0, 6, 0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        CronSchedule::parse(spec)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn accepts_the_standard_dialect() {
        for ok in [
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
            "@daily  ",
            "0 9 * * mon-fri",
            "*/15 * * * *",
            "5/15 0-6 1,15 jan-jun ?",
            "0 0 * * SUN",
            "30 22 * * 1-5",
        ] {
            assert!(CronSchedule::parse(ok).is_ok(), "{ok}: {}", err(ok));
        }
        assert_eq!(CronSchedule::parse("5/20 1 * * *").map(|s| s.to_string()), Ok("5,25,45 1 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31 1,2,3,4,5,6,7,8,9,10,11,12 0,1,2,3,4,5,6".to_owned()));
    }

    #[test]
    fn rejects_with_robfig_style_reasons() {
        assert_eq!(
            err("0 0 * * sat-sun"),
            "beginning of range (6) beyond end of range (0): sat-sun"
        );
        assert_eq!(err("0 0 * * 7"), "end of range (7) above maximum (6): 7");
        assert_eq!(err("0 0 0 * * *"), "expected exactly 5 fields, found 6");
        assert_eq!(err("@dailyfoo"), "unrecognized descriptor: @dailyfoo");
        assert_eq!(err("@every 1h"), "unrecognized descriptor: @every 1h");
        assert_eq!(
            err("60 * * * *"),
            "end of range (60) above maximum (59): 60"
        );
        assert_eq!(
            err("0 22-2 * * *"),
            "beginning of range (22) beyond end of range (2): 22-2"
        );
        assert_eq!(
            err("*/0 * * * *"),
            "step of range should be a positive number: */0"
        );
        assert_eq!(err("1,,2 * * * *"), "empty item in minute field");
        assert_eq!(err("0 0 L * *"), "failed to parse int from L");
        assert_eq!(err("0 0 1W * *"), "failed to parse int from 1W");
        assert_eq!(err("0 0 * * 1#2"), "failed to parse int from 1#2");
        assert_eq!(
            err("0 0 0 * *"),
            "beginning of range (0) below minimum (1): 0"
        );
        assert_eq!(
            err("TZ=UTC 0 0 * * *"),
            "time zones are not supported: schedules are evaluated in UTC"
        );
        assert_eq!(err("* * * *"), "expected exactly 5 fields, found 4");
    }

    #[test]
    fn detects_schedules_that_never_fire() {
        assert!(!CronSchedule::parse("0 0 30 2 *")
            .map(|s| s.ever_fires())
            .unwrap_or(true));
        assert!(CronSchedule::parse("0 0 29 2 *")
            .map(|s| s.ever_fires())
            .unwrap_or(false));
        assert!(CronSchedule::parse("0 0 30 2 mon")
            .map(|s| s.ever_fires())
            .unwrap_or(false));
    }

    #[test]
    fn reads_hits_off_the_fields() {
        use k8s_openapi::jiff::civil::date;
        let fires = |spec: &str, day: i8, hour: i8, minute: i8, second: i8| {
            CronSchedule::parse(spec)
                .map(|s| s.fires_at(date(2026, 11, day).at(hour, minute, second, 0)))
                .unwrap_or(false)
        };
        // 2026-11-01 is a Sunday, 2026-11-02 a Monday.
        assert!(fires("0 9 1 * mon", 1, 9, 0, 0) && fires("0 9 1 * mon", 2, 9, 0, 0));
        assert!(!fires("0 9 1 * mon", 3, 9, 0, 0));
        assert!(!fires("0 9 * * mon", 1, 9, 0, 0) && fires("0 9 * * mon", 2, 9, 0, 0));
        assert!(!fires("0 9 * * *", 1, 9, 0, 30), "whole minutes only");
        assert!(!fires("0 9 * * *", 1, 9, 1, 0));
        assert!(fires("*/20 9 * nov *", 1, 9, 40, 0) && !fires("*/20 9 * dec *", 1, 9, 40, 0));
    }

    #[test]
    fn translates_to_the_cron_crate_with_robfig_day_semantics() {
        let and = CronSchedule::parse("0 9 * * mon")
            .and_then(|s| s.to_cron_crate())
            .expect("parses");
        assert_eq!(and.len(), 1);
        let or = CronSchedule::parse("0 9 1 * mon")
            .and_then(|s| s.to_cron_crate())
            .expect("parses");
        assert_eq!(or.len(), 2);
    }
}
