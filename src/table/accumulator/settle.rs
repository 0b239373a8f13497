//! A run's end: its outcome settled into the table's state, and the pending files rebuilt from
//! the table's committed metadata when the run read it.

use super::*;
use crate::model::report::RanOn;

/// The pending files after a run read the table's committed metadata (the truth): every small
/// data file the metadata has, plus the logged files it does not have yet and that are still
/// expected — logged after the claim, or announced by an event at `keep_unconfirmed_after` or
/// later (the grace: a writer still committing, whether or not the run claimed the file) — and
/// were not committed and removed since. A file known from the metadata and gone from it is gone.
/// The run's own still-small outputs are files known from the metadata, even when their events
/// came first.
/// Returns the new log (fresh sequence numbers from `next_seq`), the `seen` entries that make
/// late events of these files — and of everything committed meanwhile, such as the run's own
/// output — duplicates, and those keys (the truth's and the committed files').
/// The log rebuilt from a truth read, its `seen` ops, and the keys it settles.
type Rebuilt = (BTreeMap<u64, FileEntry>, Vec<Op>, HashSet<(String, String)>);

/// How long before a metadata read a claimed file it lacks must have been announced to be
/// unconfirmed: a writer commits within seconds of its upload; a file uploaded a minute before
/// the read and not in the table was not committed (or its writer is slow, and the next read
/// finds it).
pub const UNCONFIRMED_AFTER_MILLIS: i64 = 60_000;

#[allow(clippy::too_many_arguments)]
fn rebuild_from_truth(
    spec: &TableSpec,
    logged: &BTreeMap<u64, FileEntry>,
    upto_seq: u64,
    keep_unconfirmed_after: UnixMillis,
    truth: &[(String, u64)],
    (committed, outputs): (&[String], &[String]),
    next_seq: u64,
    store: &dyn StateStore,
    now: UnixMillis,
) -> Result<Rebuilt, StoreError> {
    use std::collections::HashMap;
    let object = |path: &str| {
        split_object_path(path).map(|(bucket, key)| (bucket.to_string(), key.to_string()))
    };
    let truth: HashMap<(String, String), u64> = truth
        .iter()
        .filter_map(|(path, size)| Some((object(path)?, *size)))
        .collect();
    let committed: HashSet<(String, String)> =
        committed.iter().filter_map(|path| object(path)).collect();
    let outputs: HashSet<(String, String)> =
        outputs.iter().filter_map(|path| object(path)).collect();
    let mut kept: Vec<FileEntry> = Vec::new();
    let mut known: HashSet<(String, String)> = HashSet::new();
    for (seq, file) in logged {
        let id = (file.bucket.clone(), file.key.clone());
        let keep = if let Some(size) = truth.get(&id) {
            Some(FileEntry {
                size: *size,
                source: match file.source {
                    _ if outputs.contains(&id) => FileSource::Metadata,
                    // The metadata has it now: pending again.
                    FileSource::Unconfirmed => FileSource::Events,
                    source => source,
                },
                ..file.clone()
            })
        } else if committed.contains(&id) || crate::model::report::is_own_output(&file.key) {
            // Committed and gone since; or an output of icepack's own engine that the read,
            // made after its run, does not have: an abandoned attempt's (a failed or killed
            // run's), never committed, whenever its event came.
            None
        } else if *seq >= upto_seq {
            // Announced during the run: the read may have come before its commit.
            Some(file.clone())
        } else if file.source != FileSource::Metadata && file.event_millis >= keep_unconfirmed_after
        {
            // Announced before the read and not in the table: not committed, or not yet. Just
            // announced, its writer is most likely committing: it stays pending. Announced a
            // while ago, it waits for the metadata within the grace, counting toward no
            // threshold, so that runs do not claim it again and again and rewrite nothing.
            let source = if file.event_millis <= now.saturating_sub(UNCONFIRMED_AFTER_MILLIS) {
                FileSource::Unconfirmed
            } else {
                file.source
            };
            Some(FileEntry {
                source,
                ..file.clone()
            })
        } else {
            None
        };
        if let Some(file) = keep {
            known.insert(id);
            kept.push(file);
        }
    }
    let mut discovered: Vec<(&(String, String), &u64)> = truth
        .iter()
        .filter(|(id, _)| !known.contains(*id))
        .collect();
    discovered.sort();
    for ((bucket, key), size) in discovered {
        kept.push(FileEntry {
            bucket: bucket.clone(),
            key: key.clone(),
            size: *size,
            event_millis: now,
            partition: crate::intake::routing::partition_of(&spec.prefix, key),
            source: FileSource::Metadata,
        });
    }
    let rebuilt: BTreeMap<u64, FileEntry> = kept
        .into_iter()
        .enumerate()
        .map(|(index, file)| (next_seq + index as u64, file))
        .collect();
    // Every file now pending, and everything committed meanwhile, is a known key from now on.
    let mut ids: Vec<(String, String, Option<u64>)> = rebuilt
        .iter()
        .map(|(seq, file)| (file.bucket.clone(), file.key.clone(), Some(*seq)))
        .collect();
    let pending: HashSet<(String, String)> = rebuilt
        .values()
        .map(|file| (file.bucket.clone(), file.key.clone()))
        .collect();
    ids.extend(
        committed
            .into_iter()
            .filter(|id| !pending.contains(id))
            .map(|(bucket, key)| (bucket, key, None)),
    );
    let lookups: Vec<(&str, &str)> = ids
        .iter()
        .map(|(bucket, key, _)| (bucket.as_str(), key.as_str()))
        .collect();
    let existing = store.seen_entries(&lookups)?;
    let mut ops = Vec::new();
    for ((bucket, key, seq), existing) in ids.iter().zip(existing) {
        let first_seen_millis = existing
            .as_ref()
            .map_or(now, |entry| entry.first_seen_millis);
        if existing.as_ref().map(|entry| entry.seq) != Some(*seq) {
            ops.push(Op::PutSeen {
                bucket: bucket.clone(),
                key: key.clone(),
                entry: SeenEntry {
                    table: spec.table.clone(),
                    first_seen_millis,
                    seq: *seq,
                },
            });
        }
    }
    let settled_keys = ids
        .into_iter()
        .map(|(bucket, key, _)| (bucket, key))
        .collect();
    Ok((rebuilt, ops, settled_keys))
}

/// What a table's state becomes when its run ended, and the ops that make it so: a
/// [`Settlement`] prepared from `snapshot` and applied to it at once.
// The run's id, outcome and engine are what `RunFinished` carries, passed as they come.
#[allow(clippy::too_many_arguments)]
pub fn settle_run(
    spec: &TableSpec,
    snapshot: &TableSnapshot,
    store: &dyn StateStore,
    run_id: &str,
    outcome: &RunOutcome,
    ran_on: Option<&RanOn>,
    now: UnixMillis,
    backoff: FailureBackoff,
) -> Result<Option<(Vec<Op>, StagedChange)>, StoreError> {
    Ok(
        prepare_settlement(spec, snapshot, store, run_id, outcome, ran_on, now, backoff)?
            .map(|settlement| settlement.apply(spec, snapshot, &[], now)),
    )
}

/// A run's settlement computed from the table as it was when the run ended (its *base*), to be
/// applied to the table as it is then ([`Settlement::apply`]). The heavy part — reading the
/// file log and rebuilding it from a truth of any size — runs off the table's actor while the
/// table goes on counting new files; what it counted meanwhile is added when it is applied.
#[derive(Debug)]
pub struct Settlement {
    /// The file log's, `seen` and run history ops; the table's row and partitions are written by
    /// [`apply`](Self::apply).
    ops: Vec<Op>,
    state: TableState,
    partitions: BTreeMap<String, PartitionCounts>,
    /// A file counted meanwhile whose key is one of these is not pending after the run: the
    /// truth has it (pending under the rebuilt log's number), it was committed and is gone, or
    /// it is the run's own output.
    settled_keys: HashSet<(String, String)>,
    /// The settled keys are the run's outputs (no truth read): their `seen` entries are reset
    /// when a file counted meanwhile is dropped (a truth read writes them itself).
    outputs_only: bool,
    /// The base's next file sequence number: the log below it is the one settled.
    base_next_seq: u64,
    /// The rebuilt log's sequence numbers end before this.
    end_seq: u64,
}

/// Success: the claimed files leave the log; the run's own output files stop counting — those
/// already counted are removed from the pending files, the others are remembered so that their
/// events count as duplicates. Failure: the claimed files are pending again, and the table waits
/// out its back-off. Either way the pending counts are recomputed from the file log, as it was
/// below the base's next sequence number (files counted since are added by
/// [`Settlement::apply`]). `None` when the base holds no claim of this run.
#[allow(clippy::too_many_arguments)]
pub fn prepare_settlement(
    spec: &TableSpec,
    snapshot: &TableSnapshot,
    store: &dyn StateStore,
    run_id: &str,
    outcome: &RunOutcome,
    ran_on: Option<&RanOn>,
    now: UnixMillis,
    backoff: FailureBackoff,
) -> Result<Option<Settlement>, StoreError> {
    let current = &snapshot.state;
    let Some(claim) = current
        .claim
        .as_ref()
        .filter(|claim| claim.run_id == run_id)
    else {
        return Ok(None);
    };
    let table = spec.table.clone();
    let mut files: BTreeMap<u64, FileEntry> = store.files(&table)?.into_iter().collect();
    // Files counted after the base are the table's business meanwhile, not this settlement's.
    drop(files.split_off(&current.next_file_seq));
    let mut settled_keys = HashSet::new();
    let mut outputs_only = false;
    let mut ops = Vec::new();
    let mut state = TableState {
        claim: None,
        ..current.clone()
    };
    if let RunOutcome::Success { report, .. } = outcome {
        if let Some(order) = &report.table_order {
            state.table_order = Some(order.clone());
        }
    }
    let record = |succeeded: bool| RunRecord {
        run_id: run_id.to_string(),
        trigger: claim.trigger,
        started_millis: claim.started_millis,
        finished_millis: now,
        claimed_files: claim.counts.files,
        claimed_bytes: claim.counts.bytes,
        succeeded,
        failure_class: None,
        error: None,
        result: None,
        output_files: 0,
        duration_millis: 0,
        strategy: claim
            .task
            .rewrite()
            .map(|rewrite| rewrite.strategy.name().to_string()),
        maintenance: claim.task.maintenance(),
        manifests: None,
        orphan_files: None,
        delete_rewrite: None,
        statistics_files: None,
        partitions: claim
            .task
            .rewrite()
            .map(|rewrite| rewrite.partitions.clone())
            .unwrap_or_default(),
        attempts: 0,
        maintenance_failed: None,
        ran_on: ran_on.cloned(),
        left: Vec::new(),
    };
    match outcome {
        RunOutcome::Success {
            report,
            duration_millis,
            attempts,
        } if report.truth.is_some() => {
            let truth = report.truth.as_deref().unwrap_or_default();
            // The same grace for a run as for a reconcile: a file announced shortly before the
            // claim whose writer commits after the truth read stays pending, and is not counted
            // as compacted below.
            let keep_unconfirmed_after = (now - RECONCILE_GRACE_MILLIS).min(claim.started_millis);
            let (rebuilt, seen_ops, truth_keys) = rebuild_from_truth(
                spec,
                &files,
                claim.upto_seq,
                keep_unconfirmed_after,
                truth,
                (&report.committed, &report.output_files),
                current.next_file_seq,
                store,
                now,
            )?;
            ops.push(Op::DeleteFilesBelow {
                table: table.clone(),
                seq: current.next_file_seq,
            });
            ops.extend(seen_ops);
            settled_keys = truth_keys;
            if claim.task.rewrites_data() {
                let still_pending: HashSet<(&str, &str)> = rebuilt
                    .values()
                    .map(|file| (file.bucket.as_str(), file.key.as_str()))
                    .collect();
                let gone = files
                    .range(..claim.upto_seq)
                    .filter(|(_, file)| {
                        !still_pending.contains(&(file.bucket.as_str(), file.key.as_str()))
                    })
                    .count();
                state.compacted_files += gone as u64;
            }
            files = rebuilt;
            for (seq, entry) in &files {
                ops.push(Op::PutFile {
                    table: table.clone(),
                    seq: *seq,
                    entry: entry.clone(),
                });
            }
            state.next_file_seq = files
                .keys()
                .next_back()
                .map_or(current.next_file_seq, |last| last + 1)
                .max(current.next_file_seq);
            state.last_truth_millis = Some(now);
            if report.spec.is_some() {
                state.partition_spec = report.spec.clone();
            }
            if claim.is_run() {
                state.consecutive_failures = 0;
                state.next_attempt_millis = None;
            }
            if let Some(read) = report.deletes {
                state.deletes = crate::model::state::DeleteCounts {
                    position_files: read.position_files,
                    equality_files: read.equality_files,
                    deleted_rows: read.deleted_rows,
                    data_rows: read.data_rows,
                    since_read: 0,
                    read_millis: Some(now),
                    // A read starts over: a merge may be tried again.
                    merge_failed: false,
                };
            }
            if claim.task.maintenance() == Some(Maintenance::ComputeStatistics) {
                state.last_run = Some(RunRecord {
                    statistics_files: Some(report.statistics_files.unwrap_or(0)),
                    duration_millis: *duration_millis,
                    attempts: *attempts,
                    ..record(true)
                });
            }
            if claim.task.maintenance() == Some(Maintenance::RewritePositionDeletes) {
                state.last_run = Some(RunRecord {
                    delete_rewrite: Some(report.delete_rewrite.unwrap_or_default()),
                    duration_millis: *duration_millis,
                    attempts: *attempts,
                    ..record(true)
                });
            }
            if let Some(Maintenance::RemoveOrphans { dry_run }) = claim.task.maintenance() {
                let files = report.orphan_files.unwrap_or(0);
                let previous = current.orphans;
                state.orphans = crate::model::state::OrphanRuns {
                    last_run_millis: Some(claim.started_millis),
                    dry_run_done: true,
                    found: if dry_run { Some(files) } else { previous.found },
                    removed: if dry_run {
                        previous.removed
                    } else {
                        Some(files)
                    },
                    failed_millis: None,
                };
                state.last_run = Some(RunRecord {
                    orphan_files: Some(files),
                    duration_millis: *duration_millis,
                    attempts: *attempts,
                    ..record(true)
                });
            }
            if let Some(count) = report.manifest_count {
                let before = current.manifests.total();
                let rewritten = claim.task.maintenance() == Some(Maintenance::RewriteManifests);
                state.manifests = crate::model::state::ManifestCounts {
                    known: count,
                    since_read: 0,
                    read_millis: Some(now),
                    left_by_rewrite: if rewritten {
                        count
                    } else {
                        current.manifests.left_by_rewrite.min(count)
                    },
                };
                if rewritten {
                    state.last_run = Some(RunRecord {
                        manifests: Some((before, count)),
                        duration_millis: *duration_millis,
                        attempts: *attempts,
                        ..record(true)
                    });
                }
            }
            if claim.task.rewrites_data() {
                state.last_run = Some(RunRecord {
                    result: Some(report.result),
                    output_files: report.output_files.len() as u64,
                    duration_millis: *duration_millis,
                    attempts: *attempts,
                    maintenance_failed: report.maintenance_failed.clone(),
                    left: report.left.clone(),
                    ..record(true)
                });
            }
        }
        RunOutcome::Success {
            report,
            duration_millis,
            attempts,
        } => {
            let before = files.len();
            files.retain(|seq, _| *seq >= claim.upto_seq);
            state.compacted_files += (before - files.len()) as u64;
            ops.push(Op::DeleteFilesBelow {
                table: table.clone(),
                seq: claim.upto_seq,
            });
            let outputs: Vec<(&str, &str)> = report
                .output_files
                .iter()
                .filter_map(|path| split_object_path(path))
                .filter(|(bucket, key)| {
                    *bucket == spec.bucket && key.starts_with(spec.prefix.as_str())
                })
                .collect();
            outputs_only = true;
            settled_keys = outputs
                .iter()
                .map(|(bucket, key)| (bucket.to_string(), key.to_string()))
                .collect();
            for ((bucket, key), seen) in outputs.iter().zip(store.seen_entries(&outputs)?) {
                match seen {
                    Some(SeenEntry {
                        table: owner,
                        seq: Some(seq),
                        ..
                    }) if owner == table => {
                        if files.remove(&seq).is_some() {
                            ops.push(Op::DeleteFile {
                                table: table.clone(),
                                seq,
                            });
                        }
                    }
                    Some(_) => {}
                    None => ops.push(Op::PutSeen {
                        bucket: bucket.to_string(),
                        key: key.to_string(),
                        entry: SeenEntry {
                            table: table.clone(),
                            first_seen_millis: now,
                            seq: None,
                        },
                    }),
                }
            }
            state.consecutive_failures = 0;
            state.next_attempt_millis = None;
            state.last_run = Some(RunRecord {
                result: Some(report.result),
                output_files: outputs.len() as u64,
                duration_millis: *duration_millis,
                attempts: *attempts,
                maintenance_failed: report.maintenance_failed.clone(),
                left: report.left.clone(),
                ..record(true)
            });
        }
        RunOutcome::Failure {
            class,
            excerpt,
            duration_millis,
            attempts,
        } if claim.is_run() => {
            // Maintenance that failed — statistics that could not be computed, orphan files that
            // could not be listed, manifests or position deletes that could not be merged — is
            // told (the run history, an alert) and never backs the table off: its compactions
            // are not its to hold. Statistics are tried again after the next run that changes
            // the table, orphans a period later, manifests once the table has gained half of
            // `max_manifests` more (as after a rewrite that left them), deletes by a data rewrite.
            match claim.task.maintenance() {
                Some(Maintenance::ComputeStatistics) => {}
                Some(Maintenance::RemoveOrphans { .. }) => {
                    state.orphans.failed_millis = Some(claim.started_millis);
                }
                Some(Maintenance::RewriteManifests) => {
                    state.manifests.left_by_rewrite = current.manifests.total();
                }
                // The cheap fix of the deletes failed: the next run applies them in a data
                // rewrite (which removes the delete files it makes dangle) instead.
                Some(Maintenance::RewritePositionDeletes) => {
                    state.deletes.merge_failed = true;
                }
                _ => {
                    state.consecutive_failures = current.consecutive_failures.saturating_add(1);
                    state.next_attempt_millis =
                        Some(now + backoff.delay_millis(state.consecutive_failures));
                }
            }
            state.last_run = Some(RunRecord {
                failure_class: Some(*class),
                error: Some(excerpt.clone()),
                duration_millis: *duration_millis,
                attempts: *attempts,
                ..record(false)
            });
        }
        // A reconcile that failed: its files are pending again, compactions are not held back
        // (but a failed read of the order the table's runs wait for is a failed run).
        RunOutcome::Failure { .. } => {}
    }
    // A rewrite that rewrote nothing backs the table off as a failure does: what it claimed
    // could not be rewritten (what the metadata lacks now waits for it, unconfirmed), and the
    // next run would rewrite nothing again until new files land.
    if let RunOutcome::Success { report, .. } = outcome {
        if claim.task.rewrites_data() {
            let rewrote = report.result.rewritten_data_files_count > 0
                || report.result.removed_delete_files_count > 0;
            state.empty_runs = if rewrote {
                0
            } else {
                current.empty_runs.saturating_add(1)
            };
            if !rewrote {
                state.next_attempt_millis = Some(now + backoff.delay_millis(state.empty_runs));
            }
        }
    }
    // Statistics describe the table's files: a run that changed them makes them due (computed
    // by a run of their own); the statistics run ends that, whatever its outcome.
    if claim.task.maintenance() == Some(Maintenance::ComputeStatistics) {
        state.statistics_due = false;
    } else if let RunOutcome::Success { report, .. } = outcome {
        let changed = report.result.rewritten_data_files_count > 0
            || report.result.removed_delete_files_count > 0
            || report
                .delete_rewrite
                .is_some_and(|(rewritten, added)| rewritten + added > 0);
        if changed && spec.compute_statistics {
            state.statistics_due = true;
        }
    }
    // A rewrite that succeeded at its first attempt measures what a run costs the table's
    // engine (the cost pacing's run cost).
    if let RunOutcome::Success {
        duration_millis,
        attempts: 1,
        ..
    } = outcome
    {
        if claim.task.rewrites_data() {
            state.run_costs.record(*duration_millis);
        }
    }
    // A run that recorded an outcome joins the table's history; the oldest beyond its bound go.
    if let Some(run) = state
        .last_run
        .as_ref()
        .filter(|run| Some(*run) != current.last_run.as_ref())
    {
        ops.push(Op::PutRun {
            table: table.clone(),
            seq: state.next_run_seq,
            record: run.clone(),
        });
        state.next_run_seq += 1;
        if let Some(below) = state.next_run_seq.checked_sub(spec.run_history) {
            ops.push(Op::DeleteRunsBelow {
                table: table.clone(),
                seq: below,
            });
        }
    }
    let (pending, partitions) = PendingCounts::aggregate(files.values());
    state.pending = pending;
    state.unconfirmed = crate::model::state::UnconfirmedFiles::of(files.values());
    let end_seq = files
        .keys()
        .next_back()
        .map_or(current.next_file_seq, |last| last + 1)
        .max(current.next_file_seq);
    Ok(Some(Settlement {
        ops,
        state,
        partitions,
        settled_keys,
        outputs_only,
        base_next_seq: current.next_file_seq,
        end_seq,
    }))
}

impl Settlement {
    /// How many sequence numbers past the base's the rebuilt log takes.
    pub fn reserve_needed(&self) -> u64 {
        self.end_seq - self.base_next_seq
    }

    /// Whether files counted meanwhile (`counted`) took sequence numbers the rebuilt log uses.
    pub fn overlaps(&self, counted: &[Counted]) -> bool {
        counted.iter().any(|counted| {
            matches!(counted, Counted::File { seq, .. } if (self.base_next_seq..self.end_seq).contains(seq))
        })
    }

    /// The ops and the change that settle the run on `current`, the table as it is now: the
    /// settlement, plus what the table counted since the base (`counted`) as a count after the
    /// settlement would have — a file the run settled (in the truth, committed and gone, its own
    /// output) leaves the log, any other stays pending; a manifest or delete file announced
    /// before the settlement's read of the metadata is already in it. Must not
    /// [`overlap`](Self::overlaps) `counted`.
    pub fn apply(
        self,
        spec: &TableSpec,
        current: &TableSnapshot,
        counted: &[Counted],
        now: UnixMillis,
    ) -> (Vec<Op>, StagedChange) {
        let Settlement {
            mut ops,
            mut state,
            mut partitions,
            settled_keys,
            outputs_only,
            ..
        } = self;
        let table = &spec.table;
        for counted in counted {
            match counted {
                Counted::File { seq, entry } => {
                    if settled_keys.contains(&(entry.bucket.clone(), entry.key.clone())) {
                        ops.push(Op::DeleteFile {
                            table: table.clone(),
                            seq: *seq,
                        });
                        if outputs_only {
                            ops.push(Op::PutSeen {
                                bucket: entry.bucket.clone(),
                                key: entry.key.clone(),
                                entry: SeenEntry {
                                    table: table.clone(),
                                    first_seen_millis: now,
                                    seq: None,
                                },
                            });
                        }
                        continue;
                    }
                    // As `PendingCounts::aggregate` counts a logged file.
                    state.pending.add_file(entry.size, entry.event_millis);
                    let partition = partitions.entry(entry.partition.clone()).or_default();
                    partition.add_file(entry.size, entry.event_millis);
                    if entry.source == FileSource::Metadata {
                        partition.metadata_files += 1;
                        partition.metadata_bytes =
                            partition.metadata_bytes.saturating_add(entry.size);
                    }
                }
                Counted::Manifest { event_millis } => {
                    if state
                        .manifests
                        .read_millis
                        .is_none_or(|read| *event_millis >= read)
                    {
                        state.manifests.since_read += 1;
                    }
                }
                Counted::Delete { event_millis } => {
                    if state
                        .deletes
                        .read_millis
                        .is_none_or(|read| *event_millis >= read)
                    {
                        state.deletes.since_read += 1;
                    }
                }
            }
        }
        state.next_file_seq = state.next_file_seq.max(current.state.next_file_seq);
        ops.push(Op::PutTable {
            table: table.clone(),
            state: state.clone(),
        });
        for stale in current
            .partitions
            .keys()
            .filter(|partition| !partitions.contains_key(*partition))
        {
            ops.push(Op::DeletePartition {
                table: table.clone(),
                partition: stale.clone(),
            });
        }
        for (partition, counts) in &partitions {
            ops.push(Op::PutPartition {
                table: table.clone(),
                partition: partition.clone(),
                counts: *counts,
            });
        }
        (
            ops,
            StagedChange {
                state,
                partitions: PartitionUpdate::Replace(partitions),
                counted: Vec::new(),
            },
        )
    }
}
