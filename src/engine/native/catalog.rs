//! The catalogs the native engine commits to, behind one narrow trait: load a table's current
//! metadata, and commit a new snapshot on top of a given one atomically (a conflict when the
//! table moved meanwhile). An Iceberg REST catalog (`rest.rs`, SigV4-signed too), Iceberg's JDBC
//! catalog tables on SQLite or Postgres (`jdbc.rs`) and AWS Glue (`glue.rs`); any other `impl` is
//! refused with the reason.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{Snapshot, TableMetadata, TableMetadataBuilder, MAIN_BRANCH};
use iceberg::{TableRequirement, TableUpdate};

use super::NativeError;
use crate::config::CatalogConfig;

/// `impl` of an Iceberg REST catalog.
pub const REST_CATALOG_IMPL: &str = "org.apache.iceberg.rest.RESTCatalog";
/// `impl` of Iceberg's JDBC catalog.
pub const JDBC_CATALOG_IMPL: &str = "org.apache.iceberg.jdbc.JdbcCatalog";

/// The catalogs the native engine can commit to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    Rest,
    /// Iceberg's `JdbcCatalog` tables on SQLite.
    JdbcSqlite,
    /// Iceberg's `JdbcCatalog` tables on Postgres.
    JdbcPostgres,
    /// Iceberg's `GlueCatalog`: an AWS Glue Data Catalog (`glue.rs`).
    Glue,
}

/// Which kind of catalog a section is, or why the native engine cannot commit to it (for
/// `check-config`, and before any run).
pub fn catalog_kind(catalog: &CatalogConfig) -> Result<CatalogKind, String> {
    let warehouse_ok = super::storage::supported_location(&catalog.warehouse);
    match catalog.catalog_impl.as_str() {
        REST_CATALOG_IMPL => {
            if catalog.uri.is_empty() {
                return Err("a REST catalog needs `uri`".to_string());
            }
            Ok(CatalogKind::Rest)
        }
        JDBC_CATALOG_IMPL => {
            let kind = if catalog.uri.starts_with("jdbc:sqlite:") {
                CatalogKind::JdbcSqlite
            } else if catalog.uri.starts_with("jdbc:postgresql:") {
                CatalogKind::JdbcPostgres
            } else {
                return Err(format!(
                    "the native engine's JDBC catalog speaks SQLite (`jdbc:sqlite:`) and Postgres (`jdbc:postgresql:`), not `{}`",
                    jdbc_scheme(&catalog.uri)
                ));
            };
            Ok(kind)
        }
        super::glue::GLUE_CATALOG_IMPL => Ok(CatalogKind::Glue),
        "org.apache.iceberg.hive.HiveCatalog" => Err(
            "a Hive metastore catalog cannot be committed to without a Java client: use Spark".to_string(),
        ),
        "org.apache.iceberg.hadoop.HadoopCatalog" => Err(
            "a Hadoop catalog commits by file-system rename, which the native engine does not do: use Spark"
                .to_string(),
        ),
        other => Err(format!(
            "the native engine commits to REST ({REST_CATALOG_IMPL}), JDBC ({JDBC_CATALOG_IMPL}) and Glue catalogs, not {other}"
        )),
    }
    .and_then(|kind| {
        // A REST or Glue table's location is the catalog's to say (checked when it is loaded).
        if matches!(kind, CatalogKind::Rest | CatalogKind::Glue) || warehouse_ok {
            Ok(kind)
        } else {
            Err(unsupported_warehouse(&catalog.warehouse))
        }
    })
}

fn jdbc_scheme(uri: &str) -> String {
    uri.split(':').take(2).collect::<Vec<_>>().join(":")
}

fn unsupported_warehouse(warehouse: &str) -> String {
    format!(
        "the native engine reads and writes S3 (`s3://`) and local (`file:`) warehouses, not `{}`",
        crate::base::redact::hide_secrets(warehouse)
            .split("://")
            .next()
            .unwrap_or_default()
    )
}

/// A table as the catalog has it now.
#[derive(Debug, Clone)]
pub struct LoadedTable {
    pub metadata: Arc<TableMetadata>,
    pub metadata_location: String,
    pub file_io: FileIO,
    /// The same storage as `file_io`, for listing.
    pub storage: super::storage::ObjectStorage,
}

/// Why a commit did not happen, as its retry needs to know.
#[derive(Debug)]
pub enum CommitError {
    /// The table changed since the base: reload, validate, try again.
    Conflict(String),
    /// The commit may or may not have happened: decide from the metadata, never retry blindly.
    StateUnknown(String),
    /// It did not happen, and another attempt would not help.
    Failed(NativeError),
}

/// A change to a table's metadata, as Iceberg's REST protocol carries it: the updates, and what
/// must hold of the table for them to apply.
#[derive(Debug, Clone)]
pub struct Change {
    pub updates: Vec<TableUpdate>,
    pub requirements: Vec<TableRequirement>,
}

impl Change {
    /// `snapshot` (whose parent is `base`'s current snapshot) as the current snapshot of
    /// `main`, if `main` is still where `base` has it.
    pub fn snapshot(base: &TableMetadata, snapshot: Snapshot) -> Result<Change, NativeError> {
        let parent = base
            .snapshot_for_ref(MAIN_BRANCH)
            .map(|snapshot| snapshot.snapshot_id());
        let built = TableMetadataBuilder::new_from_metadata(base.clone(), None)
            .set_branch_snapshot(snapshot, MAIN_BRANCH)
            .and_then(|builder| builder.build())
            .map_err(|error| NativeError::Other(format!("cannot build the commit: {error}")))?;
        Ok(Change {
            updates: built.changes,
            requirements: vec![
                TableRequirement::UuidMatch { uuid: base.uuid() },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: MAIN_BRANCH.to_string(),
                    snapshot_id: parent,
                },
            ],
        })
    }
}

/// One table of one catalog.
#[async_trait]
pub trait TableCatalog: Send + Sync {
    /// The table's current metadata and where it is stored.
    async fn load(&self) -> Result<LoadedTable, NativeError>;

    /// Applies `change` to the table if and only if its requirements hold and the table is still
    /// at `base` (a conflict otherwise).
    async fn commit_change(
        &self,
        base: &LoadedTable,
        change: Change,
    ) -> Result<LoadedTable, CommitError>;

    /// Makes `snapshot` (whose parent is `base`'s current snapshot) the table's current snapshot
    /// on `main`, if and only if the table is still at `base`.
    async fn commit(
        &self,
        base: &LoadedTable,
        snapshot: Snapshot,
    ) -> Result<LoadedTable, CommitError> {
        let change = Change::snapshot(&base.metadata, snapshot).map_err(CommitError::Failed)?;
        self.commit_change(base, change).await
    }
}

/// `namespace.table` (the last dot separates the table; namespaces may have levels).
pub fn split_table_name(table: &str) -> Result<(Vec<String>, String), NativeError> {
    let (namespace, name) = table.rsplit_once('.').ok_or_else(|| {
        NativeError::InvalidInput(format!(
            "table `{}` is not namespace.table",
            table.escape_debug()
        ))
    })?;
    let levels: Vec<String> = namespace.split('.').map(str::to_string).collect();
    if name.is_empty() || levels.iter().any(String::is_empty) {
        return Err(NativeError::InvalidInput(format!(
            "table `{}` is not namespace.table",
            table.escape_debug()
        )));
    }
    Ok((levels, name.to_string()))
}

/// The storage properties of a loaded table: the catalog's, then what the catalog vends.
pub fn merged_properties(
    catalog: &CatalogConfig,
    vended: &HashMap<String, String>,
) -> HashMap<String, String> {
    let mut properties = super::storage::catalog_storage_properties(catalog);
    properties.extend(
        vended
            .iter()
            .map(|(key, value)| (key.clone(), value.clone())),
    );
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(catalog_impl: &str, uri: &str, warehouse: &str) -> CatalogConfig {
        CatalogConfig {
            catalog_impl: catalog_impl.to_string(),
            uri: uri.to_string(),
            warehouse: warehouse.to_string(),
            io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
            s3_endpoint: String::new(),
            properties: Default::default(),
        }
    }

    #[test]
    fn rest_and_jdbc_catalogs_are_served_others_refused_with_the_reason() {
        assert_eq!(
            catalog_kind(&catalog(REST_CATALOG_IMPL, "http://rest:8181", "s3://w")),
            Ok(CatalogKind::Rest)
        );
        assert_eq!(
            catalog_kind(&catalog(
                REST_CATALOG_IMPL,
                "http://rest:8181",
                "gs-warehouse"
            )),
            Ok(CatalogKind::Rest),
            "a REST warehouse may be a name: the table's location decides"
        );
        assert_eq!(
            catalog_kind(&catalog(JDBC_CATALOG_IMPL, "jdbc:sqlite:/c.db", "s3://w")),
            Ok(CatalogKind::JdbcSqlite)
        );
        assert_eq!(
            catalog_kind(&catalog(
                JDBC_CATALOG_IMPL,
                "jdbc:postgresql://db:5432/iceberg",
                "file:///w"
            )),
            Ok(CatalogKind::JdbcPostgres)
        );
        let mysql = catalog_kind(&catalog(
            JDBC_CATALOG_IMPL,
            "jdbc:mysql://user:pw@db/iceberg",
            "s3://w",
        ))
        .unwrap_err();
        assert!(mysql.contains("jdbc:mysql"), "{mysql}");
        assert!(!mysql.contains("pw"), "{mysql}");
        let gcs =
            catalog_kind(&catalog(JDBC_CATALOG_IMPL, "jdbc:sqlite:/c.db", "gs://w")).unwrap_err();
        assert!(gcs.contains("gs"), "{gcs}");
        assert_eq!(
            catalog_kind(&catalog(super::super::glue::GLUE_CATALOG_IMPL, "", "")),
            Ok(CatalogKind::Glue)
        );
        for refused in [
            "org.apache.iceberg.hive.HiveCatalog",
            "org.apache.iceberg.hadoop.HadoopCatalog",
            "org.apache.iceberg.nessie.NessieCatalog",
        ] {
            assert!(
                catalog_kind(&catalog(refused, "", "s3://w")).is_err(),
                "{refused}"
            );
        }
        let mut signed = catalog(REST_CATALOG_IMPL, "https://glue", "s3://w");
        signed
            .properties
            .insert("rest.sigv4-enabled".to_string(), "true".to_string());
        assert_eq!(catalog_kind(&signed), Ok(CatalogKind::Rest), "SigV4 signed");
    }

    #[test]
    fn table_names_split_at_the_last_dot() {
        assert_eq!(
            split_table_name("analytics.events").unwrap(),
            (vec!["analytics".to_string()], "events".to_string())
        );
        assert_eq!(
            split_table_name("a.b.events").unwrap(),
            (vec!["a".to_string(), "b".to_string()], "events".to_string())
        );
        for bad in ["events", ".events", "a.", "a..b"] {
            assert!(split_table_name(bad).is_err(), "{bad}");
        }
    }
}
