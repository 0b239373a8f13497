//! Reads one group's data files and writes their rows into new Parquet data files.
//!
//! - **Read** with iceberg's `ArrowReader`, projected on the table's *current* schema by field id:
//!   a column added after a file was written comes back null, a renamed one by its id, identity
//!   partition columns from the file's partition values (the table's name mapping for files
//!   written without field ids).
//! - **Write** with the current schema and the table's current partition spec: a group of one
//!   partition of that spec keeps its partition; a group of older specs' files
//!   ([`FileGroup::repartition`]) has each row written to the partition its values give (a
//!   writer per partition, iceberg's `RecordBatchPartitionSplitter`), as Java's
//!   `rewrite_data_files` writes them (docs/compaction.md, "Evolved partition specs"). Paths are the
//!   partition's path as Java writers encode it under the table's data location
//!   (`write.data.path`, else `{location}/data`); file names carry the run id. The object-store
//!   layout (`write.object-storage.enabled`) is not reproduced: outputs go under the plain paths.
//! - **Sized** as Java's writers size files: a group's rows go into files of the target size
//!   measured on the file being written (bytes flushed plus the Parquet writer's estimate of the
//!   row group in memory), filled up to it, the last file holding what is left
//!   ([`TargetSizedWriter`]).
//! - **Write properties** from the table: `write.parquet.compression-codec` and `-level`,
//!   `row-group-size-bytes`, `page-size-bytes`, `page-row-limit`, `dict-size-bytes` and
//!   `bloom-filter-enabled.column.*` / `bloom-filter-fpp.column.*`; column metrics (sizes,
//!   value, null and NaN counts, bounds) as iceberg's writer computes them (the
//!   `write.metadata.metrics.*` modes are not implemented there: full metrics for every column).
//! - **Deletes**: the position and equality deletes that apply to an input (by
//!   [`delete_applies`]: an equality delete to files of its partition with a lower data sequence
//!   number) are applied as it is read (iceberg's reader drops the positions they list and the
//!   rows their values match): the outputs hold the live rows only, so the delete files that
//!   applied to the inputs no longer apply to them.
//! - **Checked**: the rows written must equal the rows read, and those the inputs' record counts
//!   less at most the rows of the position deletes applied (any number where an equality delete
//!   applied), or nothing is committed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use iceberg::arrow::{ArrowReaderBuilder, RecordBatchPartitionSplitter};
use iceberg::io::FileIO;
use iceberg::scan::{FileScanTask, FileScanTaskDeleteFile};
use iceberg::spec::{DataContentType, DataFile, DataFileFormat, NameMapping, PartitionKey, Struct};
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, FileNameGenerator, LocationGenerator,
};
use iceberg::writer::file_writer::{
    FileWriter, FileWriterBuilder, ParquetWriter, ParquetWriterBuilder,
};
use iceberg::writer::CurrentFileStatus;
use parquet::basic::{BrotliLevel, Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;

use super::plan::{delete_applies, partition_path, DeleteFileFacts, DeleteKind, FileGroup};
use super::table::{partition_values, TableState};
use super::NativeError;

/// Rows per batch read.
const BATCH_ROWS: usize = 8192;

/// Input bytes a group's concurrent reads may span: small inputs are read many at a time (a
/// request to S3 costs tens of milliseconds, whatever the size of a small file), large ones at
/// the engine's floor, so memory stays bounded by this or by the floor's files.
const READ_BUDGET_BYTES: u64 = 64 * 1024 * 1024;
/// Inputs read at once, at most.
const MAX_READ_CONCURRENCY: usize = 16;

/// How many of a group's inputs are read at once: as many as fit [`READ_BUDGET_BYTES`] at the
/// size of the largest, between `floor` and [`MAX_READ_CONCURRENCY`].
pub fn read_concurrency(sizes: impl Iterator<Item = u64>, floor: usize) -> usize {
    let floor = floor.max(1);
    let largest = sizes.max().unwrap_or(0).max(1);
    let fit = usize::try_from(READ_BUDGET_BYTES / largest).unwrap_or(usize::MAX);
    fit.clamp(floor, MAX_READ_CONCURRENCY.max(floor))
}

/// Every file path the run's writers created, committed or not: what a failure cleans up.
#[derive(Debug, Clone, Default)]
pub struct OutputLog(Arc<Mutex<Vec<String>>>);

impl OutputLog {
    pub fn paths(&self) -> Vec<String> {
        self.0.lock().expect("output log").clone()
    }

    fn record(&self, path: &str) {
        self.0.lock().expect("output log").push(path.to_string());
    }
}

/// Output paths under the data location, in Java's partition path encoding, recorded as made.
#[derive(Debug, Clone)]
struct OutputLocations {
    data_location: String,
    log: OutputLog,
}

impl LocationGenerator for OutputLocations {
    fn generate_location(&self, partition_key: Option<&PartitionKey>, file_name: &str) -> String {
        let partition = partition_key
            .filter(|key| !key.spec().is_unpartitioned())
            .and_then(|key| partition_values(key.spec(), key.schema(), key.data()))
            .map(|values| partition_path(&values))
            .filter(|path| !path.is_empty());
        let path = match partition {
            Some(partition) => format!("{}/{partition}/{file_name}", self.data_location),
            None => format!("{}/{file_name}", self.data_location),
        };
        self.log.record(&path);
        path
    }
}

/// Where data files of the table go.
pub fn data_location(properties: &HashMap<String, String>, location: &str) -> String {
    [
        "write.data.path",
        "write.object-storage.path",
        "write.folder-storage.path",
    ]
    .iter()
    .find_map(|key| properties.get(*key).filter(|path| !path.is_empty()))
    .map(|path| path.trim_end_matches('/').to_string())
    .unwrap_or_else(|| format!("{}/data", location.trim_end_matches('/')))
}

fn positive(properties: &HashMap<String, String>, key: &str) -> Result<Option<usize>, NativeError> {
    match properties.get(key) {
        None => Ok(None),
        Some(value) => match value.trim().parse::<usize>() {
            Ok(number) if number > 0 => Ok(Some(number)),
            _ => Err(NativeError::InvalidInput(format!(
                "table property {key} = `{}` is not a positive number",
                value.escape_debug()
            ))),
        },
    }
}

/// The Parquet footer's `created_by`, in the form parquet-mr parses (`<application> version
/// <semver> (build <hash>)`, PARQUET-251): a reader on parquet-mr (Spark, Trino, Hive, Flink)
/// that cannot parse it ignores the files' string and binary row-group statistics, and then
/// cannot skip row groups on a string predicate.
pub const CREATED_BY: &str = concat!("icepack version ", env!("CARGO_PKG_VERSION"));

/// Parquet writer settings from the table's `write.parquet.*` properties, with Iceberg's
/// defaults (zstd at level 3, 128 MiB row groups, 1 MiB pages, 20,000 rows a page, 2 MiB
/// dictionaries).
pub fn writer_properties(
    properties: &HashMap<String, String>,
) -> Result<WriterProperties, NativeError> {
    let level = properties
        .get("write.parquet.compression-level")
        .map(|level| {
            level.trim().parse::<i32>().map_err(|_| {
                NativeError::InvalidInput(format!(
                    "table property write.parquet.compression-level = `{}` is not a number",
                    level.escape_debug()
                ))
            })
        })
        .transpose()?;
    let codec = properties
        .get("write.parquet.compression-codec")
        .map(|codec| codec.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "zstd".to_string());
    let bad_level = |codec: &str| {
        NativeError::InvalidInput(format!(
            "table property write.parquet.compression-level = {} is not a valid {codec} level",
            level.unwrap_or_default()
        ))
    };
    let compression = match codec.as_str() {
        "zstd" => Compression::ZSTD(
            ZstdLevel::try_new(level.unwrap_or(3)).map_err(|_| bad_level("zstd"))?,
        ),
        "gzip" => Compression::GZIP(match level {
            Some(level) => GzipLevel::try_new(u32::try_from(level).map_err(|_| bad_level("gzip"))?)
                .map_err(|_| bad_level("gzip"))?,
            None => GzipLevel::default(),
        }),
        "brotli" => Compression::BROTLI(match level {
            Some(level) => BrotliLevel::try_new(u32::try_from(level).map_err(|_| bad_level("brotli"))?)
                .map_err(|_| bad_level("brotli"))?,
            None => BrotliLevel::default(),
        }),
        "snappy" => Compression::SNAPPY,
        "lz4" => Compression::LZ4,
        "uncompressed" | "none" => Compression::UNCOMPRESSED,
        other => {
            return Err(NativeError::InvalidInput(format!(
                "table property write.parquet.compression-codec = `{}` is not a codec the native engine writes",
                other.escape_debug()
            )))
        }
    };
    let mut builder = WriterProperties::builder()
        .set_compression(compression)
        .set_created_by(CREATED_BY.to_string())
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(Some(
            positive(properties, "write.parquet.row-group-size-bytes")?
                .unwrap_or(128 * 1024 * 1024),
        ))
        .set_data_page_size_limit(
            positive(properties, "write.parquet.page-size-bytes")?.unwrap_or(1024 * 1024),
        )
        .set_data_page_row_count_limit(
            positive(properties, "write.parquet.page-row-limit")?.unwrap_or(20_000),
        )
        .set_dictionary_page_size_limit(
            positive(properties, "write.parquet.dict-size-bytes")?.unwrap_or(2 * 1024 * 1024),
        );
    for (key, value) in properties {
        if let Some(column) = key.strip_prefix("write.parquet.bloom-filter-enabled.column.") {
            let path = ColumnPath::new(column.split('.').map(str::to_string).collect());
            builder = builder
                .set_column_bloom_filter_enabled(path, value.trim().eq_ignore_ascii_case("true"));
        } else if let Some(column) = key.strip_prefix("write.parquet.bloom-filter-fpp.column.") {
            let fpp: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|fpp| *fpp > 0.0 && *fpp < 1.0)
                .ok_or_else(|| {
                    NativeError::InvalidInput(format!(
                        "table property {key} = `{}` is not a probability",
                        value.escape_debug()
                    ))
                })?;
            let path = ColumnPath::new(column.split('.').map(str::to_string).collect());
            builder = builder.set_column_bloom_filter_fpp(path, fpp);
        }
    }
    Ok(builder.build())
}

/// How a run writes.
pub struct WriteSettings {
    pub properties: WriterProperties,
    pub target_file_bytes: u64,
    pub data_location: String,
    /// File names start with it: `icepack-{run id}-{nonce}`.
    pub file_prefix: String,
    pub name_mapping: Option<Arc<NameMapping>>,
    /// A sorted run's order (`None`: the rows are written as read).
    pub sort: Option<super::sort::SortKeys>,
}

impl WriteSettings {
    pub fn for_table(
        state: &TableState,
        target_file_bytes: u64,
        run_id: &str,
    ) -> Result<WriteSettings, NativeError> {
        let metadata = &state.table.metadata;
        let properties = metadata.properties();
        let name_mapping = properties
            .get("schema.name-mapping.default")
            .map(|raw| {
                serde_json::from_str::<NameMapping>(raw)
                    .map(Arc::new)
                    .map_err(|_| {
                        NativeError::InvalidInput(
                            "table property schema.name-mapping.default is not a name mapping"
                                .to_string(),
                        )
                    })
            })
            .transpose()?;
        let safe_run_id: String = run_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ok(WriteSettings {
            properties: writer_properties(properties)?,
            target_file_bytes,
            data_location: data_location(properties, metadata.location()),
            file_prefix: format!(
                "{}{safe_run_id}-{:08x}",
                crate::model::report::OUTPUT_FILE_PREFIX,
                fastrand::u32(..)
            ),
            name_mapping,
            sort: None,
        })
    }
}

/// The rows of `group` rewritten into new data files (their paths also in `log` as made), the
/// position deletes among `deletes` (the table's live delete files) applied.
#[allow(clippy::too_many_arguments)]
pub async fn rewrite_group(
    state: &TableState,
    group: &FileGroup,
    deletes: &[DeleteFileFacts],
    group_index: usize,
    settings: &WriteSettings,
    log: &OutputLog,
    runtime: iceberg::Runtime,
    read_concurrency_floor: usize,
) -> Result<Vec<DataFile>, NativeError> {
    let metadata = &state.table.metadata;
    let schema = metadata.current_schema().clone();
    let spec_of = |spec_id: i32| {
        metadata
            .partition_spec_by_id(spec_id)
            .cloned()
            .ok_or_else(|| {
                NativeError::InvalidInput(format!("the table has no partition spec {spec_id}"))
            })
    };
    let output_spec = spec_of(group.spec_id)?;
    let field_ids: Vec<i32> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|field| field.id)
        .collect();
    let mut tasks = Vec::with_capacity(group.files.len());
    let mut partition = None;
    // Every position delete file applied, once: its rows bound the rows it may remove. An
    // equality delete may remove any number of rows.
    let mut applied: HashMap<&str, u64> = HashMap::new();
    let mut equality_applied = false;
    for file in &group.files {
        let mut file_deletes = Vec::new();
        for delete in deletes.iter().filter(|delete| delete_applies(delete, file)) {
            if let Some(reason) = &delete.native_refusal {
                return Err(NativeError::Unsupported(format!(
                    "delete file {} applies to input {}: {reason}",
                    delete.path, file.path
                )));
            }
            let builder = FileScanTaskDeleteFile::builder()
                .with_file_path(delete.path.clone())
                .with_file_size_in_bytes(delete.size_bytes)
                .with_partition_spec_id(delete.spec_id);
            file_deletes.push(match delete.kind {
                DeleteKind::Position => {
                    applied.insert(delete.path.as_str(), delete.record_count);
                    builder
                        .with_file_type(DataContentType::PositionDeletes)
                        .build()
                }
                DeleteKind::Equality => {
                    equality_applied = true;
                    builder
                        .with_file_type(DataContentType::EqualityDeletes)
                        .with_equality_ids(Some(delete.equality_ids.clone()))
                        .build()
                }
            });
        }
        let (_, entry) = state.data_entry(&file.path).ok_or_else(|| {
            NativeError::CommitConflict(format!(
                "input {} left the table before it was read",
                file.path
            ))
        })?;
        let data_file = entry.data_file();
        if !group.repartition {
            match &partition {
                None => partition = Some(data_file.partition().clone()),
                Some(first) if first != data_file.partition() => {
                    return Err(NativeError::Other(format!(
                        "the files of group {group_index} do not share one partition"
                    )))
                }
                Some(_) => {}
            }
        }
        tasks.push(
            FileScanTask::builder()
                .with_file_size_in_bytes(entry.file_size_in_bytes())
                .with_start(0)
                .with_length(entry.file_size_in_bytes())
                .with_record_count(Some(entry.record_count()))
                .with_data_file_path(entry.file_path().to_string())
                .with_data_file_format(DataFileFormat::Parquet)
                .with_schema(schema.clone())
                .with_project_field_ids(field_ids.clone())
                .with_partition(Some(data_file.partition().clone()))
                .with_partition_spec(Some(spec_of(file.spec_id)?))
                .with_name_mapping(settings.name_mapping.clone())
                .with_deletes(file_deletes)
                .with_case_sensitive(true)
                .build(),
        );
    }
    if tasks.is_empty() {
        return Err(NativeError::Other("an empty group".to_string()));
    }
    let reader = ArrowReaderBuilder::new(state.table.file_io.clone(), runtime)
        .with_data_file_concurrency_limit(read_concurrency(
            group.files.iter().map(|file| file.size_bytes),
            read_concurrency_floor,
        ))
        .with_batch_size(BATCH_ROWS)
        .build();
    let tasks = futures::stream::iter(tasks.into_iter().map(Ok));
    let mut batches = reader
        .read(Box::pin(tasks))
        .map_err(|error| super::storage_error("reading the group's files", error))?
        .stream();

    let new_writer = |key: PartitionKey, name: String| TargetSizedWriter {
        builder: ParquetWriterBuilder::new(settings.properties.clone(), schema.clone()),
        file_io: state.table.file_io.clone(),
        locations: OutputLocations {
            data_location: settings.data_location.clone(),
            log: log.clone(),
        },
        names: DefaultFileNameGenerator::new(name, None, DataFileFormat::Parquet),
        key,
        target_bytes: usize::try_from(settings.target_file_bytes).unwrap_or(usize::MAX),
        sort_order_id: settings.sort.as_ref().and_then(|sort| sort.sort_order_id),
        current: None,
        last_closed: None,
        written: Vec::new(),
    };
    let name = format!("{}-{group_index:05}", settings.file_prefix);
    let mut writer = match partition {
        Some(partition) => Outputs::One(Box::new(new_writer(
            PartitionKey::new(output_spec.as_ref().clone(), schema.clone(), partition),
            name,
        ))),
        // Older specs' rows into the output spec: an unpartitioned one takes them all.
        None if output_spec.is_unpartitioned() => {
            let nulls = Struct::from_iter(output_spec.fields().iter().map(|_| None));
            Outputs::One(Box::new(new_writer(
                PartitionKey::new(output_spec.as_ref().clone(), schema.clone(), nulls),
                name,
            )))
        }
        None => Outputs::Fanned {
            splitter: Box::new(
                RecordBatchPartitionSplitter::try_new_with_computed_values(
                    schema.clone(),
                    output_spec.clone(),
                )
                .map_err(|error| {
                    NativeError::Unsupported(format!(
                        "partitioning rows by spec {}: {error}",
                        output_spec.spec_id()
                    ))
                })?,
            ),
            writers: HashMap::new(),
            new_writer: Box::new(move |key, index| new_writer(key, format!("{name}-{index:04}"))),
        },
    };
    let mut rows: u64 = 0;
    let target = Arc::new(
        iceberg::arrow::schema_to_arrow_schema(&schema).map_err(|error| {
            NativeError::Unsupported(format!("the table's schema in Arrow: {error}"))
        })?,
    );
    // A sorted run holds the group's rows (bounded: `sort::MAX_SORT_GROUP_BYTES` of input).
    let mut held = Vec::new();
    while let Some(batch) = batches
        .try_next()
        .await
        .map_err(|error| super::storage_error("reading the group's files", error))?
    {
        rows += batch.num_rows() as u64;
        let batch = materialize(batch, &target)?;
        if settings.sort.is_some() {
            held.push(batch);
        } else {
            writer.write(batch).await?;
        }
    }
    if let Some(keys) = &settings.sort {
        let all = super::sort::sorted(&held, &target, keys)?;
        drop(held);
        let mut offset = 0;
        while offset < all.num_rows() {
            let length = BATCH_ROWS.min(all.num_rows() - offset);
            writer.write(all.slice(offset, length)).await?;
            offset += length;
        }
    }
    let written = writer.close().await?;
    let expected = group.input_records();
    let recorded: u64 = written.iter().map(|file| file.record_count()).sum();
    let deletable: u64 = if equality_applied {
        expected
    } else {
        applied.values().sum()
    };
    if recorded != rows || rows > expected || rows < expected.saturating_sub(deletable) {
        return Err(NativeError::Other(format!(
            "group {group_index} read {rows} rows and wrote {recorded} where its inputs hold {expected} and the deletes applied may remove {deletable}: nothing of it is committed"
        )));
    }
    Ok(written)
}

/// Where a group's rows go: one partition's files, or a writer per partition of the output
/// spec, opened as its first row arrives (a group of older specs' files; memory grows with the
/// partitions a group's rows fall in, each holding one row group at most, bounded by the group's
/// input bytes).
enum Outputs<'a> {
    One(Box<TargetSizedWriter>),
    Fanned {
        splitter: Box<RecordBatchPartitionSplitter>,
        writers: HashMap<Struct, TargetSizedWriter>,
        new_writer: Box<dyn Fn(PartitionKey, usize) -> TargetSizedWriter + Send + Sync + 'a>,
    },
}

impl Outputs<'_> {
    async fn write(&mut self, batch: RecordBatch) -> Result<(), NativeError> {
        match self {
            Outputs::One(writer) => writer.write(batch).await,
            Outputs::Fanned {
                splitter,
                writers,
                new_writer,
            } => {
                let parts = splitter.split(&batch).map_err(|error| {
                    NativeError::Other(format!("partitioning rows by the current spec: {error}"))
                })?;
                for (key, rows) in parts {
                    let index = writers.len();
                    let writer = writers
                        .entry(key.data().clone())
                        .or_insert_with(|| new_writer(key, index));
                    writer.write(rows).await?;
                }
                Ok(())
            }
        }
    }

    async fn close(self) -> Result<Vec<DataFile>, NativeError> {
        match self {
            Outputs::One(writer) => (*writer).close().await,
            Outputs::Fanned { writers, .. } => {
                let mut written = Vec::new();
                for writer in writers.into_values() {
                    written.extend(writer.close().await?);
                }
                Ok(written)
            }
        }
    }
}

/// Rows a new file takes in its first write when nothing tells yet how large a row is encoded.
const PROBE_ROWS: usize = 1024;

/// What the current file has taken so far: its size as the Parquet writer measures it (bytes
/// flushed plus its estimate of the row group in memory), and its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileFill {
    bytes: usize,
    rows: usize,
}

/// How many of the next rows the current file takes, and whether it rolls over after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fit {
    rows: usize,
    then_roll: bool,
}

/// Where the next `offered` rows go: into the current file as long as they keep it within
/// `target_bytes` at the bytes per row it has shown so far; the rows that fill it up to the
/// target and then a roll when not all of them fit (none when it is full). A new file (`current`
/// `None`) sizes its first write by the bytes per row of the file closed before it
/// (`last_closed`), or takes [`PROBE_ROWS`] to learn them, and always takes at least one row, so
/// every write makes progress.
fn fit(
    current: Option<FileFill>,
    last_closed: Option<FileFill>,
    target_bytes: usize,
    offered: usize,
) -> Fit {
    let fitting = |fill: FileFill, room: usize| -> usize {
        if fill.bytes == 0 {
            return offered;
        }
        let rows = room as u128 * fill.rows as u128 / fill.bytes as u128;
        usize::try_from(rows).unwrap_or(usize::MAX)
    };
    let rows = match (current, last_closed) {
        (Some(fill), _) if fill.rows > 0 => fitting(fill, target_bytes.saturating_sub(fill.bytes)),
        (_, Some(fill)) if fill.rows > 0 => fitting(fill, target_bytes).max(1),
        _ => {
            return Fit {
                rows: offered.min(PROBE_ROWS),
                then_roll: false,
            }
        }
    };
    Fit {
        rows: rows.min(offered),
        then_roll: rows < offered,
    }
}

/// Writes one group's rows, in one partition, into files of the target size as Iceberg's Java
/// writers do (`write.target-file-size-bytes`, measured on the file being written), the last one
/// holding what is left. Unlike iceberg-rust's `RollingFileWriter`, which rolls only once a file
/// has passed the target (after a whole batch), it splits the batch that would pass it and fills
/// the file up to the target; see [`fit`].
struct TargetSizedWriter {
    builder: ParquetWriterBuilder,
    file_io: FileIO,
    locations: OutputLocations,
    names: DefaultFileNameGenerator,
    key: PartitionKey,
    target_bytes: usize,
    /// The table's sort order the rows are written in, when they are.
    sort_order_id: Option<i32>,
    current: Option<ParquetWriter>,
    last_closed: Option<FileFill>,
    written: Vec<DataFile>,
}

impl TargetSizedWriter {
    async fn write(&mut self, batch: RecordBatch) -> Result<(), NativeError> {
        let mut offset = 0;
        while offset < batch.num_rows() {
            let offered = batch.num_rows() - offset;
            let fill = self.current.as_ref().map(|file| FileFill {
                bytes: file.current_written_size(),
                rows: file.current_row_num(),
            });
            let Fit { rows, then_roll } = fit(fill, self.last_closed, self.target_bytes, offered);
            if rows > 0 {
                let mut file = match self.current.take() {
                    Some(file) => file,
                    None => self.open().await?,
                };
                file.write(&batch.slice(offset, rows))
                    .await
                    .map_err(|error| super::storage_error("writing an output file", error))?;
                self.current = Some(file);
                offset += rows;
            }
            if then_roll {
                self.roll().await?;
            }
        }
        Ok(())
    }

    async fn open(&mut self) -> Result<ParquetWriter, NativeError> {
        let path = self
            .locations
            .generate_location(Some(&self.key), &self.names.generate_file_name());
        let output = self
            .file_io
            .new_output(&path)
            .map_err(|error| super::storage_error("creating an output file", error))?;
        self.builder
            .build(output)
            .await
            .map_err(|error| NativeError::Other(format!("cannot start a writer: {error}")))
    }

    /// Closes the current file, if any.
    async fn roll(&mut self) -> Result<(), NativeError> {
        let Some(file) = self.current.take() else {
            return Ok(());
        };
        for mut builder in file
            .close()
            .await
            .map_err(|error| super::storage_error("closing an output file", error))?
        {
            builder
                .content(DataContentType::Data)
                .partition(self.key.data().clone())
                .partition_spec_id(self.key.spec().spec_id());
            if let Some(id) = self.sort_order_id {
                builder.sort_order_id(id);
            }
            let data_file = builder.build().map_err(|error| {
                NativeError::Other(format!("an output file's metadata: {error}"))
            })?;
            self.last_closed = Some(FileFill {
                bytes: usize::try_from(data_file.file_size_in_bytes()).unwrap_or(usize::MAX),
                rows: usize::try_from(data_file.record_count()).unwrap_or(usize::MAX),
            });
            self.written.push(data_file);
        }
        Ok(())
    }

    async fn close(mut self) -> Result<Vec<DataFile>, NativeError> {
        self.roll().await?;
        Ok(self.written)
    }
}

/// A batch as the writer takes it: the reader hands identity partition columns filled from the
/// partition value run-end encoded (one run), and the writer wants them plain.
fn materialize(batch: RecordBatch, target: &SchemaRef) -> Result<RecordBatch, NativeError> {
    if batch.schema().fields().len() != target.fields().len() {
        return Err(NativeError::Other(format!(
            "read {} columns where the table has {}",
            batch.schema().fields().len(),
            target.fields().len()
        )));
    }
    let columns = batch
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                arrow_cast::cast(column, field.data_type()).map_err(|error| {
                    NativeError::Other(format!(
                        "column {} as the table's type: {error}",
                        field.name()
                    ))
                })
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(target.clone(), columns)
        .map_err(|error| NativeError::Other(format!("a batch in the table's schema: {error}")))
}

#[cfg(test)]
mod tests;
