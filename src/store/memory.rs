//! An in-memory [`StateStore`] for fast unit tests, with injectable write failures.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::{ForgetSummary, Op, StateStore, StoreError};
use crate::clock::UnixMillis;
use crate::state::{FileEntry, PartitionCounts, SeenEntry, TableSnapshot, TableState};

#[derive(Debug, Default)]
struct Contents {
    tables: HashMap<String, TableState>,
    partitions: BTreeMap<(String, String), PartitionCounts>,
    seen: HashMap<(String, String), SeenEntry>,
    files: BTreeMap<(String, u64), FileEntry>,
}

#[derive(Debug, Default)]
pub struct MemoryStore {
    contents: Mutex<Contents>,
    fail_commits: AtomicBool,
    commits: AtomicU64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// While set, every commit (and every `forget_table`) fails and changes nothing.
    pub fn fail_commits(&self, fail: bool) {
        self.fail_commits.store(fail, Ordering::SeqCst);
    }

    /// Number of successful commits.
    pub fn num_commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
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
            }
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn purge_seen_before(&self, cutoff: UnixMillis) -> Result<u64, StoreError> {
        let mut contents = self.contents.lock().unwrap();
        let before = contents.seen.len();
        contents
            .seen
            .retain(|_, entry| entry.first_seen_millis >= cutoff);
        Ok((before - contents.seen.len()) as u64)
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

    fn forget_table(&self, table: &str) -> Result<ForgetSummary, StoreError> {
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StoreError::Write("injected failure".to_string()));
        }
        let mut contents = self.contents.lock().unwrap();
        let Contents {
            tables,
            partitions,
            seen,
            files,
        } = &mut *contents;
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
