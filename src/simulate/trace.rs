//! Ingestion traces: generated (bursty, mixed streaming/micro-batch/ETL/CDC/quiet) or read from
//! a file.

use super::*;

/// One small file landing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub at_millis: i64,
    pub table: usize,
    pub size: u64,
    pub partition: String,
}

/// An ingestion trace: the files landing, in time order, and the tables' names (indexed by
/// [`Arrival::table`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    pub arrivals: Vec<Arrival>,
    pub tables: Vec<String>,
}

impl Trace {
    fn new(mut arrivals: Vec<Arrival>, tables: Vec<String>) -> Trace {
        arrivals.sort_by_key(|arrival| arrival.at_millis);
        Trace { arrivals, tables }
    }

    /// Every byte that landed.
    pub fn bytes(&self) -> u64 {
        self.arrivals.iter().map(|arrival| arrival.size).sum()
    }
}

/// A bursty day/night trace: busier from 08:00 to 20:00, occasional bursts, daily partitions.
pub fn generate_trace(seed: u64, tables: usize, days: u32, files_per_day: u32) -> Trace {
    Trace::new(
        generate_arrivals(seed, tables, days, files_per_day),
        (0..tables).map(|table| format!("t{table}")).collect(),
    )
}

pub(super) fn generate_arrivals(
    seed: u64,
    tables: usize,
    days: u32,
    files_per_day: u32,
) -> Vec<Arrival> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut arrivals = Vec::new();
    for table in 0..tables {
        for hour in 0..(days as i64 * 24) {
            let day_hour = hour % 24;
            let weight = if (8..20).contains(&day_hour) {
                1.6
            } else {
                0.4
            };
            let burst = if rng.f64() < 0.05 { 6.0 } else { 1.0 };
            let expected = files_per_day as f64 / 24.0 * weight * burst;
            let count = (expected + rng.f64() * 2.0 - 1.0).round().max(0.0) as u32;
            for _ in 0..count {
                let at_millis = hour * HOUR + rng.i64(0..HOUR);
                // Log-uniform between 64 KiB and 16 MiB.
                let size = (64.0 * 1024.0 * (256.0f64).powf(rng.f64())) as u64;
                arrivals.push(Arrival {
                    at_millis,
                    table,
                    size,
                    partition: format!("dt={}", hour / 24),
                });
            }
        }
    }
    arrivals
}

/// Five tables of the writers a lakehouse has, over `days`:
/// - `streaming`: a streaming writer committing one 0.5–4 MiB file a minute into hourly partitions;
/// - `microbatch`: eight writers committing together every 5 minutes, 0.25–8 MiB each, daily
///   partitions;
/// - `etl`: an hourly job writing 40–120 files of 8–60 MiB within two minutes, daily partitions;
/// - `cdc`: a change stream, a 1–6 MiB file every 2 minutes, 10% of them late into one of the
///   last 7 days' partitions;
/// - `quiet`: a handful of small files a day.
pub fn generate_mixed_trace(seed: u64, days: u32) -> Trace {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut arrivals = Vec::new();
    let mut land = |at_millis: i64, table: usize, size: u64, partition: String| {
        arrivals.push(Arrival {
            at_millis,
            table,
            size,
            partition,
        })
    };
    let mib = |rng: &mut fastrand::Rng, low: f64, high: f64| -> u64 {
        (MIB as f64 * (low + (high - low) * rng.f64())) as u64
    };
    let minutes = days as i64 * 24 * 60;
    for minute in 0..minutes {
        let at = minute * MINUTE;
        let (hour, day) = (minute / 60, minute / (24 * 60));
        land(
            at + rng.i64(0..MINUTE),
            0,
            mib(&mut rng, 0.5, 4.0),
            format!("hour={hour}"),
        );
        if minute % 5 == 0 {
            for _ in 0..8 {
                let size = mib(&mut rng, 0.25, 8.0);
                land(at + rng.i64(0..20_000), 1, size, format!("dt={day}"));
            }
        }
        if minute % 60 == 7 {
            for _ in 0..rng.u32(40..=120) {
                let size = mib(&mut rng, 8.0, 60.0);
                land(at + rng.i64(0..2 * MINUTE), 2, size, format!("dt={day}"));
            }
        }
        if minute % 2 == 0 {
            let late = rng.f64() < 0.1;
            let partition_day = if late {
                (day - rng.i64(1..=7)).max(0)
            } else {
                day
            };
            let size = mib(&mut rng, 1.0, 6.0);
            land(
                at + rng.i64(0..MINUTE),
                3,
                size,
                format!("dt={partition_day}"),
            );
        }
        if rng.f64() < 4.0 / (24.0 * 60.0) {
            let size = mib(&mut rng, 0.1, 2.0);
            land(at, 4, size, format!("dt={day}"));
        }
    }
    Trace::new(
        arrivals,
        ["streaming", "microbatch", "etl", "cdc", "quiet"]
            .map(str::to_string)
            .to_vec(),
    )
}

/// Reads a trace: one `seconds,table,size_bytes[,partition]` line per file (`#` comments). The
/// table is a name (`orders`, letters, digits and `_`) or, when every line gives a number, an
/// index.
pub fn read_trace(text: &str) -> Result<Trace, String> {
    let mut arrivals = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let parse = |index: usize, what: &str| -> Result<f64, String> {
            fields
                .get(index)
                .and_then(|field| field.parse::<f64>().ok())
                .ok_or_else(|| format!("line {}: {what} is not a number", number + 1))
        };
        let label = fields.get(1).copied().unwrap_or_default();
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "line {}: table `{}` is not a name (letters, digits, `_`) or an index",
                number + 1,
                label.escape_debug()
            ));
        }
        let seconds = parse(0, "seconds")?;
        let size = parse(2, "size_bytes")?;
        if seconds < 0.0 || size < 0.0 {
            return Err(format!(
                "line {}: seconds and size_bytes must not be negative",
                number + 1
            ));
        }
        let index = match labels.iter().position(|known| known == label) {
            Some(index) => index,
            None => {
                labels.push(label.to_string());
                labels.len() - 1
            }
        };
        arrivals.push(Arrival {
            at_millis: (seconds * 1000.0) as i64,
            table: index,
            size: size as u64,
            partition: fields
                .get(3)
                .map(|partition| partition.to_string())
                .unwrap_or_default(),
        });
    }
    // Indices as given when every table is a number, else names in order of first appearance.
    let numbers: Option<Vec<usize>> = labels.iter().map(|label| label.parse().ok()).collect();
    let tables = match numbers {
        Some(numbers) => {
            for arrival in &mut arrivals {
                arrival.table = numbers[arrival.table];
            }
            let count = numbers.iter().max().map_or(0, |max| max + 1);
            (0..count).map(|table| format!("t{table}")).collect()
        }
        None => labels,
    };
    Ok(Trace::new(arrivals, tables))
}
