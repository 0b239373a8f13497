//! A table of Iceberg's JDBC catalog (`JdbcCatalog`, the tables Spark and PyIceberg share):
//! `iceberg_tables(catalog_name, table_namespace, table_name, metadata_location,
//! previous_metadata_location)`, on SQLite or Postgres. Loading reads the row's
//! `metadata_location`; a commit writes the next metadata file (`NNNNN-uuid.metadata.json`
//! beside the current one) and swaps `metadata_location` only if it is still the base's
//! (compare-and-swap: no row updated is a conflict). The SQL is icepack's own, over sqlx:
//! iceberg-catalog-sql's `update_table` takes a `TableCommit` that only iceberg's crate-private
//! transaction code can build, and its connect creates tables in the catalog database.
//!
//! The JDBC URI and the `jdbc.user`, `jdbc.password` and `jdbc.busy_timeout` properties are read
//! as Java's driver reads them. The password never reaches a log or an error.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::MetadataLocation;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::catalog::{
    merged_properties, split_table_name, CatalogKind, Change, CommitError, LoadedTable,
    TableCatalog,
};
use super::NativeError;
use crate::config::CatalogConfig;

enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// One table of a JDBC catalog.
pub struct JdbcTableCatalog {
    pool: Pool,
    catalog_name: String,
    namespace: String,
    table: String,
    file_io: FileIO,
    storage: super::storage::ObjectStorage,
}

const SELECT_SQLITE: &str = "SELECT metadata_location FROM iceberg_tables \
     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?";
const SELECT_POSTGRES: &str = "SELECT metadata_location FROM iceberg_tables \
     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3";
const SWAP_SQLITE: &str =
    "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
     WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?";
const SWAP_POSTGRES: &str = "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
     WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 AND metadata_location = $6";

/// The SQLite file of `jdbc:sqlite:PATH` (`file:` prefix and `?options` dropped).
pub fn sqlite_path(uri: &str) -> Result<String, NativeError> {
    let rest = uri
        .strip_prefix("jdbc:sqlite:")
        .ok_or_else(|| NativeError::InvalidInput("not a jdbc:sqlite: URI".to_string()))?;
    let rest = rest.strip_prefix("file:").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" {
        return Err(NativeError::InvalidInput(
            "the JDBC catalog's SQLite URI names no database file".to_string(),
        ));
    }
    Ok(path.to_string())
}

/// `jdbc:postgresql://host:port/db?params` as sqlx's `postgres://` URL.
pub fn postgres_url(uri: &str) -> Result<String, NativeError> {
    let rest = uri
        .strip_prefix("jdbc:postgresql:")
        .ok_or_else(|| NativeError::InvalidInput("not a jdbc:postgresql: URI".to_string()))?;
    let rest = rest.strip_prefix("//").ok_or_else(|| {
        NativeError::InvalidInput(
            "the JDBC catalog's Postgres URI must be jdbc:postgresql://host[:port]/database"
                .to_string(),
        )
    })?;
    Ok(format!("postgres://{rest}"))
}

fn database_error(what: &str, error: sqlx::Error) -> NativeError {
    NativeError::CatalogUnavailable(crate::base::redact::hide_secrets(&format!(
        "the JDBC catalog's database ({what}): {error}"
    )))
}

impl JdbcTableCatalog {
    pub async fn connect(
        kind: CatalogKind,
        aws: &SdkConfig,
        catalog_name: &str,
        catalog: &CatalogConfig,
        table: &str,
    ) -> Result<JdbcTableCatalog, NativeError> {
        let (levels, name) = split_table_name(table)?;
        let property = |key: &str| {
            catalog
                .properties
                .get(key)
                .filter(|value| !value.is_empty())
        };
        let pool = match kind {
            CatalogKind::JdbcSqlite => {
                let busy_millis = property("jdbc.busy_timeout")
                    .and_then(|value| value.parse::<u64>().ok())
                    .unwrap_or(10_000);
                let options = SqliteConnectOptions::new()
                    .filename(sqlite_path(&catalog.uri)?)
                    .create_if_missing(false)
                    .busy_timeout(Duration::from_millis(busy_millis));
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(30))
                    .connect_with(options)
                    .await
                    .map_err(|error| database_error("connect", error))?;
                Pool::Sqlite(pool)
            }
            CatalogKind::JdbcPostgres => {
                let mut options = PgConnectOptions::from_str(&postgres_url(&catalog.uri)?)
                    .map_err(|_| {
                        NativeError::InvalidInput(
                            "the JDBC catalog's Postgres URI is not valid".to_string(),
                        )
                    })?;
                if let Some(user) = property("jdbc.user") {
                    options = options.username(user);
                }
                if let Some(password) = property("jdbc.password") {
                    options = options.password(password);
                }
                let pool = PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(Duration::from_secs(30))
                    .connect_with(options)
                    .await
                    .map_err(|error| database_error("connect", error))?;
                Pool::Postgres(pool)
            }
            CatalogKind::Rest | CatalogKind::Glue => {
                unreachable!("a REST or Glue catalog is not a JDBC one")
            }
        };
        let properties = merged_properties(catalog, &Default::default());
        let (file_io, storage) = super::storage::table_storage(aws, &properties);
        Ok(JdbcTableCatalog {
            pool,
            catalog_name: catalog_name.to_string(),
            namespace: levels.join("."),
            table: name,
            file_io,
            storage,
        })
    }

    /// The row's `metadata_location`, `None` when the table is not in the catalog.
    async fn current_location(&self) -> Result<Option<String>, NativeError> {
        let row: Option<(Option<String>,)> = match &self.pool {
            Pool::Sqlite(pool) => {
                sqlx::query_as(SELECT_SQLITE)
                    .bind(&self.catalog_name)
                    .bind(&self.namespace)
                    .bind(&self.table)
                    .fetch_optional(pool)
                    .await
            }
            Pool::Postgres(pool) => {
                sqlx::query_as(SELECT_POSTGRES)
                    .bind(&self.catalog_name)
                    .bind(&self.namespace)
                    .bind(&self.table)
                    .fetch_optional(pool)
                    .await
            }
        }
        .map_err(|error| database_error("select", error))?;
        Ok(row.and_then(|(location,)| location))
    }

    /// Compare-and-swap of the row's `metadata_location`: the rows updated.
    async fn swap(&self, old: &str, new: &str) -> Result<u64, sqlx::Error> {
        Ok(match &self.pool {
            Pool::Sqlite(pool) => sqlx::query(SWAP_SQLITE)
                .bind(new)
                .bind(old)
                .bind(&self.catalog_name)
                .bind(&self.namespace)
                .bind(&self.table)
                .bind(old)
                .execute(pool)
                .await?
                .rows_affected(),
            Pool::Postgres(pool) => sqlx::query(SWAP_POSTGRES)
                .bind(new)
                .bind(old)
                .bind(&self.catalog_name)
                .bind(&self.namespace)
                .bind(&self.table)
                .bind(old)
                .execute(pool)
                .await?
                .rows_affected(),
        })
    }
}

/// Deletes a metadata file that never became the table's (best effort).
pub async fn forget_metadata(file_io: &FileIO, location: &str) {
    if let Err(error) = file_io.delete(location).await {
        tracing::warn!(file = %location, error = %error, "could not delete an uncommitted metadata file");
    }
}

/// The first half of a commit to a catalog that points at metadata files (JDBC, Glue): the next
/// metadata file of `base` with `change` applied ([`next_metadata`]), written beside the current
/// one; the table as it is once the catalog points at it. Moving the pointer is the catalog's.
pub async fn write_next_metadata(
    base: &LoadedTable,
    change: Change,
) -> Result<LoadedTable, CommitError> {
    let (metadata, location) = next_metadata(base, change).map_err(|error| match error {
        NativeError::CommitConflict(message) => CommitError::Conflict(message),
        other => CommitError::Failed(other),
    })?;
    metadata
        .write_to(&base.file_io, &location)
        .await
        .map_err(|error| {
            CommitError::Failed(super::storage_error(
                "writing the next metadata file",
                error,
            ))
        })?;
    Ok(LoadedTable {
        metadata: std::sync::Arc::new(metadata),
        metadata_location: location.to_string(),
        file_io: base.file_io.clone(),
        storage: base.storage.clone(),
    })
}

/// The table's next metadata with `change` applied to `base` (its requirements checked first),
/// and where it goes: the next version's file under `metadata/`, as Java's catalogs name it.
pub fn next_metadata(
    base: &LoadedTable,
    change: Change,
) -> Result<(TableMetadata, MetadataLocation), NativeError> {
    for requirement in &change.requirements {
        requirement.check(Some(&base.metadata)).map_err(|error| {
            NativeError::CommitConflict(format!("the table changed since the run read it: {error}"))
        })?;
    }
    let mut builder = TableMetadataBuilder::new_from_metadata(
        (*base.metadata).clone(),
        Some(base.metadata_location.clone()),
    );
    for update in change.updates {
        builder = update.apply(builder).map_err(|error| {
            NativeError::Other(format!("cannot build the table's next metadata: {error}"))
        })?;
    }
    let metadata = builder
        .build()
        .map_err(|error| {
            NativeError::Other(format!("cannot build the table's next metadata: {error}"))
        })?
        .metadata;
    let location = MetadataLocation::from_str(&base.metadata_location)
        .map_err(|_| {
            NativeError::Unsupported(format!(
                "the table's metadata file {} is not named NNNNN-uuid.metadata.json under metadata/",
                base.metadata_location
            ))
        })?
        .with_next_version()
        .with_new_metadata(&metadata);
    Ok((metadata, location))
}

#[async_trait]
impl TableCatalog for JdbcTableCatalog {
    async fn load(&self) -> Result<LoadedTable, NativeError> {
        let location = self.current_location().await?.ok_or_else(|| {
            NativeError::InvalidInput(format!(
                "table {}.{} is not in the JDBC catalog {}",
                self.namespace, self.table, self.catalog_name
            ))
        })?;
        let metadata = TableMetadata::read_from(&self.file_io, &location)
            .await
            .map_err(|error| super::storage_error("reading the table's metadata", error))?;
        Ok(LoadedTable {
            metadata: std::sync::Arc::new(metadata),
            metadata_location: location,
            file_io: self.file_io.clone(),
            storage: self.storage.clone(),
        })
    }

    async fn commit_change(
        &self,
        base: &LoadedTable,
        change: Change,
    ) -> Result<LoadedTable, CommitError> {
        let committed = write_next_metadata(base, change).await?;
        let location = committed.metadata_location.clone();
        match self.swap(&base.metadata_location, &location).await {
            Ok(1) => Ok(committed),
            Ok(0) => {
                forget_metadata(&self.file_io, &location).await;
                Err(CommitError::Conflict(
                    "the table's metadata_location changed since the run read it".to_string(),
                ))
            }
            Ok(rows) => Err(CommitError::StateUnknown(format!(
                "the JDBC catalog updated {rows} rows for one table"
            ))),
            Err(error) => {
                // The statement may have reached the database: read what it holds now.
                match self.current_location().await {
                    Ok(Some(now)) if now == location => Ok(committed),
                    Ok(Some(now)) if now == base.metadata_location => {
                        forget_metadata(&self.file_io, &location).await;
                        Err(CommitError::Failed(database_error("update", error)))
                    }
                    Ok(_) => {
                        forget_metadata(&self.file_io, &location).await;
                        Err(CommitError::Conflict(
                            "the table's metadata_location changed since the run read it"
                                .to_string(),
                        ))
                    }
                    Err(_) => Err(CommitError::StateUnknown(format!(
                        "the JDBC catalog's update failed and its outcome cannot be read: {}",
                        crate::base::redact::hide_secrets(&error.to_string())
                    ))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdbc_uris_are_read_as_javas_driver_reads_them() {
        assert_eq!(sqlite_path("jdbc:sqlite:/tmp/c.db").unwrap(), "/tmp/c.db");
        assert_eq!(
            sqlite_path("jdbc:sqlite:file:/tmp/c.db?mode=rw").unwrap(),
            "/tmp/c.db"
        );
        assert!(sqlite_path("jdbc:sqlite::memory:").is_err());
        assert!(sqlite_path("jdbc:sqlite:").is_err());
        assert_eq!(
            postgres_url("jdbc:postgresql://db:5432/iceberg?sslmode=require").unwrap(),
            "postgres://db:5432/iceberg?sslmode=require"
        );
        assert!(postgres_url("jdbc:postgresql:iceberg").is_err());
    }

    #[test]
    fn the_next_metadata_is_the_next_version_with_the_snapshot_on_main() {
        let metadata: TableMetadata =
            serde_json::from_str(super::super::testdata::METADATA_V2).unwrap();
        let base = LoadedTable {
            metadata: std::sync::Arc::new(metadata.clone()),
            metadata_location:
                "s3://lake/t/metadata/00003-8f3c8b4e-3a9c-4f57-9c1e-3c3a7a2f1b10.metadata.json"
                    .to_string(),
            file_io: iceberg::io::FileIO::new_with_memory(),
            storage: crate::engine::native::storage::ObjectStorage::local(),
        };
        let parent = metadata.current_snapshot_id().unwrap();
        let snapshot = iceberg::spec::Snapshot::builder()
            .with_snapshot_id(42)
            .with_parent_snapshot_id(Some(parent))
            .with_sequence_number(metadata.last_sequence_number() + 1)
            .with_timestamp_ms(metadata.last_updated_ms() + 1)
            .with_manifest_list("s3://lake/t/metadata/snap-42.avro")
            .with_summary(iceberg::spec::Summary {
                operation: iceberg::spec::Operation::Replace,
                additional_properties: Default::default(),
            })
            .build();
        let (next, location) =
            next_metadata(&base, Change::snapshot(&base.metadata, snapshot).unwrap()).unwrap();
        let location = location.to_string();
        assert!(
            location.starts_with("s3://lake/t/metadata/00004-"),
            "{location}"
        );
        assert!(location.ends_with(".metadata.json"), "{location}");
        assert_eq!(next.current_snapshot_id(), Some(42));
        assert_eq!(
            next.last_sequence_number(),
            metadata.last_sequence_number() + 1
        );
        assert_eq!(
            next.metadata_log().last().unwrap().metadata_file,
            base.metadata_location,
            "the base is remembered in the metadata log"
        );
        let stale = iceberg::spec::Snapshot::builder()
            .with_snapshot_id(43)
            .with_parent_snapshot_id(Some(parent))
            .with_sequence_number(metadata.last_sequence_number())
            .with_timestamp_ms(metadata.last_updated_ms() + 1)
            .with_manifest_list("s3://lake/t/metadata/snap-43.avro")
            .with_summary(iceberg::spec::Summary {
                operation: iceberg::spec::Operation::Replace,
                additional_properties: Default::default(),
            })
            .build();
        assert!(
            Change::snapshot(&base.metadata, stale).is_err(),
            "a sequence number already used"
        );
        let odd = LoadedTable {
            metadata_location: "s3://lake/t/metadata/v3.metadata.json".to_string(),
            ..base
        };
        let snapshot = iceberg::spec::Snapshot::builder()
            .with_snapshot_id(44)
            .with_parent_snapshot_id(Some(parent))
            .with_sequence_number(metadata.last_sequence_number() + 1)
            .with_timestamp_ms(metadata.last_updated_ms() + 1)
            .with_manifest_list("s3://lake/t/metadata/snap-44.avro")
            .with_summary(iceberg::spec::Summary {
                operation: iceberg::spec::Operation::Replace,
                additional_properties: Default::default(),
            })
            .build();
        assert!(matches!(
            next_metadata(&odd, Change::snapshot(&odd.metadata, snapshot).unwrap()),
            Err(NativeError::Unsupported(_))
        ));
    }
}
