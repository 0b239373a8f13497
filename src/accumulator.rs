//! One table's pending small files: counting new files once, and deciding when the table is due.
//!
//! A plain component: the [`TableAccumulatorActor`](crate::actors::accumulator) wraps it and is the
//! only code that changes a table's state. A change is *staged* (returned as store ops), then
//! *settled* once the commit that carries it succeeded or failed; in between nothing else changes.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::clock::UnixMillis;
use crate::config::TableSpec;
use crate::policy::{due_reason, max_wait_deadline, DueReason};
use crate::state::{FileEntry, PartitionCounts, SeenEntry, TableSnapshot, TableState};
use crate::store::{Op, StateStore, StoreError};

/// A record that routed to this table as a small data file; not yet checked for duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    pub event_millis: UnixMillis,
    pub partition: String,
}

/// The result of staging candidates: ops to commit, and what happened to each candidate.
#[derive(Debug, Default)]
pub struct Staged {
    pub ops: Vec<Op>,
    pub num_counted: u64,
    pub num_duplicates: u64,
}

#[derive(Debug)]
struct StagedChange {
    state: TableState,
    partitions: Vec<(String, PartitionCounts)>,
}

#[derive(Debug)]
pub struct Accumulator {
    spec: Arc<TableSpec>,
    snapshot: TableSnapshot,
    staged: Option<StagedChange>,
}

impl Accumulator {
    pub fn load(spec: Arc<TableSpec>, store: &dyn StateStore) -> Result<Accumulator, StoreError> {
        let snapshot = store.load_table(&spec.table)?;
        Ok(Accumulator {
            spec,
            snapshot,
            staged: None,
        })
    }

    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    pub fn snapshot(&self) -> &TableSnapshot {
        &self.snapshot
    }

    /// Counts the candidates not seen before. The change is held until [`settle`](Self::settle).
    /// Event times later than `now` are taken as `now`: a skewed writer clock must not postpone
    /// the max-wait threshold.
    pub fn stage(
        &mut self,
        candidates: Vec<Candidate>,
        store: &dyn StateStore,
        now: UnixMillis,
    ) -> Result<Staged, StoreError> {
        assert!(
            self.staged.is_none(),
            "a table accumulator stages one change at a time"
        );
        let objects: Vec<(&str, &str)> = candidates
            .iter()
            .map(|candidate| (candidate.bucket.as_str(), candidate.key.as_str()))
            .collect();
        let already_seen = store.seen(&objects)?;

        let mut state = self.snapshot.state.clone();
        let mut partitions: BTreeMap<String, PartitionCounts> = BTreeMap::new();
        let mut in_this_batch = HashSet::new();
        let mut staged = Staged::default();
        for (candidate, seen) in candidates.iter().zip(already_seen) {
            if seen || !in_this_batch.insert((candidate.bucket.as_str(), candidate.key.as_str())) {
                staged.num_duplicates += 1;
                continue;
            }
            let event_millis = candidate.event_millis.min(now);
            state.pending.add_file(candidate.size, event_millis);
            let counts = partitions
                .entry(candidate.partition.clone())
                .or_insert_with(|| {
                    self.snapshot
                        .partitions
                        .get(&candidate.partition)
                        .copied()
                        .unwrap_or_default()
                });
            counts.files += 1;
            counts.bytes += candidate.size;
            staged.ops.push(Op::PutSeen {
                bucket: candidate.bucket.clone(),
                key: candidate.key.clone(),
                entry: SeenEntry {
                    table: self.spec.table.clone(),
                    first_seen_millis: now,
                },
            });
            staged.ops.push(Op::PutFile {
                table: self.spec.table.clone(),
                seq: state.next_file_seq,
                entry: FileEntry {
                    bucket: candidate.bucket.clone(),
                    key: candidate.key.clone(),
                    size: candidate.size,
                    event_millis,
                    partition: candidate.partition.clone(),
                },
            });
            state.next_file_seq += 1;
            staged.num_counted += 1;
        }
        if staged.num_counted > 0 {
            staged.ops.push(Op::PutTable {
                table: self.spec.table.clone(),
                state: state.clone(),
            });
            for (partition, counts) in &partitions {
                staged.ops.push(Op::PutPartition {
                    table: self.spec.table.clone(),
                    partition: partition.clone(),
                    counts: *counts,
                });
            }
        }
        self.staged = Some(StagedChange {
            state,
            partitions: partitions.into_iter().collect(),
        });
        Ok(staged)
    }

    /// Adopts the staged change when its commit succeeded, drops it otherwise.
    pub fn settle(&mut self, committed: bool) {
        if let Some(change) = self.staged.take() {
            if committed {
                self.snapshot.state = change.state;
                self.snapshot.partitions.extend(change.partitions);
            }
        }
    }

    pub fn has_staged_change(&self) -> bool {
        self.staged.is_some()
    }

    /// Whether the committed state makes the table due now, and why.
    pub fn due(&self, now: UnixMillis) -> Option<DueReason> {
        due_reason(&self.snapshot.state.pending, &self.spec.thresholds, now)
    }

    /// When the max-wait threshold fires for what is pending, if it can.
    pub fn next_deadline(&self) -> Option<UnixMillis> {
        max_wait_deadline(&self.snapshot.state.pending, &self.spec.thresholds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Thresholds;
    use crate::store::MemoryStore;

    fn spec() -> Arc<TableSpec> {
        Arc::new(TableSpec {
            table: "n.t".to_string(),
            bucket: "b".to_string(),
            prefix: "t/".to_string(),
            thresholds: Thresholds {
                small_file_bytes: 100,
                min_files: 3,
                min_total_bytes: 1_000,
                max_wait_millis: Some(60_000),
            },
            target_file_bytes: 1_000,
            file_suffixes: vec![".parquet".to_string()],
        })
    }

    fn candidate(key: &str, size: u64, event_millis: i64, partition: &str) -> Candidate {
        Candidate {
            bucket: "b".to_string(),
            key: key.to_string(),
            size,
            event_millis,
            partition: partition.to_string(),
        }
    }

    fn stage_and_commit(
        accumulator: &mut Accumulator,
        store: &MemoryStore,
        candidates: Vec<Candidate>,
        now: i64,
    ) -> Staged {
        let mut staged = accumulator.stage(candidates, store, now).unwrap();
        let committed = store.commit(std::mem::take(&mut staged.ops)).is_ok();
        accumulator.settle(committed);
        staged
    }

    #[test]
    fn counts_files_bytes_times_and_partitions() {
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(spec(), &store).unwrap();
        let staged = stage_and_commit(
            &mut accumulator,
            &store,
            vec![
                candidate("t/data/d=1/a.parquet", 10, 500, "d=1"),
                candidate("t/data/d=2/b.parquet", 20, 300, "d=2"),
                candidate("t/data/d=1/c.parquet", 30, 900, "d=1"),
            ],
            1_000,
        );
        assert_eq!(staged.num_counted, 3);
        let pending = &accumulator.snapshot().state.pending;
        assert_eq!((pending.files, pending.bytes), (3, 60));
        assert_eq!(pending.oldest_event_millis, Some(300));
        assert_eq!(pending.newest_event_millis, Some(900));
        assert_eq!(
            accumulator.snapshot().partitions["d=1"],
            PartitionCounts {
                files: 2,
                bytes: 40
            }
        );
        assert_eq!(
            accumulator.snapshot().partitions["d=2"],
            PartitionCounts {
                files: 1,
                bytes: 20
            }
        );
        assert_eq!(accumulator.due(1_000), Some(DueReason::Files));

        let reloaded = Accumulator::load(spec(), &store).unwrap();
        assert_eq!(reloaded.snapshot(), accumulator.snapshot());
        assert_eq!(store.files("n.t").unwrap().len(), 3);
    }

    #[test]
    fn duplicates_in_a_batch_and_across_batches_count_once() {
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(spec(), &store).unwrap();
        let staged = stage_and_commit(
            &mut accumulator,
            &store,
            vec![
                candidate("t/a.parquet", 10, 1, ""),
                candidate("t/a.parquet", 10, 2, ""),
            ],
            10,
        );
        assert_eq!((staged.num_counted, staged.num_duplicates), (1, 1));
        let staged = stage_and_commit(
            &mut accumulator,
            &store,
            vec![candidate("t/a.parquet", 10, 3, "")],
            10,
        );
        assert_eq!((staged.num_counted, staged.num_duplicates), (0, 1));
        assert!(staged.ops.is_empty());
        assert_eq!(accumulator.snapshot().state.pending.files, 1);
    }

    #[test]
    fn a_failed_commit_changes_nothing_and_a_retry_counts_once() {
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(spec(), &store).unwrap();
        store.fail_commits(true);
        stage_and_commit(
            &mut accumulator,
            &store,
            vec![candidate("t/a.parquet", 10, 1, "")],
            10,
        );
        assert_eq!(accumulator.snapshot().state.pending.files, 0);
        assert!(!accumulator.has_staged_change());
        store.fail_commits(false);
        let staged = stage_and_commit(
            &mut accumulator,
            &store,
            vec![candidate("t/a.parquet", 10, 1, "")],
            10,
        );
        assert_eq!(staged.num_counted, 1);
        assert_eq!(accumulator.snapshot().state.pending.files, 1);
        assert_eq!(
            store.files("n.t").unwrap()[0].0,
            0,
            "sequence numbers are not burnt by failures"
        );
    }

    #[test]
    fn future_event_times_are_clamped_so_max_wait_still_fires() {
        let store = MemoryStore::new();
        let mut accumulator = Accumulator::load(spec(), &store).unwrap();
        stage_and_commit(
            &mut accumulator,
            &store,
            vec![candidate("t/a.parquet", 10, 99_999_999, "")],
            1_000,
        );
        assert_eq!(accumulator.next_deadline(), Some(61_000));
        assert_eq!(accumulator.due(60_999), None);
        assert_eq!(accumulator.due(61_000), Some(DueReason::MaxWait));
    }
}
