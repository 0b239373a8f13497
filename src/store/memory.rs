//! An in-memory [`StateStore`] for fast unit tests, with injectable write failures.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use super::{ForgetSummary, Op, PurgeSummary, StateStore, StoreError};
use crate::base::clock::UnixMillis;
use crate::model::series::{Resolution, Sample, Series};
use crate::model::state::{FileEntry, PartitionCounts, SeenEntry, TableSnapshot, TableState};

#[derive(Debug, Default)]
struct Contents {
    tables: HashMap<String, TableState>,
    partitions: BTreeMap<(String, String), PartitionCounts>,
    seen: HashMap<(String, String), SeenEntry>,
    /// (first seen, bucket, key) → table: the RocksDB store's `seen_by_time` family, stale
    /// entries included (a key remembered again under another time keeps its old entry).
    seen_by_time: BTreeMap<(UnixMillis, String, String), String>,
    files: BTreeMap<(String, u64), FileEntry>,
    runs: BTreeMap<(String, u64), crate::model::state::RunRecord>,
    samples: BTreeMap<(String, Resolution, i64), Sample>,
}

#[derive(Debug, Default)]
pub struct MemoryStore {
    contents: Mutex<Contents>,
    fail_commits: AtomicBool,
    commits: AtomicU64,
    /// While true, commits wait (on their blocking thread) until it is cleared.
    held: Mutex<bool>,
    released: Condvar,
    /// Commits waiting for the hold to be released.
    waiting: AtomicU64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// While set, every commit (and every `forget_table` and purge) fails and changes nothing.
    pub fn fail_commits(&self, fail: bool) {
        self.fail_commits.store(fail, Ordering::SeqCst);
    }

    /// Number of successful commits.
    pub fn num_commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    /// While held, every commit waits until the hold is released: a commit that takes as long
    /// as a test needs.
    pub fn hold_commits(&self, hold: bool) {
        *self.held.lock().unwrap() = hold;
        if !hold {
            self.released.notify_all();
        }
    }

    /// Number of commits waiting for the hold to be released.
    pub fn num_held_commits(&self) -> u64 {
        self.waiting.load(Ordering::SeqCst)
    }
}

impl StateStore for MemoryStore {
    fn recover(&self) -> Result<(), StoreError> {
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StoreError::Write("injected failure".to_string()));
        }
        Ok(())
    }

    fn load_table(&self, table: &str) -> Result<TableSnapshot, StoreError> {
        let contents = self.contents.lock().unwrap();
        let state = contents.tables.get(table).cloned().unwrap_or_default();
        let partitions = contents
            .partitions
            .iter()
            .filter(|((owner, _), _)| owner == table)
            .map(|((_, partition), counts)| (partition.clone(), *counts))
            .collect();
        Ok(TableSnapshot { state, partitions })
    }

    fn seen(&self, objects: &[(&str, &str)]) -> Result<Vec<bool>, StoreError> {
        let contents = self.contents.lock().unwrap();
        Ok(objects
            .iter()
            .map(|(bucket, key)| {
                contents
                    .seen
                    .contains_key(&(bucket.to_string(), key.to_string()))
            })
            .collect())
    }

    fn seen_entries(&self, objects: &[(&str, &str)]) -> Result<Vec<Option<SeenEntry>>, StoreError> {
        let contents = self.contents.lock().unwrap();
        Ok(objects
            .iter()
            .map(|(bucket, key)| {
                contents
                    .seen
                    .get(&(bucket.to_string(), key.to_string()))
                    .cloned()
            })
            .collect())
    }

    fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        {
            let mut held = self.held.lock().unwrap();
            if *held {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                while *held {
                    held = self.released.wait(held).unwrap();
                }
                self.waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StoreError::Write("injected failure".to_string()));
        }
        let mut contents = self.contents.lock().unwrap();
        for op in ops {
            match op {
                Op::PutTable { table, state } => {
                    contents.tables.insert(table, state);
                }
                Op::PutPartition {
                    table,
                    partition,
                    counts,
                } => {
                    contents.partitions.insert((table, partition), counts);
                }
                Op::DeletePartition { table, partition } => {
                    contents.partitions.remove(&(table, partition));
                }
                Op::PutSeen { bucket, key, entry } => {
                    contents.seen_by_time.insert(
                        (entry.first_seen_millis, bucket.clone(), key.clone()),
                        entry.table.clone(),
                    );
                    contents.seen.insert((bucket, key), entry);
                }
                Op::PutFile { table, seq, entry } => {
                    contents.files.insert((table, seq), entry);
                }
                Op::DeleteFile { table, seq } => {
                    contents.files.remove(&(table, seq));
                }
                Op::DeleteFilesBelow { table, seq } => {
                    contents
                        .files
                        .retain(|(owner, file_seq), _| *owner != table || *file_seq >= seq);
                }
                Op::PutRun { table, seq, record } => {
                    contents.runs.insert((table, seq), record);
                }
                Op::DeleteRunsBelow { table, seq } => {
                    contents
                        .runs
                        .retain(|(owner, run_seq), _| *owner != table || *run_seq >= seq);
                }
                Op::PutSample {
                    table,
                    resolution,
                    slot,
                    sample,
                } => {
                    contents.samples.insert((table, resolution, slot), sample);
                }
                Op::DeleteSamplesBelow {
                    table,
                    resolution,
                    slot,
                } => contents.samples.retain(|(owner, kept, at), _| {
                    *owner != table || *kept != resolution || *at >= slot
                }),
            }
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn purge_seen_before(&self, cutoff: UnixMillis) -> Result<PurgeSummary, StoreError> {
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StoreError::Write("injected failure".to_string()));
        }
        let mut contents = self.contents.lock().unwrap();
        let Contents {
            seen,
            seen_by_time,
            files,
            ..
        } = &mut *contents;
        let expired: Vec<(UnixMillis, String, String)> = seen_by_time
            .range(..(cutoff, String::new(), String::new()))
            .map(|(indexed, _)| indexed.clone())
            .collect();
        let mut summary = PurgeSummary::default();
        for indexed in expired {
            summary.examined += 1;
            let (first_seen_millis, bucket, key) = &indexed;
            let object = (bucket.clone(), key.clone());
            let Some(entry) = seen
                .get(&object)
                .filter(|entry| entry.first_seen_millis == *first_seen_millis)
            else {
                seen_by_time.remove(&indexed);
                summary.stale += 1;
                continue;
            };
            let in_log = entry.seq.is_some_and(|seq| {
                files
                    .get(&(entry.table.clone(), seq))
                    .is_some_and(|file| file.bucket == *bucket && file.key == *key)
            });
            if in_log {
                summary.kept_in_log += 1;
            } else {
                seen.remove(&object);
                seen_by_time.remove(&indexed);
                summary.purged += 1;
            }
        }
        Ok(summary)
    }

    fn files(&self, table: &str) -> Result<Vec<(u64, FileEntry)>, StoreError> {
        let contents = self.contents.lock().unwrap();
        Ok(contents
            .files
            .iter()
            .filter(|((owner, _), _)| owner == table)
            .map(|((_, seq), entry)| (*seq, entry.clone()))
            .collect())
    }

    fn runs(&self, table: &str) -> Result<Vec<(u64, crate::model::state::RunRecord)>, StoreError> {
        let contents = self.contents.lock().unwrap();
        Ok(contents
            .runs
            .iter()
            .filter(|((owner, _), _)| owner == table)
            .map(|((_, seq), record)| (*seq, record.clone()))
            .collect())
    }

    fn series(&self, table: &str) -> Result<Series, StoreError> {
        let contents = self.contents.lock().unwrap();
        let mut series = Series::default();
        for ((_, resolution, slot), sample) in contents
            .samples
            .iter()
            .filter(|((owner, _, _), _)| owner == table)
        {
            match resolution {
                Resolution::Minute => series.minutes.push((*slot, *sample)),
                Resolution::Hour => series.hours.push((*slot, *sample)),
            }
        }
        Ok(series)
    }

    fn forget_table(&self, table: &str) -> Result<ForgetSummary, StoreError> {
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StoreError::Write("injected failure".to_string()));
        }
        let mut contents = self.contents.lock().unwrap();
        let Contents {
            tables,
            partitions,
            seen,
            seen_by_time,
            files,
            runs,
            samples,
        } = &mut *contents;
        seen_by_time.retain(|_, owner| owner != table);
        runs.retain(|(owner, _), _| owner != table);
        samples.retain(|(owner, _, _), _| owner != table);
        Ok(ForgetSummary {
            table_state: tables.remove(table).is_some(),
            partitions: removed(partitions.len(), || {
                partitions.retain(|(owner, _), _| owner != table);
                partitions.len()
            }),
            files: removed(files.len(), || {
                files.retain(|(owner, _), _| owner != table);
                files.len()
            }),
            seen_keys: removed(seen.len(), || {
                seen.retain(|_, entry| entry.table != table);
                seen.len()
            }),
        })
    }
}

/// How many entries `retain` (which returns the length after) removed.
fn removed(before: usize, retain: impl FnOnce() -> usize) -> u64 {
    (before - retain()) as u64
}
