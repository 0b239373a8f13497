//! Each table's small files over time: a sampled series of what waits to be compacted (pending
//! plus claimed by a run in flight), kept durably and cheaply.
//!
//! A point is written only when the level changes, at most one per minute (a later change in the
//! same minute overwrites that minute's point, which keeps the minute's peak), and only in commits
//! the table makes anyway: a quiet table writes nothing. Minute points are kept for [`MINUTES_KEPT`]; each hour also leaves
//! one point, its highest level, kept for [`HOURS_KEPT`]. The level between two points is the
//! earlier one (a step). The sampler itself holds a few numbers per table.

use serde::{Deserialize, Serialize};

use crate::base::clock::UnixMillis;
use crate::model::state::TableState;

/// Minute points are kept this long (24 h).
pub const MINUTES_KEPT: i64 = 24 * 60;
/// Hourly points (each hour's highest level) are kept this long (7 days).
pub const HOURS_KEPT: i64 = 7 * 24;

const MINUTE_MILLIS: i64 = 60_000;
const HOUR_MILLIS: i64 = 60 * MINUTE_MILLIS;

/// A series' resolution: its points' keys are minutes or hours since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resolution {
    Minute,
    Hour,
}

impl Resolution {
    /// The byte that tells the two series apart in the store's keys.
    pub fn tag(self) -> u8 {
        match self {
            Resolution::Minute => b'm',
            Resolution::Hour => b'h',
        }
    }

    pub fn from_tag(tag: u8) -> Option<Resolution> {
        match tag {
            b'm' => Some(Resolution::Minute),
            b'h' => Some(Resolution::Hour),
            _ => None,
        }
    }

    pub fn millis(self) -> i64 {
        match self {
            Resolution::Minute => MINUTE_MILLIS,
            Resolution::Hour => HOUR_MILLIS,
        }
    }
}

/// Small files waiting to be compacted, and their bytes (stored as a two-number array).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Level(pub u64, pub u64);

impl Level {
    pub fn of(state: &TableState) -> Level {
        let (files, bytes) = state
            .claim
            .as_ref()
            .map_or((0, 0), |claim| (claim.counts.files, claim.counts.bytes));
        Level(state.pending.files + files, state.pending.bytes + bytes)
    }

    pub fn files(self) -> u64 {
        self.0
    }

    pub fn bytes(self) -> u64 {
        self.1
    }

    fn max(self, other: Level) -> Level {
        Level(self.0.max(other.0), self.1.max(other.1))
    }
}

/// A stored point: the level at the end of its minute (of an hour point: the hour's highest),
/// and the most files waiting at any commit within it — a run that starts and ends within a
/// minute still shows the files it took. Stored as a three-number array.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample(pub u64, pub u64, pub u64);

impl Sample {
    pub fn new(level: Level, peak_files: u64) -> Sample {
        Sample(level.files(), level.bytes(), peak_files.max(level.files()))
    }

    pub fn level(self) -> Level {
        Level(self.0, self.1)
    }

    pub fn peak_files(self) -> u64 {
        self.2
    }
}

/// A table's two series as read back, oldest first: `(slot, sample)` with the slot in minutes
/// or hours since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    pub minutes: Vec<(i64, Sample)>,
    pub hours: Vec<(i64, Sample)>,
}

/// One point of a chart: its time, the level from then on, and the most files within its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Point {
    pub at_millis: UnixMillis,
    pub files: u64,
    pub bytes: u64,
    pub peak_files: u64,
}

impl Series {
    /// One line, oldest first: the hourly points before the first minute point, then the minute
    /// points.
    pub fn points(&self) -> Vec<Point> {
        let first_minute = self
            .minutes
            .first()
            .map(|(minute, _)| minute * MINUTE_MILLIS);
        let point = |resolution: Resolution| {
            move |&(slot, sample): &(i64, Sample)| Point {
                at_millis: slot * resolution.millis(),
                files: sample.0,
                bytes: sample.1,
                peak_files: sample.peak_files(),
            }
        };
        let hours = self
            .hours
            .iter()
            .map(point(Resolution::Hour))
            .filter(|hour| first_minute.is_none_or(|first| hour.at_millis < first));
        hours
            .chain(self.minutes.iter().map(point(Resolution::Minute)))
            .collect()
    }
}

/// A change to a table's series, which the store applies with the commit it joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesWrite {
    /// The point of `slot` (a later one of the same slot replaces it).
    Put {
        resolution: Resolution,
        slot: i64,
        sample: Sample,
    },
    /// Drops the points of one resolution before `slot` (the retention).
    DeleteBelow { resolution: Resolution, slot: i64 },
}

/// What a table's sampler remembers between commits: the current minute's sample, and the
/// current hour's highest level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sampler {
    minute: Option<(i64, Sample)>,
    hour: Option<(i64, Level)>,
}

impl Sampler {
    /// The writes that record `state` at `now` in the table's series, if its minute's sample
    /// changed: the minute's point and, once an hour is over, that hour's point and the
    /// retention's deletes. Assumes the commit they join lands (one that does not costs at most a
    /// point).
    pub fn observe(&mut self, state: &TableState, now: UnixMillis) -> Vec<SeriesWrite> {
        let level = Level::of(state);
        let minute = now.div_euclid(MINUTE_MILLIS);
        let hour = now.div_euclid(HOUR_MILLIS);
        let mut ops = Vec::new();
        match self.hour {
            Some((current, highest)) if current != hour => {
                ops.push(SeriesWrite::Put {
                    resolution: Resolution::Hour,
                    slot: current,
                    sample: Sample::new(highest, highest.files()),
                });
                ops.push(SeriesWrite::DeleteBelow {
                    resolution: Resolution::Minute,
                    slot: minute - MINUTES_KEPT,
                });
                ops.push(SeriesWrite::DeleteBelow {
                    resolution: Resolution::Hour,
                    slot: hour - HOURS_KEPT,
                });
                self.hour = Some((hour, level));
            }
            Some((current, highest)) => self.hour = Some((current, highest.max(level))),
            None => self.hour = Some((hour, level)),
        }
        let (sample, changed) = match self.minute {
            Some((current, written)) if current == minute => {
                let sample = Sample::new(level, written.peak_files());
                (sample, sample != written)
            }
            written => (
                Sample::new(level, level.files()),
                written.map(|(_, sample)| sample.level()) != Some(level) || !ops.is_empty(),
            ),
        };
        if changed {
            ops.push(SeriesWrite::Put {
                resolution: Resolution::Minute,
                slot: minute,
                sample,
            });
            self.minute = Some((minute, sample));
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::state::PendingCounts;

    fn state(files: u64, bytes: u64) -> TableState {
        TableState {
            pending: PendingCounts {
                files,
                bytes,
                ..PendingCounts::default()
            },
            ..TableState::default()
        }
    }

    fn samples(ops: &[SeriesWrite]) -> Vec<(Resolution, i64, Sample)> {
        ops.iter()
            .filter_map(|op| match op {
                SeriesWrite::Put {
                    resolution,
                    slot,
                    sample,
                } => Some((*resolution, *slot, *sample)),
                _ => None,
            })
            .collect()
    }

    const T0: i64 = 1_700_000_000_000 / HOUR_MILLIS * HOUR_MILLIS;

    #[test]
    fn a_change_writes_its_minute_and_an_unchanged_level_writes_nothing() {
        let mut sampler = Sampler::default();
        let ops = sampler.observe(&state(3, 30), T0 + 5_000);
        assert_eq!(
            samples(&ops),
            [(Resolution::Minute, T0 / MINUTE_MILLIS, Sample(3, 30, 3))]
        );
        assert!(sampler.observe(&state(3, 30), T0 + 70_000).is_empty());
        let ops = sampler.observe(&state(5, 50), T0 + 90_000);
        assert_eq!(
            samples(&ops),
            [(Resolution::Minute, T0 / MINUTE_MILLIS + 1, Sample(5, 50, 5))]
        );
    }

    /// A run that takes the files and settles within the minute: the minute's point ends at the
    /// level after it and keeps the most files it saw.
    #[test]
    fn a_minute_keeps_its_last_level_and_its_peak() {
        let mut sampler = Sampler::default();
        sampler.observe(&state(2, 20), T0);
        let ops = sampler.observe(&state(12, 120), T0 + 10_000);
        assert_eq!(
            samples(&ops),
            [(Resolution::Minute, T0 / MINUTE_MILLIS, Sample(12, 120, 12))]
        );
        let ops = sampler.observe(&state(1, 10), T0 + 50_000);
        assert_eq!(
            samples(&ops),
            [(Resolution::Minute, T0 / MINUTE_MILLIS, Sample(1, 10, 12))]
        );
        assert!(sampler.observe(&state(1, 10), T0 + 55_000).is_empty());
        let ops = sampler.observe(&state(3, 30), T0 + 61_000);
        assert_eq!(
            samples(&ops),
            [(Resolution::Minute, T0 / MINUTE_MILLIS + 1, Sample(3, 30, 3))]
        );
    }

    #[test]
    fn an_hour_over_leaves_its_highest_level_and_the_retention_deletes() {
        let mut sampler = Sampler::default();
        sampler.observe(&state(3, 30), T0);
        sampler.observe(&state(40, 400), T0 + 10 * MINUTE_MILLIS);
        sampler.observe(&state(0, 0), T0 + 20 * MINUTE_MILLIS);
        let ops = sampler.observe(&state(2, 20), T0 + HOUR_MILLIS + 1);
        let hour = T0 / HOUR_MILLIS;
        assert_eq!(
            samples(&ops),
            [
                (Resolution::Hour, hour, Sample(40, 400, 40)),
                (
                    Resolution::Minute,
                    (T0 + HOUR_MILLIS) / MINUTE_MILLIS,
                    Sample(2, 20, 2)
                ),
            ]
        );
        let deletes: Vec<(Resolution, i64)> = ops
            .iter()
            .filter_map(|op| match op {
                SeriesWrite::DeleteBelow { resolution, slot } => Some((*resolution, *slot)),
                _ => None,
            })
            .collect();
        assert_eq!(
            deletes,
            [
                (
                    Resolution::Minute,
                    (T0 + HOUR_MILLIS) / MINUTE_MILLIS - MINUTES_KEPT
                ),
                (Resolution::Hour, hour + 1 - HOURS_KEPT),
            ]
        );
    }

    #[test]
    fn files_claimed_by_a_run_still_wait() {
        let mut waiting = state(2, 20);
        waiting.claim = Some(crate::model::state::Claim {
            run_id: "r".to_string(),
            trigger: crate::model::task::Trigger::Files,
            started_millis: T0,
            upto_seq: 10,
            counts: PendingCounts {
                files: 10,
                bytes: 100,
                ..PendingCounts::default()
            },
            partitions: Default::default(),
            task: crate::model::task::Task::Rewrite(crate::model::task::Rewrite {
                min_input_files: 2,
                ..crate::model::task::Rewrite::whole_table()
            }),
            nonce: String::new(),
        });
        assert_eq!(Level::of(&waiting), Level(12, 120));
    }

    #[test]
    fn the_line_takes_hours_only_before_the_first_minute() {
        let hour = T0 / HOUR_MILLIS;
        let series = Series {
            hours: vec![(hour - 30, Sample(7, 70, 7)), (hour, Sample(9, 90, 9))],
            minutes: vec![(hour * 60 + 5, Sample(1, 10, 4))],
        };
        let points = series.points();
        assert_eq!(
            points.iter().map(|point| point.files).collect::<Vec<_>>(),
            [7, 9, 1]
        );
        let later = Series {
            hours: vec![(hour, Sample(9, 90, 9))],
            minutes: vec![(hour * 60 - 5, Sample(1, 10, 1))],
        };
        assert_eq!(later.points().len(), 1);
    }
}
