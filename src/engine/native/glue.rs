//! A table of an AWS Glue Data Catalog, as Iceberg's Java `GlueCatalog` keeps it: a Glue table
//! whose `Parameters` hold `table_type = ICEBERG` and `metadata_location`. Loading reads the
//! table (`GetTable`) and its metadata file; a commit writes the next metadata file beside the
//! current one and updates the Glue table (`UpdateTable`) with the new `metadata_location` and the
//! old one as `previous_metadata_location`, on the `VersionId` it read — Glue's optimistic check:
//! a concurrent update fails it with `ConcurrentModificationException`, a conflict. The Glue
//! table is read again right before the update, so a table that moved since the run's base is a
//! conflict even where a Glue server does not check versions.
//!
//! Glue's API (JSON 1.1 over HTTPS: `X-Amz-Target: AWSGlue.<Operation>`) is spoken directly,
//! signed with SigV4 (`sigv4.rs`, service `glue`): two operations do not warrant the AWS SDK's
//! Glue crate and its build. Properties, as Java names them: `glue.endpoint` (a Glue server
//! other than AWS's regional one, e.g. moto), `glue.id` (the catalog: an account id; the caller's
//! by default), `glue.skip-archive` (`true` by default, as in Java: no table version archived per
//! commit); the region is `client.region`, else the AWS chain's; credentials are the AWS chain's.

use async_trait::async_trait;
use aws_config::SdkConfig;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{StatusCode, Url};
use serde_json::{json, Map, Value};

use super::catalog::{
    merged_properties, split_table_name, Change, CommitError, LoadedTable, TableCatalog,
};
use super::jdbc::{forget_metadata, write_next_metadata};
use super::sigv4::SigV4;
use super::NativeError;
use crate::config::CatalogConfig;

/// `impl` of Iceberg's Glue catalog.
pub const GLUE_CATALOG_IMPL: &str = "org.apache.iceberg.aws.glue.GlueCatalog";

/// The fields of a Glue `Table` that its `TableInput` takes back (the others are Glue's own:
/// times, versions, who created it ...).
const TABLE_INPUT_FIELDS: [&str; 9] = [
    "Name",
    "Description",
    "Owner",
    "Retention",
    "StorageDescriptor",
    "PartitionKeys",
    "TableType",
    "Parameters",
    "TargetTable",
];

/// One table of a Glue catalog.
pub struct GlueTableCatalog {
    http: reqwest::Client,
    endpoint: Url,
    signer: SigV4,
    catalog_id: Option<String>,
    database: String,
    table: String,
    skip_archive: bool,
    file_io: FileIO,
    storage: super::storage::ObjectStorage,
}

/// A Glue table as `GetTable` answers it: its metadata location, version and `TableInput`.
struct GlueTable {
    metadata_location: String,
    version_id: Option<String>,
    input: Map<String, Value>,
}

impl GlueTableCatalog {
    pub fn connect(
        http: reqwest::Client,
        aws: &SdkConfig,
        catalog: &CatalogConfig,
        table: &str,
    ) -> Result<GlueTableCatalog, NativeError> {
        let (levels, name) = split_table_name(table)?;
        if levels.len() != 1 {
            return Err(NativeError::InvalidInput(format!(
                "a Glue table is `database.table`, not `{}`",
                table.escape_debug()
            )));
        }
        let property = |key: &str| {
            catalog
                .properties
                .get(key)
                .filter(|value| !value.is_empty())
                .cloned()
        };
        let region = property("client.region")
            .or_else(|| property("glue.region"))
            .or_else(|| aws.region().map(|region| region.to_string()))
            .ok_or_else(|| {
                NativeError::InvalidInput(
                    "a Glue catalog needs a region: client.region or AWS_REGION".to_string(),
                )
            })?;
        let endpoint = property("glue.endpoint")
            .unwrap_or_else(|| format!("https://glue.{region}.amazonaws.com"));
        let endpoint = Url::parse(&endpoint).map_err(|_| {
            NativeError::InvalidInput("the Glue catalog's `glue.endpoint` is not a URL".to_string())
        })?;
        let signing: std::collections::HashMap<String, String> = [
            ("rest.sigv4-enabled", "true".to_string()),
            ("rest.signing-region", region),
            ("rest.signing-name", "glue".to_string()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect();
        let signer = SigV4::from_properties(&signing, aws)?
            .ok_or_else(|| NativeError::Other("the Glue catalog's signer is off".to_string()))?;
        let properties = merged_properties(catalog, &Default::default());
        let (file_io, storage) = super::storage::table_storage(aws, &properties);
        Ok(GlueTableCatalog {
            http,
            endpoint,
            signer,
            catalog_id: property("glue.id"),
            database: levels[0].clone(),
            table: name,
            skip_archive: property("glue.skip-archive")
                .is_none_or(|value| !value.eq_ignore_ascii_case("false")),
            file_io,
            storage,
        })
    }

    /// One Glue operation: its answer's JSON, or why there is none.
    async fn call(&self, operation: &str, mut body: Value) -> Result<Value, GlueError> {
        if let (Some(id), Some(object)) = (&self.catalog_id, body.as_object_mut()) {
            object.insert("CatalogId".to_string(), Value::String(id.clone()));
        }
        let body = serde_json::to_vec(&body).map_err(|error| {
            GlueError::NotSent(NativeError::Other(format!(
                "cannot encode a Glue request: {error}"
            )))
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-amz-json-1.1"),
        );
        headers.insert(
            HeaderName::from_static("x-amz-target"),
            HeaderValue::from_str(&format!("AWSGlue.{operation}")).map_err(|_| {
                GlueError::NotSent(NativeError::Other("a Glue operation name".into()))
            })?,
        );
        self.signer
            .sign("POST", self.endpoint.as_str(), &mut headers, &body)
            .await
            .map_err(GlueError::NotSent)?;
        let answer = self
            .http
            .post(self.endpoint.clone())
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|error| {
                let connect = error.is_connect();
                let message = crate::base::redact::hide_secrets(&format!(
                    "Glue {operation}: {}",
                    error.without_url()
                ));
                if connect {
                    GlueError::NotSent(NativeError::CatalogUnavailable(message))
                } else {
                    GlueError::Lost(message)
                }
            })?;
        let status = answer.status();
        let bytes = answer.bytes().await.map_err(|error| {
            GlueError::Lost(format!("Glue {operation}: {}", error.without_url()))
        })?;
        if status == StatusCode::OK {
            return serde_json::from_slice(&bytes).map_err(|_| {
                GlueError::Answered(
                    status,
                    String::new(),
                    format!("Glue {operation} answered with no JSON"),
                )
            });
        }
        // `{"__type": "...#EntityNotFoundException", "Message": "..."}`
        let error: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let kind = error["__type"]
            .as_str()
            .or_else(|| error["code"].as_str())
            .unwrap_or_default();
        let kind = kind.rsplit('#').next().unwrap_or(kind).to_string();
        let message = error["Message"]
            .as_str()
            .or_else(|| error["message"].as_str())
            .unwrap_or_default();
        let detail: String = crate::base::redact::hide_secrets(&format!(
            "Glue {operation} answered {status}: {kind}: {message}"
        ))
        .chars()
        .take(400)
        .collect();
        Err(GlueError::Answered(status, kind, detail))
    }

    /// The Glue table now.
    async fn glue_table(&self) -> Result<GlueTable, NativeError> {
        let answer = self
            .call(
                "GetTable",
                json!({"DatabaseName": self.database, "Name": self.table}),
            )
            .await
            .map_err(GlueError::for_read)?;
        let table = answer["Table"].as_object().ok_or_else(|| {
            NativeError::InvalidInput("Glue GetTable answered with no Table".to_string())
        })?;
        let parameters = table
            .get("Parameters")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let is_iceberg = parameters
            .get("table_type")
            .and_then(Value::as_str)
            .is_some_and(|kind| kind.eq_ignore_ascii_case("ICEBERG"));
        if !is_iceberg {
            return Err(NativeError::InvalidInput(format!(
                "Glue table {}.{} is not an Iceberg table (no table_type = ICEBERG)",
                self.database, self.table
            )));
        }
        let metadata_location = parameters
            .get("metadata_location")
            .and_then(Value::as_str)
            .filter(|location| !location.is_empty())
            .ok_or_else(|| {
                NativeError::InvalidInput(format!(
                    "Glue table {}.{} has no metadata_location",
                    self.database, self.table
                ))
            })?
            .to_string();
        let input = table
            .iter()
            .filter(|(field, _)| TABLE_INPUT_FIELDS.contains(&field.as_str()))
            .map(|(field, value)| (field.clone(), value.clone()))
            .collect();
        Ok(GlueTable {
            metadata_location,
            version_id: table
                .get("VersionId")
                .and_then(Value::as_str)
                .map(str::to_string),
            input,
        })
    }
}

/// Why a Glue call has no answer to use.
enum GlueError {
    /// It never left: nothing happened.
    NotSent(NativeError),
    /// It may have reached Glue, and its answer was lost.
    Lost(String),
    /// Glue answered with an error: the status, the exception's name and a short message.
    Answered(StatusCode, String, String),
}

impl GlueError {
    /// The error of a read (nothing changes whether it happened or not).
    fn for_read(self) -> NativeError {
        match self {
            GlueError::NotSent(error) => error,
            GlueError::Lost(message) => NativeError::CatalogUnavailable(message),
            GlueError::Answered(status, kind, message) => {
                let unavailable = status.is_server_error()
                    || matches!(
                        kind.as_str(),
                        "ThrottlingException"
                            | "AccessDeniedException"
                            | "UnrecognizedClientException"
                    );
                if unavailable {
                    NativeError::CatalogUnavailable(message)
                } else {
                    NativeError::InvalidInput(message)
                }
            }
        }
    }
}

#[async_trait]
impl TableCatalog for GlueTableCatalog {
    async fn load(&self) -> Result<LoadedTable, NativeError> {
        let glue = self.glue_table().await?;
        let metadata = TableMetadata::read_from(&self.file_io, &glue.metadata_location)
            .await
            .map_err(|error| super::storage_error("reading the table's metadata", error))?;
        Ok(LoadedTable {
            metadata: std::sync::Arc::new(metadata),
            metadata_location: glue.metadata_location,
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
        // The Glue table as it is now: still at the base, and the version to update on.
        let current = match self.glue_table().await {
            Ok(current) => current,
            Err(error) => {
                forget_metadata(&self.file_io, &location).await;
                return Err(CommitError::Failed(error));
            }
        };
        if current.metadata_location != base.metadata_location {
            forget_metadata(&self.file_io, &location).await;
            return Err(CommitError::Conflict(
                "the Glue table's metadata_location changed since the run read it".to_string(),
            ));
        }
        let mut input = current.input.clone();
        let mut parameters = input
            .get("Parameters")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        parameters.insert(
            "metadata_location".to_string(),
            Value::String(location.clone()),
        );
        parameters.insert(
            "previous_metadata_location".to_string(),
            Value::String(base.metadata_location.clone()),
        );
        input.insert("Parameters".to_string(), Value::Object(parameters));
        let mut request = json!({
            "DatabaseName": self.database,
            "TableInput": input,
            "SkipArchive": self.skip_archive,
        });
        if let Some(version) = &current.version_id {
            request["VersionId"] = Value::String(version.clone());
        }
        match self.call("UpdateTable", request).await {
            Ok(_) => Ok(committed),
            Err(GlueError::Answered(_, kind, message))
                if kind == "ConcurrentModificationException" =>
            {
                forget_metadata(&self.file_io, &location).await;
                Err(CommitError::Conflict(message))
            }
            Err(GlueError::NotSent(error)) => {
                forget_metadata(&self.file_io, &location).await;
                Err(CommitError::Failed(error))
            }
            Err(GlueError::Answered(status, _, message)) if !status.is_server_error() => {
                forget_metadata(&self.file_io, &location).await;
                Err(CommitError::Failed(NativeError::Other(message)))
            }
            // A 5xx or a lost answer: the update may have happened. Read what Glue holds.
            Err(GlueError::Lost(message)) | Err(GlueError::Answered(_, _, message)) => {
                match self.glue_table().await {
                    Ok(now) if now.metadata_location == location => Ok(committed),
                    Ok(now) if now.metadata_location == base.metadata_location => {
                        forget_metadata(&self.file_io, &location).await;
                        Err(CommitError::Failed(NativeError::CatalogUnavailable(
                            message,
                        )))
                    }
                    Ok(_) => {
                        forget_metadata(&self.file_io, &location).await;
                        Err(CommitError::Conflict(
                            "the Glue table's metadata_location changed during the commit"
                                .to_string(),
                        ))
                    }
                    Err(_) => Err(CommitError::StateUnknown(message)),
                }
            }
        }
    }
}
