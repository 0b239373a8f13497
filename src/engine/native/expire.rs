//! `expire_snapshots` in the native engine, after a rewrite as Spark's job runs it.
//!
//! What to expire is decided by iceberg-rust's `ExpireSnapshotsAction`, which follows Java's
//! `RemoveSnapshots`: snapshots older than the cutoff go, except the `retain_last` newest
//! ancestors of each branch (a branch's own `min-snapshots-to-keep` wins, else the table's
//! `history.expire.min-snapshots-to-keep`), the head of every branch and tag, and ancestors a
//! branch's own `max-snapshot-age-ms` keeps; a branch or tag past its `max-ref-age-ms` is removed
//! (never `main`); statistics of expired snapshots leave the metadata; `gc.enabled = false`
//! refuses. The action commits through an iceberg `Catalog`: [`Committer`] is one for a single
//! table that loads and commits through icepack's own catalogs (`TableCatalog`), so the REST
//! client's credentials and the JDBC catalog's compare-and-swap are the ones a rewrite uses. The
//! action deletes no file (iceberg-rust leaves that to the caller): after the commit, icepack
//! deletes every file the expired snapshots read that no kept snapshot reads — their manifest
//! lists, manifests, data and delete files, and the statistics files that left the metadata —
//! computed from the committed metadata, so a file any kept snapshot can read is never deleted.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, TableCommit, TableCreation, TableIdent,
};

use super::catalog::{split_table_name, Change, CommitError, LoadedTable, TableCatalog};
use super::orphans::{snapshot_files, Reachable};
use super::NativeError;
use crate::base::clock::UnixMillis;

/// What an expiry is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpireRequest {
    /// Snapshots written before this time may expire.
    pub older_than_millis: UnixMillis,
    /// The newest snapshots of each branch kept whatever their age (`None`: the table's
    /// `history.expire.min-snapshots-to-keep`, 1 by default).
    pub retain_last: Option<u32>,
}

/// What an expiry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpireReport {
    pub expired_snapshots: u64,
    /// Files deleted after the commit.
    pub deleted_files: u64,
    /// Files only the expired snapshots read that could not be deleted (left for
    /// `remove_orphan_files`), with the first reason.
    pub not_deleted: Option<(u64, String)>,
}

/// Expires the table's snapshots as `request` says, commits, and deletes what only the expired
/// snapshots read.
pub async fn expire(
    catalog: &dyn TableCatalog,
    table_name: &str,
    runtime: &iceberg::Runtime,
    request: ExpireRequest,
) -> Result<ExpireReport, NativeError> {
    let (namespace, name) = split_table_name(table_name)?;
    let identifier = TableIdent::new(
        NamespaceIdent::from_vec(namespace).map_err(|error| {
            NativeError::InvalidInput(format!("the table's namespace: {error}"))
        })?,
        name,
    );
    let committer = Committer {
        catalog,
        identifier: identifier.clone(),
        runtime: runtime.clone(),
        base: Mutex::new(None),
        failure: Mutex::new(None),
    };
    let base = committer.load().await?;
    let table = committer.table(&base)?;
    let mut action = Transaction::new(&table)
        .expire_snapshots()
        .expire_older_than_ms(request.older_than_millis);
    if let Some(retain_last) = request.retain_last {
        action = action.retain_last(retain_last.max(1) as usize);
    }
    let transaction = action
        .apply(Transaction::new(&table))
        .map_err(|error| NativeError::Other(format!("expire_snapshots: {error}")))?;
    if let Err(error) = transaction.commit(&committer).await {
        return Err(committer
            .failure
            .lock()
            .expect("failure")
            .take()
            .unwrap_or_else(|| match error.kind() {
                ErrorKind::DataInvalid => {
                    NativeError::InvalidInput(format!("expire_snapshots: {error}"))
                }
                _ => NativeError::Other(format!("expire_snapshots: {error}")),
            }));
    }
    // The base the commit applied to (the table may have moved before it: the action was
    // applied again to the table as it was then), and what it committed.
    let (before, after) = {
        let state = committer.base.lock().expect("base");
        match state.as_ref() {
            Some(Committed {
                before,
                after: Some(after),
            }) => (before.clone(), after.clone()),
            // Nothing to expire: nothing committed.
            _ => return Ok(ExpireReport::default()),
        }
    };
    let kept: HashSet<i64> = after
        .metadata
        .snapshots()
        .map(|snapshot| snapshot.snapshot_id())
        .collect();
    let expired: Vec<_> = before
        .metadata
        .snapshots()
        .filter(|snapshot| !kept.contains(&snapshot.snapshot_id()))
        .cloned()
        .collect();
    let mut report = ExpireReport {
        expired_snapshots: expired.len() as u64,
        ..ExpireReport::default()
    };
    let mut reachable = Reachable::default();
    snapshot_files(&after, after.metadata.snapshots(), |path| {
        reachable.insert(path)
    })
    .await?;
    for path in statistics_paths(&after.metadata) {
        reachable.insert(&path);
    }
    let mut candidates: HashSet<String> = HashSet::new();
    snapshot_files(&before, expired.iter(), |path| {
        candidates.insert(path.to_string());
    })
    .await?;
    candidates.extend(statistics_paths(&before.metadata));
    let mut unreachable: Vec<String> = candidates
        .into_iter()
        .filter(|path| !reachable.contains(path))
        .collect();
    unreachable.sort();
    let failed = after
        .storage
        .delete_files(&unreachable)
        .await
        .map_err(|error| super::storage_error("deleting expired files", error))?;
    report.deleted_files = (unreachable.len() - failed.len()) as u64;
    if let Some((path, why)) = failed.first() {
        report.not_deleted = Some((
            failed.len() as u64,
            crate::base::redact::hide_secrets(&format!("{path}: {why}")),
        ));
    }
    Ok(report)
}

/// The statistics and partition statistics files the metadata names.
fn statistics_paths(metadata: &TableMetadata) -> Vec<String> {
    metadata
        .statistics_iter()
        .map(|file| file.statistics_path.clone())
        .chain(
            metadata
                .partition_statistics_iter()
                .map(|file| file.statistics_path.clone()),
        )
        .collect()
}

/// The table a commit applied to, and what it committed (`None` until it has).
struct Committed {
    before: LoadedTable,
    after: Option<LoadedTable>,
}

/// An iceberg `Catalog` of one table, loading and committing through icepack's `TableCatalog`:
/// what iceberg's transactions need, and nothing else (every other call is refused).
struct Committer<'a> {
    catalog: &'a dyn TableCatalog,
    identifier: TableIdent,
    runtime: iceberg::Runtime,
    /// The table as last loaded, and the commit made on it.
    base: Mutex<Option<Committed>>,
    /// Why the last commit failed, in icepack's terms.
    failure: Mutex<Option<NativeError>>,
}

impl std::fmt::Debug for Committer<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "Committer({})", self.identifier)
    }
}

impl Committer<'_> {
    async fn load(&self) -> Result<LoadedTable, NativeError> {
        let loaded = self.catalog.load().await?;
        *self.base.lock().expect("base") = Some(Committed {
            before: loaded.clone(),
            after: None,
        });
        Ok(loaded)
    }

    fn table(&self, loaded: &LoadedTable) -> Result<Table, NativeError> {
        Table::builder()
            .file_io(loaded.file_io.clone())
            .metadata_location(loaded.metadata_location.clone())
            .metadata(loaded.metadata.clone())
            .identifier(self.identifier.clone())
            .runtime(self.runtime.clone())
            .build()
            .map_err(|error| NativeError::Other(format!("the table as iceberg sees it: {error}")))
    }

    fn refused(what: &str) -> Error {
        Error::new(
            ErrorKind::FeatureUnsupported,
            format!("{what} is not what an expiry does"),
        )
    }
}

#[async_trait]
impl Catalog for Committer<'_> {
    async fn load_table(&self, table: &TableIdent) -> iceberg::Result<Table> {
        if table != &self.identifier {
            return Err(Self::refused("loading another table"));
        }
        let loaded = self.load().await.map_err(|error| {
            *self.failure.lock().expect("failure") = Some(error.clone());
            Error::new(ErrorKind::Unexpected, error.to_string())
        })?;
        self.table(&loaded)
            .map_err(|error| Error::new(ErrorKind::Unexpected, error.to_string()))
    }

    async fn update_table(&self, mut commit: TableCommit) -> iceberg::Result<Table> {
        let base = {
            let state = self.base.lock().expect("base");
            state
                .as_ref()
                .map(|committed| committed.before.clone())
                .ok_or_else(|| Self::refused("a commit before a load"))?
        };
        let change = Change {
            updates: commit.take_updates(),
            requirements: commit.take_requirements(),
        };
        if change.updates.is_empty() {
            return self
                .table(&base)
                .map_err(|error| Error::new(ErrorKind::Unexpected, error.to_string()));
        }
        match self.catalog.commit_change(&base, change).await {
            Ok(after) => {
                let table = self
                    .table(&after)
                    .map_err(|error| Error::new(ErrorKind::Unexpected, error.to_string()))?;
                *self.failure.lock().expect("failure") = None;
                *self.base.lock().expect("base") = Some(Committed {
                    before: base,
                    after: Some(after),
                });
                Ok(table)
            }
            Err(CommitError::Conflict(message)) => {
                *self.failure.lock().expect("failure") =
                    Some(NativeError::CommitConflict(message.clone()));
                // Retried by the transaction on the table reloaded.
                Err(Error::new(ErrorKind::CatalogCommitConflicts, message).with_retryable(true))
            }
            Err(CommitError::StateUnknown(message)) => {
                *self.failure.lock().expect("failure") =
                    Some(NativeError::CommitStateUnknown(message.clone()));
                Err(Error::new(ErrorKind::Unexpected, message))
            }
            Err(CommitError::Failed(error)) => {
                *self.failure.lock().expect("failure") = Some(error.clone());
                Err(Error::new(ErrorKind::Unexpected, error.to_string()))
            }
        }
    }

    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> iceberg::Result<Vec<NamespaceIdent>> {
        Err(Self::refused("listing namespaces"))
    }

    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<Namespace> {
        Err(Self::refused("creating a namespace"))
    }

    async fn get_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<Namespace> {
        Err(Self::refused("reading a namespace"))
    }

    async fn namespace_exists(&self, _namespace: &NamespaceIdent) -> iceberg::Result<bool> {
        Err(Self::refused("reading a namespace"))
    }

    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> iceberg::Result<()> {
        Err(Self::refused("changing a namespace"))
    }

    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> iceberg::Result<()> {
        Err(Self::refused("dropping a namespace"))
    }

    async fn list_tables(&self, _namespace: &NamespaceIdent) -> iceberg::Result<Vec<TableIdent>> {
        Err(Self::refused("listing tables"))
    }

    async fn create_table(
        &self,
        _namespace: &NamespaceIdent,
        _creation: TableCreation,
    ) -> iceberg::Result<Table> {
        Err(Self::refused("creating a table"))
    }

    async fn drop_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        Err(Self::refused("dropping a table"))
    }

    async fn purge_table(&self, _table: &TableIdent) -> iceberg::Result<()> {
        Err(Self::refused("purging a table"))
    }

    async fn table_exists(&self, table: &TableIdent) -> iceberg::Result<bool> {
        Ok(table == &self.identifier)
    }

    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> iceberg::Result<()> {
        Err(Self::refused("renaming a table"))
    }

    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> iceberg::Result<Table> {
        Err(Self::refused("registering a table"))
    }
}
