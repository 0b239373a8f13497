//! Where a table's files live, for iceberg's `FileIO`: S3 (and S3-compatible stores) through the
//! AWS SDK, on the same HTTPS client (rustls on ring) and credentials chain as icepack's SQS
//! client, and the local file system through iceberg's own storage.
//!
//! S3 settings come from the catalog section and the table's configuration, as Iceberg's
//! `S3FileIO` reads them: `s3.endpoint` (the catalog's `s3_endpoint`, which also turns on
//! path-style access), `s3.path-style-access`, `client.region` / `s3.region` (else `AWS_REGION`
//! and the SDK's chain), and `s3.access-key-id` / `s3.secret-access-key` / `s3.session-token`
//! when the catalog sets or vends them (else the SDK's default chain: environment, profile, web
//! identity, instance metadata). Secrets are never logged and never appear in an error.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_s3::config::{Credentials, RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier};
use aws_smithy_http_client::tls;
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage,
    OutputFile, Storage, StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::config::CatalogConfig;

/// Bytes buffered before a part of a multipart upload goes out (S3's minimum part is 5 MiB).
const PART_BYTES: usize = 8 * 1024 * 1024;

/// The schemes of the table locations this engine reads and writes.
pub fn supported_location(location: &str) -> bool {
    location.starts_with("s3://")
        || location.starts_with("s3a://")
        || location.starts_with("s3n://")
        || location.starts_with("file:")
        || location.starts_with('/')
}

/// The storage properties of a catalog section: its `s3_endpoint` as Iceberg's `s3.endpoint`
/// with path-style access, then its own properties (which win).
pub fn catalog_storage_properties(catalog: &CatalogConfig) -> HashMap<String, String> {
    let mut properties = HashMap::new();
    if !catalog.s3_endpoint.is_empty() {
        properties.insert("s3.endpoint".to_string(), catalog.s3_endpoint.clone());
        properties.insert("s3.path-style-access".to_string(), "true".to_string());
    }
    properties.extend(
        catalog
            .properties
            .iter()
            .map(|(key, value)| (key.clone(), value.clone())),
    );
    properties
}

/// The SDK's HTTPS client on rustls with ring, as `queue/sqs.rs` builds it for SQS.
fn https_client() -> aws_sdk_s3::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// The AWS chain (environment, profile, web identity, instance metadata) loaded once per engine.
pub async fn load_aws_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(https_client())
        .load()
        .await
}

/// The storage of a table whose storage settings are `properties`: the `FileIO` iceberg reads
/// and writes through, and the same storage for what `FileIO` does not do (listing).
pub fn table_storage(
    aws: &SdkConfig,
    properties: &HashMap<String, String>,
) -> (FileIO, ObjectStorage) {
    let storage = ObjectStorage {
        s3: Some(s3_client(aws, properties)),
    };
    let factory = ObjectStorageFactory {
        storage: storage.clone(),
    };
    (FileIOBuilder::new(Arc::new(factory)).build(), storage)
}

fn s3_client(aws: &SdkConfig, properties: &HashMap<String, String>) -> aws_sdk_s3::Client {
    let property = |key: &str| properties.get(key).filter(|value| !value.is_empty());
    let mut builder = aws_sdk_s3::config::Builder::from(aws)
        // S3-compatible stores (MinIO, moto, Ceph) do not all take the SDK's default checksums.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
    if let Some(region) = property("client.region").or_else(|| property("s3.region")) {
        builder = builder.region(Region::new(region.clone()));
    } else if aws.region().is_none() {
        builder = builder.region(Region::new("us-east-1"));
    }
    if let Some(endpoint) = property("s3.endpoint") {
        builder = builder.endpoint_url(endpoint);
    }
    if property("s3.path-style-access").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
        builder = builder.force_path_style(true);
    }
    if let (Some(key), Some(secret)) = (
        property("s3.access-key-id"),
        property("s3.secret-access-key"),
    ) {
        builder = builder.credentials_provider(Credentials::new(
            key,
            secret,
            property("s3.session-token").cloned(),
            None,
            "icepack-catalog-properties",
        ));
    }
    aws_sdk_s3::Client::from_conf(builder.build())
}

/// Builds the one storage of a `FileIO`; it never travels between processes, so its serde
/// form (iceberg's typetag registry asks for one) carries nothing and cannot be read back.
#[derive(Debug, Clone)]
pub struct ObjectStorageFactory {
    storage: ObjectStorage,
}

#[typetag::serde]
impl StorageFactory for ObjectStorageFactory {
    fn build(&self, _config: &StorageConfig) -> iceberg::Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

/// S3 objects by their `s3://` (`s3a://`, `s3n://`) paths, local files by `file:` or `/` paths.
#[derive(Debug, Clone)]
pub struct ObjectStorage {
    s3: Option<aws_sdk_s3::Client>,
}

impl ObjectStorage {
    /// Local files only.
    #[cfg(test)]
    pub fn local() -> ObjectStorage {
        ObjectStorage { s3: None }
    }
}

macro_rules! opaque_serde {
    ($name:ident) => {
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_unit_struct(stringify!($name))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
                Err(serde::de::Error::custom(concat!(
                    stringify!($name),
                    " lives in one process and is not read back"
                )))
            }
        }
    };
}

opaque_serde!(ObjectStorageFactory);
opaque_serde!(ObjectStorage);

/// Where a path points.
enum Location<'a> {
    Object { bucket: &'a str, key: &'a str },
    Local,
}

fn locate(path: &str) -> iceberg::Result<Location<'_>> {
    if let Some((bucket, key)) = crate::model::report::split_object_path(path) {
        return Ok(Location::Object { bucket, key });
    }
    if path.starts_with("file:") || path.starts_with('/') {
        return Ok(Location::Local);
    }
    Err(Error::new(
        ErrorKind::FeatureUnsupported,
        format!(
            "the native engine reads and writes S3 and local paths only, not `{}`",
            crate::base::redact::hide_secrets(path)
        ),
    ))
}

/// An SDK error with its causes, short and secret-free (the SDK prints no credentials).
fn s3_error(operation: &str, path: &str, error: impl std::error::Error) -> Error {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    Error::new(
        ErrorKind::Unexpected,
        format!("S3 {operation} of {path}: {message}"),
    )
}

impl ObjectStorage {
    fn client(&self) -> iceberg::Result<&aws_sdk_s3::Client> {
        self.s3.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::FeatureUnsupported,
                "this storage has no S3 client",
            )
        })
    }

    async fn head(&self, path: &str) -> iceberg::Result<Option<u64>> {
        let Location::Object { bucket, key } = locate(path)? else {
            unreachable!("called for object paths only")
        };
        match self
            .client()?
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(head) => Ok(Some(head.content_length().unwrap_or(0).max(0) as u64)),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            Err(error) => Err(s3_error("HeadObject", path, error)),
        }
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStorage {
    async fn exists(&self, path: &str) -> iceberg::Result<bool> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().exists(path).await,
            Location::Object { .. } => Ok(self.head(path).await?.is_some()),
        }
    }

    async fn metadata(&self, path: &str) -> iceberg::Result<FileMetadata> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().metadata(path).await,
            Location::Object { .. } => match self.head(path).await? {
                Some(size) => Ok(FileMetadata { size }),
                None => Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!("S3 object {path} does not exist"),
                )),
            },
        }
    }

    async fn read(&self, path: &str) -> iceberg::Result<Bytes> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().read(path).await,
            Location::Object { bucket, key } => {
                let object = self
                    .client()?
                    .get_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|error| s3_error("GetObject", path, error))?;
                let body = object
                    .body
                    .collect()
                    .await
                    .map_err(|error| s3_error("GetObject", path, error))?;
                Ok(body.into_bytes())
            }
        }
    }

    async fn reader(&self, path: &str) -> iceberg::Result<Box<dyn FileRead>> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().reader(path).await,
            Location::Object { bucket, key } => Ok(Box::new(ObjectRead {
                client: self.client()?.clone(),
                bucket: bucket.to_string(),
                key: key.to_string(),
                path: path.to_string(),
                kept: std::sync::Mutex::new(None),
            })),
        }
    }

    async fn write(&self, path: &str, bytes: Bytes) -> iceberg::Result<()> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().write(path, bytes).await,
            Location::Object { bucket, key } => {
                self.client()?
                    .put_object()
                    .bucket(bucket)
                    .key(key)
                    .body(ByteStream::from(bytes))
                    .send()
                    .await
                    .map_err(|error| s3_error("PutObject", path, error))?;
                Ok(())
            }
        }
    }

    async fn writer(&self, path: &str) -> iceberg::Result<Box<dyn FileWrite>> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().writer(path).await,
            Location::Object { bucket, key } => Ok(Box::new(ObjectWrite {
                client: self.client()?.clone(),
                bucket: bucket.to_string(),
                key: key.to_string(),
                path: path.to_string(),
                buffer: BytesMut::new(),
                upload: None,
                uploaded: 0,
                closed: false,
            })),
        }
    }

    async fn delete(&self, path: &str) -> iceberg::Result<()> {
        match locate(path)? {
            Location::Local => LocalFsStorage::new().delete(path).await,
            Location::Object { bucket, key } => {
                self.client()?
                    .delete_object()
                    .bucket(bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(|error| s3_error("DeleteObject", path, error))?;
                Ok(())
            }
        }
    }

    async fn delete_prefix(&self, path: &str) -> iceberg::Result<()> {
        let (bucket, prefix) = match locate(path)? {
            Location::Local => return LocalFsStorage::new().delete_prefix(path).await,
            Location::Object { bucket, key } => (bucket, key),
        };
        let prefix = if prefix.ends_with('/') {
            prefix.to_string()
        } else {
            format!("{prefix}/")
        };
        let client = self.client()?;
        let mut pages = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(&prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|error| s3_error("ListObjectsV2", path, error))?;
            let objects: Vec<ObjectIdentifier> = page
                .contents()
                .iter()
                .filter_map(|object| object.key())
                .filter_map(|key| ObjectIdentifier::builder().key(key).build().ok())
                .collect();
            if objects.is_empty() {
                continue;
            }
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|error| s3_error("DeleteObjects", path, error))?;
            client
                .delete_objects()
                .bucket(bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|error| s3_error("DeleteObjects", path, error))?;
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> iceberg::Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> iceberg::Result<InputFile> {
        locate(path)?;
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> iceberg::Result<OutputFile> {
        locate(path)?;
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Reads up to this long are kept for the reader's next reads. Iceberg's Parquet reader asks for
/// the last 512 KiB of a file to parse its footer, which is the whole of a small file; its
/// column chunks are then served from memory instead of a second GetObject each. A run of small
/// files makes one request per input instead of two; a larger file's column chunks lie outside
/// what was kept and are fetched as before.
const KEPT_READ_BYTES: usize = 1024 * 1024;

/// Range reads of one object (Parquet footers and column chunks).
struct ObjectRead {
    client: aws_sdk_s3::Client,
    bucket: String,
    key: String,
    path: String,
    /// The last read of at most [`KEPT_READ_BYTES`]: its first offset and its bytes.
    kept: std::sync::Mutex<Option<(u64, Bytes)>>,
}

impl ObjectRead {
    /// `range`, when it lies inside the bytes kept from an earlier read.
    fn kept(&self, range: &Range<u64>) -> Option<Bytes> {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (start, bytes) = kept.as_ref()?;
        let end = start + bytes.len() as u64;
        (range.start >= *start && range.end <= end)
            .then(|| bytes.slice((range.start - start) as usize..(range.end - start) as usize))
    }
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> iceberg::Result<Bytes> {
        if range.start >= range.end {
            return Ok(Bytes::new());
        }
        if let Some(bytes) = self.kept(&range) {
            return Ok(bytes);
        }
        let object = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(|error| s3_error("GetObject", &self.path, error))?;
        let body = object
            .body
            .collect()
            .await
            .map_err(|error| s3_error("GetObject", &self.path, error))?
            .into_bytes();
        if body.len() as u64 != range.end - range.start {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "S3 GetObject of {} returned {} bytes for a range of {}",
                    self.path,
                    body.len(),
                    range.end - range.start
                ),
            ));
        }
        if body.len() <= KEPT_READ_BYTES {
            *self
                .kept
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) =
                Some((range.start, body.clone()));
        }
        Ok(body)
    }
}

/// A write of one object: one PutObject when it stays under a part, else a multipart upload
/// (aborted when a part or the completion fails; an upload abandoned by a crash is left to the
/// bucket's lifecycle rule for incomplete uploads).
struct ObjectWrite {
    client: aws_sdk_s3::Client,
    bucket: String,
    key: String,
    path: String,
    buffer: BytesMut,
    upload: Option<(String, Vec<CompletedPart>)>,
    /// Bytes in the parts uploaded so far.
    uploaded: u64,
    closed: bool,
}

impl ObjectWrite {
    async fn upload_part(&mut self, body: Bytes) -> iceberg::Result<()> {
        if self.upload.is_none() {
            let created = self
                .client
                .create_multipart_upload()
                .bucket(&self.bucket)
                .key(&self.key)
                .send()
                .await
                .map_err(|error| s3_error("CreateMultipartUpload", &self.path, error))?;
            let id = created.upload_id().unwrap_or_default().to_string();
            self.upload = Some((id, Vec::new()));
        }
        let (id, parts) = self.upload.as_ref().expect("just created");
        let number = parts.len() as i32 + 1;
        let length = body.len() as u64;
        let result = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(&self.key)
            .upload_id(id)
            .part_number(number)
            .body(ByteStream::from(body))
            .send()
            .await;
        match result {
            Ok(part) => {
                let completed = CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(part.e_tag().map(str::to_string))
                    .build();
                self.upload.as_mut().expect("started").1.push(completed);
                self.uploaded += length;
                Ok(())
            }
            Err(error) => {
                self.abort().await;
                Err(s3_error("UploadPart", &self.path, error))
            }
        }
    }

    async fn abort(&mut self) {
        if let Some((id, _)) = self.upload.take() {
            let _ = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(&self.key)
                .upload_id(id)
                .send()
                .await;
        }
    }
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bytes: Bytes) -> iceberg::Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("{} is already closed", self.path),
            ));
        }
        self.buffer.extend_from_slice(&bytes);
        while self.buffer.len() >= PART_BYTES {
            let part = self.buffer.split_to(PART_BYTES).freeze();
            self.upload_part(part).await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> iceberg::Result<()> {
        if self.closed {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("{} is already closed", self.path),
            ));
        }
        self.closed = true;
        let rest = std::mem::take(&mut self.buffer).freeze();
        if self.upload.is_none() {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(&self.key)
                .body(ByteStream::from(rest))
                .send()
                .await
                .map_err(|error| s3_error("PutObject", &self.path, error))?;
            return Ok(());
        }
        if !rest.is_empty() {
            self.upload_part(rest).await?;
        }
        let (id, parts) = self.upload.clone().expect("started");
        let completed = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(&self.key)
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await;
        match completed {
            Ok(_) => {
                self.upload = None;
                Ok(())
            }
            Err(error) => {
                // Some S3-compatible stores (moto among them) complete the upload and answer
                // with a body the SDK cannot parse: the object, whole, is the answer that counts.
                let head = self
                    .client
                    .head_object()
                    .bucket(&self.bucket)
                    .key(&self.key)
                    .send()
                    .await;
                if let Ok(head) = head {
                    if head.content_length() == Some(self.uploaded as i64) {
                        self.upload = None;
                        return Ok(());
                    }
                }
                self.abort().await;
                Err(s3_error("CompleteMultipartUpload", &self.path, error))
            }
        }
    }
}

mod listing;
#[cfg(test)]
mod tests;

pub use listing::ListedFile;
