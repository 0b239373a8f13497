//! One table's pending small files: counting new files once, and deciding when the table is due.
//!
//! A plain component: the [`TableAccumulatorActor`](crate::table::actor) wraps it and is the
//! only code that changes a table's state. A change is *staged* (returned as store ops), then
//! *settled* once the commit that carries it succeeded or failed; in between nothing else changes.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::base::clock::UnixMillis;
use crate::config::TableSpec;
use crate::model::report::split_object_path;
use crate::model::report::{FailureClass, RunOutcome};
use crate::model::series::Sampler;
use crate::model::state::{
    Claim, FileEntry, FileSource, Maintenance, PartitionCounts, PendingCounts, RunRecord,
    SeenEntry, TableSnapshot, TableState,
};
use crate::model::strategy::RunStrategy;
pub use crate::model::task::Trigger;
use crate::model::task::{MidSizedFiles, Rewrite, Task};
use crate::store::{Op, StateStore, StoreError};
use crate::table::policy::{next_wake, table_decision, Decision, DueReason};

pub use crate::intake::batch::{object_keys, Candidate, FileKind};

/// Adds to a commit's `ops` the series writes of the table's new state, if they carry one.
pub fn sample_commit(sampler: &mut Sampler, table: &str, ops: &mut Vec<Op>, now: UnixMillis) {
    let writes = ops
        .iter()
        .rev()
        .find_map(|op| match op {
            Op::PutTable {
                table: owner,
                state,
            } if owner == table => Some(state),
            _ => None,
        })
        .map(|state| sampler.observe(state, now));
    ops.extend(
        writes
            .into_iter()
            .flatten()
            .map(|write| Op::series(table, write)),
    );
}

/// The result of staging candidates: ops to commit, and what happened to each candidate.
#[derive(Debug, Default)]
pub struct Staged {
    pub ops: Vec<Op>,
    pub num_counted: u64,
    pub num_duplicates: u64,
    /// Positions (in the staged candidates) of the duplicates, so a caller that staged several
    /// batches together can attribute them.
    pub duplicate_positions: Vec<usize>,
}

/// A change to a table's state, computed before its commit and adopted once the commit succeeded.
#[derive(Debug, Clone)]
pub struct StagedChange {
    state: TableState,
    partitions: PartitionUpdate,
    /// What it counted (staged records only): added to a run's settlement prepared meanwhile.
    counted: Vec<Counted>,
}

/// Something a staged change counted, as a settlement prepared meanwhile needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counted {
    /// A small data file, logged under `seq`.
    File { seq: u64, entry: FileEntry },
    /// A new manifest, announced at `event_millis`.
    Manifest { event_millis: UnixMillis },
    /// A new delete file, announced at `event_millis`.
    Delete { event_millis: UnixMillis },
}

/// A run's settlement being prepared off the actor ([`Accumulator::begin_settlement`]): what the
/// table counted meanwhile (numbered past the numbers reserved for the rebuilt log).
#[derive(Debug)]
struct SettlementWindow {
    counted: Vec<Counted>,
}

/// Why a prepared settlement cannot be applied: it must be prepared again from the table as it
/// is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettlementStale {
    /// The state was replaced meanwhile (a reload adopted the stored one).
    Replaced,
    /// The rebuilt log needs more sequence numbers than were reserved: at least this many.
    Reserve(u64),
}

#[derive(Debug, Clone)]
enum PartitionUpdate {
    /// These partitions have new counts; the others are unchanged.
    Merge(Vec<(String, PartitionCounts)>),
    /// The pending partitions are exactly these.
    Replace(BTreeMap<String, PartitionCounts>),
}

/// What the executor pool needs to know of a claim to start the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimTicket {
    pub run_id: String,
    pub trigger: Trigger,
    pub started_millis: UnixMillis,
    pub files: u64,
    pub bytes: u64,
    /// The partition spec known when the run started (to build the `where` filter).
    pub spec: Option<Vec<crate::table::partitions::PartitionField>>,
    /// What the run does.
    pub task: Task,
    /// The claim's nonce ([`Claim::nonce`]).
    pub nonce: String,
    /// The claimed files are the table's logged files below this sequence number.
    pub upto_seq: u64,
    /// How the table's last run failed, when it did (the run before this one): a run after a
    /// lost race commits per group ([`crate::table::policy::commits_per_group`]).
    pub last_failure: Option<FailureClass>,
}

impl ClaimTicket {
    fn from_claim(claim: &Claim, state: &TableState) -> Self {
        let spec = state.partition_spec.clone();
        let last_failure = state
            .last_run
            .as_ref()
            .filter(|_| state.consecutive_failures > 0)
            .and_then(|run| run.failure_class);
        ClaimTicket {
            run_id: claim.run_id.clone(),
            trigger: claim.trigger,
            started_millis: claim.started_millis,
            files: claim.counts.files,
            bytes: claim.counts.bytes,
            spec,
            task: claim.task.clone(),
            nonce: claim.nonce.clone(),
            upto_seq: claim.upto_seq,
            last_failure,
        }
    }

    /// The partitions the run rewrites (empty: the whole table, or not a rewrite).
    pub fn partitions(&self) -> &[String] {
        self.task
            .rewrite()
            .map_or(&[], |rewrite| rewrite.partitions.as_slice())
    }
}

/// What a run is to do, decided when it gets its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    pub trigger: Trigger,
    pub task: Task,
}

impl RunPlan {
    fn order_read() -> RunPlan {
        RunPlan {
            trigger: Trigger::ReadOrder,
            task: Task::ReadOrder,
        }
    }

    fn maintenance(trigger: Trigger, maintenance: Maintenance) -> RunPlan {
        RunPlan {
            trigger,
            task: Task::Maintenance(maintenance),
        }
    }

    /// The same run over the whole table, naming no partition: mid-sized files join only when
    /// they joined in every partition of the run.
    fn over_the_whole_table(self) -> RunPlan {
        let Task::Rewrite(rewrite) = self.task else {
            return self;
        };
        let every_partition_joins = match &rewrite.mid_sized {
            MidSizedFiles::Nowhere => false,
            MidSizedFiles::Everywhere => true,
            MidSizedFiles::In(joining) => {
                let joining: HashSet<&String> = joining.iter().collect();
                rewrite
                    .partitions
                    .iter()
                    .all(|partition| joining.contains(partition))
            }
        };
        RunPlan {
            trigger: self.trigger,
            task: Task::Rewrite(Rewrite {
                partitions: Vec::new(),
                mid_sized: if every_partition_joins {
                    MidSizedFiles::Everywhere
                } else {
                    MidSizedFiles::Nowhere
                },
                ..rewrite
            }),
        }
    }
}

/// How long every truth read — a run's and a reconcile's alike — keeps a file announced by an event
/// although the metadata does not have it yet: its writer uploads the object first and commits the
/// snapshot later, so it may still be committing. Older such files are orphans and are dropped.
pub const RECONCILE_GRACE_MILLIS: i64 = 15 * 60 * 1000;

/// Where a run's report of committed files begins (`icepack_committed_file`): a grace window before
/// the claim, so that a file the grace keeps and that was committed and then removed (rewritten by
/// the run, deleted) shows up in it and is not kept.
pub fn committed_since_millis(started_millis: UnixMillis) -> UnixMillis {
    started_millis - RECONCILE_GRACE_MILLIS
}

/// How a failed table waits before its next run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureBackoff {
    pub initial_millis: i64,
    pub max_millis: i64,
}

impl FailureBackoff {
    /// The wait after the `failures`-th consecutive failure: initial, doubling, capped.
    pub fn delay_millis(&self, failures: u32) -> i64 {
        let doublings = failures.saturating_sub(1).min(30);
        self.initial_millis
            .saturating_mul(1i64 << doublings)
            .min(self.max_millis)
    }
}

#[derive(Debug)]
pub struct Accumulator {
    spec: Arc<TableSpec>,
    snapshot: TableSnapshot,
    /// Boxed: a table is idle almost always, and this is half of an idle table's size.
    staged: Option<Box<StagedChange>>,
    /// A run's settlement being prepared off the actor, and what was counted meanwhile.
    settling: Option<Box<SettlementWindow>>,
    /// What the table's small-files series last recorded.
    sampler: Sampler,
}

impl Accumulator {
    pub fn load(spec: Arc<TableSpec>, store: &dyn StateStore) -> Result<Accumulator, StoreError> {
        let snapshot = store.load_table(&spec.table)?;
        Ok(Accumulator {
            spec,
            snapshot,
            staged: None,
            settling: None,
            sampler: Sampler::default(),
        })
    }

    /// A table's accumulator before its state is read: what an accumulator started lazily holds
    /// until it loads the table on its own thread.
    pub fn unloaded(spec: Arc<TableSpec>) -> Accumulator {
        Accumulator {
            spec,
            snapshot: TableSnapshot::default(),
            staged: None,
            settling: None,
            sampler: Sampler::default(),
        }
    }

    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// A reload changed the table's settings: the next evaluation uses them.
    pub fn set_spec(&mut self, spec: Arc<TableSpec>) {
        debug_assert_eq!(spec.table, self.spec.table);
        self.spec = spec;
    }

    pub fn snapshot(&self) -> &TableSnapshot {
        &self.snapshot
    }

    /// The series' sampler, to sample a commit made off the actor (a run's settlement).
    pub fn sampler(&self) -> Sampler {
        self.sampler
    }

    /// The sampler after such a commit landed.
    pub fn set_sampler(&mut self, sampler: Sampler) {
        self.sampler = sampler;
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
        let already_seen = store.seen(&object_keys(&candidates))?;
        Ok(self.stage_looked_up(candidates, already_seen, now))
    }

    /// [`stage`](Self::stage) with the candidates' object keys already looked up in the store
    /// (`already_seen[i]`: candidate `i`'s key has a `seen` entry), so staging reads nothing. The
    /// caller must have looked them up after every commit that could change those entries.
    pub fn stage_looked_up(
        &mut self,
        candidates: Vec<Candidate>,
        already_seen: Vec<bool>,
        now: UnixMillis,
    ) -> Staged {
        assert!(
            self.staged.is_none(),
            "a table accumulator stages one change at a time"
        );
        assert_eq!(
            candidates.len(),
            already_seen.len(),
            "one lookup per candidate"
        );
        let mut state = self.snapshot.state.clone();
        let mut partitions: BTreeMap<String, PartitionCounts> = BTreeMap::new();
        let mut in_this_batch = HashSet::new();
        let mut staged = Staged::default();
        let mut counted = Vec::new();
        for (position, (candidate, seen)) in candidates.iter().zip(already_seen).enumerate() {
            if seen || !in_this_batch.insert((candidate.bucket.as_str(), candidate.key.as_str())) {
                staged.num_duplicates += 1;
                staged.duplicate_positions.push(position);
                continue;
            }
            let event_millis = candidate.event_millis.min(now);
            if candidate.kind != FileKind::Data {
                // Written before the last read of the metadata: that read counted it already.
                let (read, since_read) = match candidate.kind {
                    FileKind::Manifest => {
                        (state.manifests.read_millis, &mut state.manifests.since_read)
                    }
                    _ => (state.deletes.read_millis, &mut state.deletes.since_read),
                };
                if read.is_some_and(|read| candidate.event_millis < read) {
                    staged.num_duplicates += 1;
                    staged.duplicate_positions.push(position);
                    continue;
                }
                *since_read += 1;
                counted.push(match candidate.kind {
                    FileKind::Manifest => Counted::Manifest {
                        event_millis: candidate.event_millis,
                    },
                    _ => Counted::Delete {
                        event_millis: candidate.event_millis,
                    },
                });
                staged.ops.push(Op::PutSeen {
                    bucket: candidate.bucket.clone(),
                    key: candidate.key.clone(),
                    entry: SeenEntry {
                        table: self.spec.table.clone(),
                        first_seen_millis: now,
                        seq: None,
                    },
                });
                staged.num_counted += 1;
                continue;
            }
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
            counts.add_file(candidate.size, event_millis);
            staged.ops.push(Op::PutSeen {
                bucket: candidate.bucket.clone(),
                key: candidate.key.clone(),
                entry: SeenEntry {
                    table: self.spec.table.clone(),
                    first_seen_millis: now,
                    seq: Some(state.next_file_seq),
                },
            });
            let entry = FileEntry {
                bucket: candidate.bucket.clone(),
                key: candidate.key.clone(),
                size: candidate.size,
                event_millis,
                partition: candidate.partition.clone(),
                source: FileSource::Events,
            };
            if self.settling.is_some() {
                counted.push(Counted::File {
                    seq: state.next_file_seq,
                    entry: entry.clone(),
                });
            }
            staged.ops.push(Op::PutFile {
                table: self.spec.table.clone(),
                seq: state.next_file_seq,
                entry,
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
        if self.settling.is_none() {
            counted.clear();
        }
        self.staged = Some(Box::new(StagedChange {
            state,
            partitions: PartitionUpdate::Merge(partitions.into_iter().collect()),
            counted,
        }));
        sample_commit(&mut self.sampler, &self.spec.table, &mut staged.ops, now);
        staged
    }

    /// Adopts the staged change when its commit succeeded, drops it otherwise.
    pub fn settle(&mut self, committed: bool) {
        if let Some(change) = self.staged.take() {
            if committed {
                self.adopt(*change);
            }
        }
    }

    /// Makes a committed change the table's state.
    pub fn adopt(&mut self, change: StagedChange) {
        if let Some(window) = &mut self.settling {
            window.counted.extend(change.counted);
        }
        self.snapshot.state = change.state;
        match change.partitions {
            PartitionUpdate::Merge(partitions) => self.snapshot.partitions.extend(partitions),
            PartitionUpdate::Replace(partitions) => self.snapshot.partitions = partitions,
        }
    }

    pub fn spec_arc(&self) -> Arc<TableSpec> {
        self.spec.clone()
    }

    pub fn claim(&self) -> Option<&Claim> {
        self.snapshot.state.claim.as_ref()
    }

    /// Whether the table may start a run now: no run in flight and no failure back-off pending.
    pub fn may_start_run(&self, now: UnixMillis) -> bool {
        let state = &self.snapshot.state;
        state.claim.is_none() && state.next_attempt_millis.is_none_or(|next| now >= next)
    }

    /// When the table's unconfirmed files (announced, absent from the last metadata read) are
    /// read again, confirming them or dropping them: once the oldest has had the writers' grace
    /// ([`RECONCILE_GRACE_MILLIS`]), and at most once a grace after the last read.
    pub fn unconfirmed_read_at(&self) -> Option<UnixMillis> {
        let state = &self.snapshot.state;
        let oldest = state.unconfirmed.oldest_event_millis?;
        let after_last_read = state.last_truth_millis.map_or(UnixMillis::MIN, |read| {
            read.saturating_add(RECONCILE_GRACE_MILLIS)
        });
        Some(
            oldest
                .saturating_add(RECONCILE_GRACE_MILLIS)
                .max(after_last_read),
        )
    }

    /// When the failure back-off ends, if one is pending.
    pub fn next_attempt(&self) -> Option<UnixMillis> {
        self.snapshot.state.next_attempt_millis
    }

    pub fn has_staged_change(&self) -> bool {
        self.staged.is_some()
    }

    /// How many sequence numbers a settlement of `outcome` may need past the table's next one
    /// (its rebuilt log: the logged files kept and the truth's new ones), so that files counted
    /// while it is prepared are numbered past them.
    pub fn settlement_reserve(&self, outcome: &RunOutcome) -> u64 {
        let state = &self.snapshot.state;
        let logged =
            state.pending.files + state.claim.as_ref().map_or(0, |claim| claim.counts.files);
        let truth = match outcome {
            RunOutcome::Success { report, .. } => report.truth.as_ref().map_or(0, Vec::len),
            RunOutcome::Failure { .. } => 0,
        };
        logged + truth as u64 + 1
    }

    /// Starts a run's settlement off the actor: returns the table as it is (the base to
    /// [`prepare_settlement`] from) and numbers the files counted from now on `reserve` past the
    /// base's next sequence number, so the rebuilt log and they never share a number. Until
    /// [`finish_settlement`](Self::finish_settlement) (or [`abort_settlement`](Self::abort_settlement))
    /// what is counted is kept to be added to the settlement.
    pub fn begin_settlement(&mut self, reserve: u64) -> TableSnapshot {
        assert!(
            self.staged.is_none(),
            "a settlement starts with no change being committed"
        );
        let base = self.snapshot.clone();
        self.snapshot.state.next_file_seq += reserve;
        self.settling = Some(Box::new(SettlementWindow {
            counted: Vec::new(),
        }));
        base
    }

    /// Whether a settlement is being prepared.
    pub fn is_settling(&self) -> bool {
        self.settling.is_some()
    }

    /// Ends the settlement being prepared: the ops and change that settle the run on the table
    /// as it is now, with what was counted meanwhile ([`Settlement::apply`]).
    pub fn finish_settlement(
        &mut self,
        settlement: Settlement,
        now: UnixMillis,
    ) -> Result<(Vec<Op>, StagedChange), SettlementStale> {
        let window = self.settling.take().ok_or(SettlementStale::Replaced)?;
        if settlement.overlaps(&window.counted) {
            return Err(SettlementStale::Reserve(settlement.reserve_needed()));
        }
        Ok(settlement.apply(&self.spec, &self.snapshot, &window.counted, now))
    }

    /// The settlement being prepared was not applied (it failed, or found no claim).
    pub fn abort_settlement(&mut self) {
        self.settling = None;
    }

    /// Whether the committed state makes the table due now, and why (a table whose thresholds
    /// are crossed but that has nothing worth rewriting is not due).
    /// Whether the table has more manifests than its `max_manifests` (and has gained half of
    /// them since its last `rewrite_manifests`).
    pub fn manifests_due(&self) -> bool {
        self.spec
            .max_manifests
            .is_some_and(|max| self.snapshot.state.manifests.due(max))
    }

    /// Whether a run changed the table's files since its statistics were last computed, and the
    /// table computes them (`compute_statistics`).
    pub fn statistics_due(&self) -> bool {
        self.spec.compute_statistics && self.snapshot.state.statistics_due
    }

    /// Whether the table is due by its delete files (`delete_file_threshold`,
    /// `delete_ratio_threshold`).
    pub fn deletes_due(&self) -> bool {
        self.spec.deletes.is_on() && self.snapshot.state.deletes.due(&self.spec.deletes)
    }

    /// The run a table due by its deletes alone gets, whichever fixes it with less work: only
    /// position deletes, few rows against the data (below the ratio threshold, Iceberg's 0.3 if
    /// none is set) — merge the delete files; equality deletes, many deleted rows, or counts not
    /// read yet — rewrite the data files that carry deletes, applying them. The data rewrite
    /// also when the last merge failed (it is not tried again and again), and on the native
    /// engine (`engine = "native"`), which applies deletes but does not merge them.
    fn deletes_plan(&self, strategy: RunStrategy) -> RunPlan {
        let deletes = &self.snapshot.state.deletes;
        let ratio = self.spec.deletes.ratio_ppm.unwrap_or(300_000);
        let read = deletes.read_millis.is_some();
        let may_merge =
            !deletes.merge_failed && self.spec.engine != crate::config::EngineChoice::Native;
        if may_merge && read && deletes.equality_files == 0 && deletes.ratio_ppm() < ratio {
            return RunPlan::maintenance(Trigger::Deletes, Maintenance::RewritePositionDeletes);
        }
        RunPlan {
            trigger: Trigger::Deletes,
            task: Task::Rewrite(Rewrite {
                partitions: Vec::new(),
                min_input_files: self.spec.min_input_files,
                mid_sized: MidSizedFiles::Nowhere,
                strategy,
                apply_deletes: true,
            }),
        }
    }

    /// When the table's next `remove_orphan_files` is due (`None`: off): a period after the last
    /// run, failed or not; at once if it never ran.
    pub fn next_orphan_run(&self) -> Option<UnixMillis> {
        let every = self.spec.remove_orphans_every_millis?;
        Some(self.snapshot.state.orphans.next_run_millis(every))
    }

    /// Whether the table has nothing to do but wait for events and its schedule: no file pending
    /// or unconfirmed, no claim, no back-off running, no change being committed or settled,
    /// nothing due.
    /// Such a table needs no live accumulator; [`Self::scheduled_at`] says when it must be woken.
    pub fn at_rest(&self, now: UnixMillis) -> bool {
        let state = &self.snapshot.state;
        state.pending.files == 0
            && state.unconfirmed.files == 0
            && state.claim.is_none()
            && state.next_attempt_millis.is_none_or(|next| now >= next)
            && self.staged.is_none()
            && self.settling.is_none()
            && !self.deletes_due()
            && !self.manifests_due()
            && !self.statistics_due()
            && self.due(now).is_none()
    }

    /// When the table's scheduled work is next due — a periodic reconcile (counted from the last
    /// metadata read, or from `started_millis` if none), a read of unconfirmed files, a
    /// `remove_orphan_files` — if it has any.
    pub fn scheduled_at(&self, started_millis: UnixMillis) -> Option<UnixMillis> {
        let periodic = self.spec.reconcile_every_millis.map(|every| {
            self.snapshot
                .state
                .last_truth_millis
                .unwrap_or(started_millis)
                .saturating_add(every)
        });
        [periodic, self.unconfirmed_read_at(), self.next_orphan_run()]
            .into_iter()
            .flatten()
            .min()
    }

    pub fn due(&self, now: UnixMillis) -> Option<DueReason> {
        match self.decision(now) {
            Decision::Due { reason, .. } => Some(reason),
            _ => None,
        }
    }

    pub fn decision(&self, now: UnixMillis) -> Decision {
        table_decision(
            &self.snapshot.state.pending,
            &self.snapshot.partitions,
            &self.spec.thresholds,
            &self.spec.rewrite_rule(),
            &self.spec.pacing.for_state(&self.snapshot.state),
            now,
        )
    }

    /// A ticket for the claim in flight (recovery after a restart).
    pub fn claim_ticket(&self) -> Option<ClaimTicket> {
        let state = &self.snapshot.state;
        state
            .claim
            .as_ref()
            .map(|claim| ClaimTicket::from_claim(claim, state))
    }

    /// The next moment the max-wait threshold makes a partition worth a run by itself, or a
    /// partition's fragments stop waiting to fill, or a partition goes quiet, if any is still
    /// ahead (a partition whose time has passed is already part of the decision).
    pub fn next_deadline(&self, now: UnixMillis) -> Option<UnixMillis> {
        next_wake(
            &self.decision(now),
            &self.snapshot.partitions,
            &self.spec.thresholds,
            &self.spec.pacing.for_state(&self.snapshot.state),
            now,
        )
    }
}

mod claim;
mod settle;
pub use settle::{prepare_settlement, settle_run, Settlement};
mod step;
pub use step::NextStep;

#[cfg(test)]
mod tests;
