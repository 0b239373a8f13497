//! A native run's write and commit path: the plan's groups rewritten (one commit, or one per
//! group with partial progress), the `replace` snapshot committed with re-validation and retries,
//! and what the run wrote and did not commit removed. [`super`] holds the engine, its task and
//! report; [`super::plan`] decides what is rewritten, [`super::rewrite`] how.

use super::*;

/// Outputs that are, or may be, part of the table: never deleted.
#[derive(Debug, Clone, Default)]
pub(super) struct KeptOutputs(Arc<Mutex<HashSet<String>>>);

impl KeptOutputs {
    fn keep(&self, paths: impl IntoIterator<Item = String>) {
        self.0.lock().expect("kept outputs").extend(paths);
    }

    fn release(&self, paths: &[String]) {
        let mut kept = self.0.lock().expect("kept outputs");
        for path in paths {
            kept.remove(path);
        }
    }

    fn contains(&self, path: &str) -> bool {
        self.0.lock().expect("kept outputs").contains(path)
    }
}

/// What the run committed so far.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) result: RewriteResult,
    pub(super) outputs: Vec<String>,
    pub(super) snapshots: Vec<i64>,
    pub(super) first_failure: Option<NativeError>,
    /// The partitions the plan left, with why.
    pub(super) left: Vec<LeftPartition>,
    /// A step after the rewrite that failed (`expire_snapshots`).
    pub(super) maintenance_failed: Option<MaintenanceFailure>,
}

pub(super) async fn execute(
    context: RunContext,
    task: NativeTask,
    log: OutputLog,
    keep: KeptOutputs,
) -> Result<NativeReport, NativeError> {
    let catalog = connect(&context, &task.catalog_name, &task.catalog, &task.table).await?;
    execute_on(&context, &task, catalog.as_ref(), &log, &keep).await
}

/// A run on a catalog already connected.
pub(super) async fn execute_on(
    context: &RunContext,
    task: &NativeTask,
    catalog: &dyn TableCatalog,
    log: &OutputLog,
    keep: &KeptOutputs,
) -> Result<NativeReport, NativeError> {
    let cache = ManifestCache::default();
    let outcome = rewrite_and_commit(context, task, catalog, &cache, log, keep).await;
    let leftovers: Vec<String> = log
        .paths()
        .into_iter()
        .filter(|path| !keep.contains(path))
        .collect();
    if !leftovers.is_empty() {
        let file_io = catalog.load().await.map(|table| table.file_io);
        match file_io {
            Ok(file_io) => snapshot::remove_files(&file_io, &leftovers).await,
            Err(error) => {
                warn!(run = %task.run_id, files = leftovers.len(), "uncommitted outputs left for orphan removal: {error}")
            }
        }
    }
    let mut tally = outcome?;
    if let Some(request) = task.expire {
        tally.maintenance_failed = expire_after(context, task, catalog, request).await;
    }
    build_report(catalog, &cache, task, tally).await
}

/// `expire_snapshots` after the rewrite, within the run's deadline; what failed, if anything
/// (the rewrite stands either way).
async fn expire_after(
    context: &RunContext,
    task: &NativeTask,
    catalog: &dyn TableCatalog,
    request: super::expire::ExpireRequest,
) -> Option<MaintenanceFailure> {
    let deadline = tokio::time::Instant::from_std(task.deadline);
    let expiry = super::expire::expire(catalog, &task.table, &context.runtime, request);
    let failure = |class: FailureClass, excerpt: String| MaintenanceFailure {
        step: "expire_snapshots".to_string(),
        class,
        excerpt,
    };
    match tokio::time::timeout_at(deadline, expiry).await {
        Ok(Ok(report)) => {
            info!(
                table = %task.table,
                run = %task.run_id,
                expired = report.expired_snapshots,
                deleted_files = report.deleted_files,
                "native expire_snapshots done"
            );
            report.not_deleted.map(|(count, first)| {
                failure(
                    FailureClass::Other,
                    format!(
                        "{count} files only expired snapshots read were not deleted (left for remove_orphan_files); the first, {first}"
                    ),
                )
            })
        }
        Ok(Err(error)) => {
            warn!(table = %task.table, run = %task.run_id, "native expire_snapshots failed: {error}");
            Some(failure(error.class(), error.to_string()))
        }
        Err(_) => Some(failure(
            FailureClass::Timeout,
            "the run's deadline passed during expire_snapshots".to_string(),
        )),
    }
}

async fn rewrite_and_commit(
    context: &RunContext,
    task: &NativeTask,
    catalog: &dyn TableCatalog,
    cache: &ManifestCache,
    log: &OutputLog,
    keep: &KeptOutputs,
) -> Result<Tally, NativeError> {
    let start = TableState::read(catalog.load().await?, cache).await?;
    check_format(&start)?;
    let mut tally = Tally::default();
    let Some(starting_snapshot) = start.snapshot.clone() else {
        return Ok(tally);
    };
    let (request, plan) = plan_on(task, &start, &context.limits)?;
    tally.left = left_partitions(&plan.left);
    if !tally.left.is_empty() {
        info!(
            table = %task.table,
            run = %task.run_id,
            left = plan.left.len(),
            first = %tally.left[0],
            "native run leaves partitions it was asked for"
        );
    }
    if plan.is_empty() {
        return Ok(tally);
    }
    info!(
        table = %task.table,
        run = %task.run_id,
        groups = plan.groups.len(),
        files = plan.input_files(),
        bytes = plan.input_bytes(),
        "native run planned"
    );
    let settings = WriteSettings {
        sort: super::sort::sort_keys(&task.order, &start.table.metadata)?,
        ..WriteSettings::for_table(&start, task.target_file_bytes, &task.run_id)?
    };
    let batches: Vec<Vec<usize>> = if task.partial_progress {
        (0..plan.groups.len()).map(|index| vec![index]).collect()
    } else {
        vec![(0..plan.groups.len()).collect()]
    };
    let mut current = start;
    let mut failed_files = 0u64;
    for batch in batches {
        let groups: Vec<&FileGroup> = batch.iter().map(|&index| &plan.groups[index]).collect();
        let written = write_batch(
            context,
            task,
            &current,
            &plan.groups,
            &batch,
            &settings,
            log,
        )
        .await;
        let outputs = match written {
            Ok(outputs) => outputs,
            Err(error) if task.partial_progress => {
                failed_files += groups
                    .iter()
                    .map(|group| group.files.len() as u64)
                    .sum::<u64>();
                tally.first_failure.get_or_insert(error);
                if Instant::now() >= task.deadline {
                    break;
                }
                continue;
            }
            Err(error) => return Err(error),
        };
        let inputs: Vec<DataFileFacts> = groups
            .iter()
            .flat_map(|group| group.files.iter().cloned())
            .collect();
        let output_paths: Vec<String> = outputs
            .iter()
            .map(|(_, file)| file.file_path().to_string())
            .collect();
        match commit_with_retries(
            catalog,
            cache,
            current,
            &inputs,
            &outputs,
            (starting_snapshot.sequence_number(), request.output_spec_id),
            task,
            keep,
        )
        .await
        {
            Ok((committed, snapshot_id, removed_deletes)) => {
                current = committed;
                tally.result.removed_delete_files_count += removed_deletes;
                tally.result.rewritten_data_files_count += inputs.len() as u64;
                tally.result.rewritten_bytes_count +=
                    inputs.iter().map(|file| file.size_bytes).sum::<u64>();
                tally.result.added_data_files_count += outputs.len() as u64;
                tally.outputs.extend(output_paths);
                tally.snapshots.push(snapshot_id);
            }
            Err((error, state)) => {
                if !task.partial_progress || matches!(error, NativeError::CommitStateUnknown(_)) {
                    return Err(error);
                }
                failed_files += inputs.len() as u64;
                tally.first_failure.get_or_insert(error);
                current = match state {
                    Some(state) => state,
                    None => TableState::read(catalog.load().await?, cache).await?,
                };
            }
        }
    }
    tally.result.failed_data_files_count = failed_files;
    if tally.snapshots.is_empty() {
        if let Some(error) = tally.first_failure.take() {
            return Err(error);
        }
    }
    Ok(tally)
}

/// Reads and writes the groups of one commit, within the deadline.
async fn write_batch(
    context: &RunContext,
    task: &NativeTask,
    state: &TableState,
    groups: &[FileGroup],
    batch: &[usize],
    settings: &WriteSettings,
    log: &OutputLog,
) -> Result<Vec<(i32, DataFile)>, NativeError> {
    let mut outputs = Vec::new();
    let deletes = state.delete_facts();
    for &index in batch {
        let group = &groups[index];
        let rewrite = rewrite::rewrite_group(
            state,
            group,
            &deletes,
            index,
            settings,
            log,
            context.runtime.clone(),
            context.limits.read_concurrency,
        );
        let deadline = tokio::time::Instant::from_std(task.deadline);
        let files = tokio::time::timeout_at(deadline, rewrite)
            .await
            .map_err(|_| {
                NativeError::Timeout(format!(
                    "the run's deadline passed while group {index} ({} files, {}) was rewritten",
                    group.files.len(),
                    group.describe()
                ))
            })??;
        outputs.extend(files.into_iter().map(|file| (group.spec_id, file)));
    }
    Ok(outputs)
}

/// Commits a rewrite, reloading and validating after each conflict. On failure, the table as
/// last loaded (when it was) comes back with the error.
#[allow(clippy::too_many_arguments)]
async fn commit_with_retries(
    catalog: &dyn TableCatalog,
    cache: &ManifestCache,
    mut base: TableState,
    inputs: &[DataFileFacts],
    outputs: &[(i32, DataFile)],
    (starting_sequence_number, output_spec_id): (i64, i32),
    task: &NativeTask,
    keep: &KeptOutputs,
) -> Result<(TableState, i64, u64), (NativeError, Option<TableState>)> {
    commit_gate(&task.run_id).await;
    let input_paths: HashSet<String> = inputs.iter().map(|file| file.path.clone()).collect();
    let output_paths: Vec<String> = outputs
        .iter()
        .map(|(_, file)| file.file_path().to_string())
        .collect();
    let mut last_conflict = String::new();
    for attempt in 1..=COMMIT_ATTEMPTS {
        if attempt > 1 {
            base = match catalog.load().await {
                Ok(table) => match TableState::read(table, cache).await {
                    Ok(state) => state,
                    Err(error) => return Err((error, None)),
                },
                Err(error) => return Err((error, None)),
            };
        }
        let deletes = base.delete_facts();
        let validation = plan::validate_rewrite(
            inputs,
            starting_sequence_number,
            output_spec_id,
            &base.live_data_paths(),
            &deletes,
        );
        if let Err(reason) = validation {
            return Err((NativeError::CommitConflict(reason.to_string()), Some(base)));
        }
        // The position deletes applied to the inputs that no live file needs any more leave in
        // the same snapshot; decided anew on each attempt's table (its live files read only when
        // a delete applied to an input).
        let files_after = || {
            base.data_facts()
                .into_iter()
                .map(|(facts, _)| facts)
                .chain(outputs.iter().map(|(spec_id, file)| {
                    base.output_facts(*spec_id, file, starting_sequence_number)
                }))
                .collect()
        };
        let dangling: HashSet<String> = plan::dangling_deletes(inputs, &deletes, files_after)
            .into_iter()
            .map(|delete| delete.path.clone())
            .collect();
        let staged = match snapshot::stage_replace(
            &base,
            &input_paths,
            &dangling,
            outputs,
            starting_sequence_number,
            &task.run_id,
            attempt,
        )
        .await
        {
            Ok(staged) => staged,
            Err(error) => return Err((error, Some(base))),
        };
        let snapshot_id = staged.snapshot.snapshot_id();
        let removed_deletes = staged.removed_delete_files;
        // From here the outputs may become live: nothing deletes them unless the commit surely failed.
        keep.keep(
            output_paths
                .iter()
                .cloned()
                .chain(staged.written.iter().cloned()),
        );
        crash_before_commit();
        match catalog.commit(&base.table, staged.snapshot).await {
            Ok(table) => {
                info!(table = %task.table, run = %task.run_id, snapshot = snapshot_id, attempt, "replace snapshot committed");
                crash_after_commit();
                return match TableState::read(table, cache).await {
                    Ok(state) => Ok((state, snapshot_id, removed_deletes)),
                    Err(error) => Err((error, None)),
                };
            }
            Err(CommitError::Conflict(message)) => {
                keep.release(&output_paths);
                keep.release(&staged.written);
                snapshot::remove_files(&base.table.file_io, &staged.written).await;
                info!(table = %task.table, run = %task.run_id, attempt, "commit conflict, reloading: {message}");
                last_conflict = message;
            }
            Err(CommitError::StateUnknown(message)) => {
                // Decide from the metadata when it can be read; else keep everything.
                if let Ok(table) = catalog.load().await {
                    if table.metadata.snapshot_by_id(snapshot_id).is_some() {
                        return match TableState::read(table, cache).await {
                            Ok(state) => Ok((state, snapshot_id, removed_deletes)),
                            Err(error) => Err((error, None)),
                        };
                    }
                }
                return Err((NativeError::CommitStateUnknown(message), None));
            }
            Err(CommitError::Failed(error)) => {
                keep.release(&output_paths);
                keep.release(&staged.written);
                snapshot::remove_files(&base.table.file_io, &staged.written).await;
                return Err((error, Some(base)));
            }
        }
    }
    Err((
        NativeError::CommitConflict(format!(
            "the table kept changing: {COMMIT_ATTEMPTS} attempts conflicted (last: {last_conflict})"
        )),
        None,
    ))
}

/// `native.commit_gate=return(RUN_ID@PATH)`: the run RUN_ID, its outputs written, creates
/// `PATH.waiting` and waits while PATH exists before it commits (a test lands a concurrent commit
/// meanwhile). Nothing without the `failpoints` feature.
async fn commit_gate(run_id: &str) {
    #[cfg(feature = "failpoints")]
    {
        let armed = (|| {
            fail::fail_point!("native.commit_gate", |armed: Option<String>| armed);
            None
        })();
        if let Some((gated, path)) = armed.as_deref().and_then(|armed| armed.split_once('@')) {
            if gated == run_id {
                let path = std::path::Path::new(path);
                let _ = std::fs::write(path.with_extension("waiting"), b"");
                while path.exists() {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
    let _ = run_id;
}

/// `native.before_commit=return` kills the process once a run's outputs and manifests are
/// written and before its commit is sent (the crash test).
fn crash_before_commit() {
    crate::base::failpoint::crash_point!("native.before_commit");
}

/// `native.after_commit=return` kills the process once the catalog accepted a run's commit and
/// before the run reports it (the recovery test: the outcome is read back from the metadata).
fn crash_after_commit() {
    crate::base::failpoint::crash_point!("native.after_commit");
}
