//! Which data files a native run rewrites, and in which groups: a pure function of the live
//! files of the table's current snapshot (as its manifests list them) and the run's task.
//!
//! - **Partitions.** A file belongs to the run when its partition path, rendered from its own
//!   partition spec and values, is one of the run's paths (a file written under an older spec is
//!   matched by that spec's path, as its S3 key has it), or every file when the run names none.
//! - **Candidates.** Files below the small-file size; in a partition where mid-sized files join,
//!   also files below three quarters of the target (Iceberg's default `min-file-size-bytes`).
//! - **Worth it.** Per partition of the current spec, and for the candidates of every older spec
//!   together (Java plans those as one unpartitioned set: their rows move into the current spec,
//!   [`FileGroup::repartition`]), as `rewrite_data_files` decides per file group: at least two
//!   candidates, and `min_input_files` of them or more than a target file's worth of bytes.
//! - **Groups.** A chosen partition's candidates are bin-packed (first fit, largest first) into
//!   groups of at most the maximum group size, as `rewrite_data_files` forms file groups
//!   (`max-file-group-size-bytes`): one commit each with partial progress. A group is written into
//!   files of the target size measured on the files written (`rewrite.rs`), the last one smaller:
//!   input bytes do not tell the output's size (another encoding, codec or dictionary), so groups
//!   capped at one target by input bytes overflowed by a few rows into a file of their own. A
//!   group left with a single file is dropped (rewriting it alone changes nothing).
//! - **Left, with a reason.** Every partition the run names that no group rewrites is in
//!   [`Plan::left`] with why ([`LeftReason`]): no live file has that partition, no small file,
//!   too few, or no two fit a group. A run that leaves a due table due says so; a whole-table
//!   run that plans nothing gives one reason for the table.
//! - **Deletes.** Position and equality deletes that apply to a candidate are applied by the
//!   rewrite (its outputs hold the live rows only). A partition where a delete the native engine
//!   cannot apply ([`DeleteFileFacts::native_refusal`]: an equality delete on an optional column,
//!   say) applies to a candidate is not rewritten here: the plan answers
//!   [`PlanError::DeletesApply`] and the run goes to an engine that applies them.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use thiserror::Error;

pub use crate::model::task::MidSizedFiles;

/// A partition as (field name, value) pairs in spec order, values as Iceberg renders them in
/// paths (`2024-05-01`, `eu west`, `null`), decoded. Empty for an unpartitioned file.
pub type PartitionValues = Vec<(String, String)>;

/// What the plan knows of a live data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFileFacts {
    pub path: String,
    pub size_bytes: u64,
    pub record_count: u64,
    pub spec_id: i32,
    pub partition: PartitionValues,
    pub data_sequence_number: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteKind {
    Position,
    Equality,
}

/// What the plan and the commit's validation know of a live delete file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteFileFacts {
    pub path: String,
    pub kind: DeleteKind,
    pub spec_id: i32,
    pub partition: PartitionValues,
    /// Its spec has no fields: it applies to the whole table (a global delete).
    pub spec_unpartitioned: bool,
    pub data_sequence_number: i64,
    /// Position deletes: the one data file it references, when the writer said so.
    pub referenced_data_file: Option<String>,
    /// Position deletes: the lower and upper bounds of its `file_path` column, when known.
    pub referenced_path_bounds: Option<(String, String)>,
    pub size_bytes: u64,
    /// Rows it deletes (position deletes: positions it lists, of any data file).
    pub record_count: u64,
    /// Equality deletes: the field ids whose values it matches.
    pub equality_ids: Vec<i32>,
    /// Why the native engine cannot apply it, when it cannot (an equality delete on an optional
    /// column, on a column the current schema lacks ...).
    pub native_refusal: Option<String>,
}

/// What the run asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// Partition paths as icepack knows them (`ts_day=2024-05-01/region=eu`, `""` for an
    /// unpartitioned table); empty: the whole table.
    pub partitions: Vec<String>,
    pub mid_sized: MidSizedFiles,
    pub small_file_bytes: u64,
    pub target_file_bytes: u64,
    pub min_input_files: u64,
    /// Input bytes of a group at most (a larger file is a group of its own); at least the target.
    pub max_group_bytes: u64,
    /// The spec outputs are written in: the table's current one. Small files of other specs are
    /// planned together and re-partitioned into it ([`FileGroup::repartition`]).
    pub output_spec_id: i32,
    /// A run due by its deletes: every data file a delete applies to is rewritten as well,
    /// whatever its size and even alone in its partition (`rewrite_data_files` with a
    /// `delete-file-threshold` of 1), so its deletes are applied and can leave.
    pub with_deletes: bool,
}

/// Files rewritten together into files of the target size: files of one partition of the
/// output spec, or files of older specs whose rows are re-partitioned into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileGroup {
    /// The spec the outputs are written in (the table's current one).
    pub spec_id: i32,
    /// The partition the inputs share and the outputs keep; empty when `repartition`.
    pub partition: PartitionValues,
    /// The inputs are of older specs (possibly several partitions of each): each row goes to
    /// the partition of `spec_id` its values give, as Java's `rewrite_data_files` writes them.
    pub repartition: bool,
    pub files: Vec<DataFileFacts>,
}

impl FileGroup {
    pub fn input_bytes(&self) -> u64 {
        self.files.iter().map(|file| file.size_bytes).sum()
    }

    pub fn input_records(&self) -> u64 {
        self.files.iter().map(|file| file.record_count).sum()
    }

    /// The partition path as the run names it.
    pub fn partition_path(&self) -> String {
        partition_path(&self.partition)
    }

    /// What the group rewrites, for messages: its partition path, or its older specs.
    pub fn describe(&self) -> String {
        if self.repartition {
            let specs: BTreeSet<i32> = self.files.iter().map(|file| file.spec_id).collect();
            let specs: Vec<String> = specs.iter().map(i32::to_string).collect();
            format!(
                "files of older specs {} moved to spec {}",
                specs.join(", "),
                self.spec_id
            )
        } else {
            format!("`{}`", self.partition_path())
        }
    }
}

/// The groups of a run, in a stable order (partition, then size; the older specs' groups last),
/// and the partitions it was asked for and does not rewrite.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub groups: Vec<FileGroup>,
    /// Each partition path of the request no group rewrites (once, in the request's order), or
    /// `None` for a whole-table run that plans nothing, with the reason.
    pub left: Vec<(Option<String>, LeftReason)>,
}

/// Why a partition a run asked for (or a whole-table run) rewrites nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftReason {
    /// The path is not `name=value` segments.
    NotAPartitionPath,
    /// No live data file of the table has the partition: compacted or removed by another commit
    /// since the files were counted, or named otherwise than the table's specs name it.
    NoLiveFile,
    /// Live files, none below the small-file size (or the mid-sized floor where they join).
    NoSmallFile { files: u64 },
    /// Small files, but fewer than `min_input_files` and no more than a target file's bytes.
    TooFewSmallFiles {
        files: u64,
        bytes: u64,
        min_input_files: u64,
        target_file_bytes: u64,
    },
    /// Enough small files, but no two of them fit one group of the maximum group size.
    NoGroupOfTwo { files: u64 },
    /// A whole-table run: small files enough for a group, but spread over partitions, none of
    /// which has enough of them (files are grouped within their partition).
    SpreadThin {
        files: u64,
        partitions: u64,
        min_input_files: u64,
    },
}

impl std::fmt::Display for LeftReason {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeftReason::NotAPartitionPath => write!(formatter, "not a partition path"),
            LeftReason::NoLiveFile => write!(
                formatter,
                "no live data file of the table is in this partition (compacted or removed by another commit, or named otherwise by the table's partition specs)"
            ),
            LeftReason::NoSmallFile { files } => write!(
                formatter,
                "none of its {files} live data files is below the small-file size"
            ),
            LeftReason::TooFewSmallFiles {
                files,
                bytes,
                min_input_files,
                target_file_bytes,
            } => write!(
                formatter,
                "{files} small files of {bytes} bytes: fewer than min_input_files ({min_input_files}) and no more than one target file ({target_file_bytes} bytes)"
            ),
            LeftReason::NoGroupOfTwo { files } => write!(
                formatter,
                "no two of its {files} small files fit one file group"
            ),
            LeftReason::SpreadThin {
                files,
                partitions,
                min_input_files,
            } => write!(
                formatter,
                "{files} small files spread over {partitions} partitions, none with enough of them to rewrite (min_input_files {min_input_files}, or more than one target file's bytes)"
            ),
        }
    }
}

impl Plan {
    pub fn input_bytes(&self) -> u64 {
        self.groups.iter().map(FileGroup::input_bytes).sum()
    }

    pub fn input_files(&self) -> usize {
        self.groups.iter().map(|group| group.files.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// A delete file the native engine cannot apply applies to an input: such a run needs
    /// another engine.
    #[error("delete file {delete_file} applies to data files of partition `{partition}` the run would rewrite, and the native engine cannot apply it: {reason}")]
    DeletesApply {
        partition: String,
        delete_file: String,
        reason: String,
    },
}

/// Why a rewrite cannot be committed on the table as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConflictReason {
    #[error("input {path} is no longer in the table (rewritten or deleted by another commit)")]
    InputGone { path: String },
    #[error("delete file {delete_file} committed during the run applies to input {path}")]
    NewDeleteApplies { delete_file: String, path: String },
}

/// The plan of a run over the live data and delete files of one snapshot.
pub fn plan(
    request: &PlanRequest,
    data_files: &[DataFileFacts],
    delete_files: &[DeleteFileFacts],
) -> Result<Plan, PlanError> {
    let wanted: Option<HashSet<PartitionValues>> = (!request.partitions.is_empty()).then(|| {
        request
            .partitions
            .iter()
            .filter_map(|path| decode_partition_path(path))
            .collect()
    });
    let joining: Option<HashSet<PartitionValues>> = match &request.mid_sized {
        MidSizedFiles::Nowhere => Some(HashSet::new()),
        MidSizedFiles::Everywhere => None,
        MidSizedFiles::In(paths) => Some(
            paths
                .iter()
                .filter_map(|path| decode_partition_path(path))
                .collect(),
        ),
    };
    let deleted: HashSet<&str> = if request.with_deletes {
        data_files
            .iter()
            .filter(|file| {
                delete_files
                    .iter()
                    .any(|delete| delete_applies(delete, file))
            })
            .map(|file| file.path.as_str())
            .collect()
    } else {
        HashSet::new()
    };
    let has_deletes = |file: &&DataFileFacts| deleted.contains(file.path.as_str());
    let mid_sized_floor = request.target_file_bytes / 4 * 3;
    let capacity = request.max_group_bytes.max(request.target_file_bytes);
    let mut by_partition: BTreeMap<(i32, PartitionValues), Vec<&DataFileFacts>> = BTreeMap::new();
    for file in data_files {
        if wanted
            .as_ref()
            .is_some_and(|wanted| !wanted.contains(&file.partition))
        {
            continue;
        }
        let joins = joining
            .as_ref()
            .is_none_or(|joining| joining.contains(&file.partition));
        let floor = if joins {
            request.small_file_bytes.max(mid_sized_floor)
        } else {
            request.small_file_bytes
        };
        if file.size_bytes < floor || deleted.contains(file.path.as_str()) {
            by_partition
                .entry((file.spec_id, file.partition.clone()))
                .or_default()
                .push(file);
        }
    }
    // Files of the output spec are grouped by partition; files of older specs all together (a
    // file of an older spec may hold rows of several partitions of the current one: grouped
    // together, they make the fewest new files), as Java's `rewrite_data_files` plans them.
    let older: Vec<&DataFileFacts> = by_partition
        .iter()
        .filter(|((spec_id, _), _)| *spec_id != request.output_spec_id)
        .flat_map(|(_, files)| files.iter().copied())
        .collect();
    let mut buckets: Vec<(Option<&PartitionValues>, Vec<&DataFileFacts>)> = by_partition
        .iter()
        .filter(|((spec_id, _), _)| *spec_id == request.output_spec_id)
        .map(|((_, partition), files)| (Some(partition), files.clone()))
        .collect();
    if !older.is_empty() {
        buckets.push((None, older));
    }
    let mut groups = Vec::new();
    let mut worth_it: HashSet<(i32, &PartitionValues)> = HashSet::new();
    for (partition, candidates) in buckets {
        if !worth_rewriting(request, &candidates) && !candidates.iter().any(has_deletes) {
            continue;
        }
        worth_it.extend(
            candidates
                .iter()
                .map(|file| (file.spec_id, &file.partition)),
        );
        for candidate in &candidates {
            if let Some((delete, reason)) = delete_files.iter().find_map(|delete| {
                delete
                    .native_refusal
                    .as_ref()
                    .filter(|_| delete_applies(delete, candidate))
                    .map(|reason| (delete, reason))
            }) {
                return Err(PlanError::DeletesApply {
                    partition: partition_path(&candidate.partition),
                    delete_file: delete.path.clone(),
                    reason: reason.clone(),
                });
            }
        }
        for files in bin_pack(candidates, capacity) {
            if files.len() >= 2 || files.iter().any(has_deletes) {
                groups.push(FileGroup {
                    spec_id: request.output_spec_id,
                    partition: partition.cloned().unwrap_or_default(),
                    repartition: partition.is_none(),
                    files: files.into_iter().cloned().collect(),
                });
            }
        }
    }
    let left = left_partitions(request, data_files, &by_partition, &worth_it, &groups);
    Ok(Plan { groups, left })
}

/// The request's partitions (or, for a whole-table run that plans nothing, the table) that no
/// group rewrites, each with the reason.
fn left_partitions(
    request: &PlanRequest,
    data_files: &[DataFileFacts],
    candidates: &BTreeMap<(i32, PartitionValues), Vec<&DataFileFacts>>,
    worth_it: &HashSet<(i32, &PartitionValues)>,
    groups: &[FileGroup],
) -> Vec<(Option<String>, LeftReason)> {
    let planned: HashSet<&PartitionValues> = groups
        .iter()
        .flat_map(|group| &group.files)
        .map(|file| &file.partition)
        .collect();
    let reason = |wanted: Option<&PartitionValues>| {
        let live = data_files
            .iter()
            .filter(|file| wanted.is_none_or(|wanted| &file.partition == wanted))
            .count() as u64;
        let small: Vec<&DataFileFacts> = candidates
            .iter()
            .filter(|((_, partition), _)| wanted.is_none_or(|wanted| partition == wanted))
            .flat_map(|(_, files)| files.iter().copied())
            .collect();
        let small_files = small.len() as u64;
        let small_bytes = small.iter().map(|file| file.size_bytes).sum();
        let worth_it = candidates
            .keys()
            .filter(|(_, partition)| wanted.is_none_or(|wanted| partition == wanted))
            .any(|(spec_id, partition)| worth_it.contains(&(*spec_id, partition)));
        if live == 0 {
            LeftReason::NoLiveFile
        } else if small_files == 0 {
            LeftReason::NoSmallFile { files: live }
        } else if !worth_it && wanted.is_none() && small_files >= request.min_input_files.max(2) {
            LeftReason::SpreadThin {
                files: small_files,
                partitions: small
                    .iter()
                    .map(|file| (file.spec_id, &file.partition))
                    .collect::<HashSet<_>>()
                    .len() as u64,
                min_input_files: request.min_input_files,
            }
        } else if !worth_it {
            LeftReason::TooFewSmallFiles {
                files: small_files,
                bytes: small_bytes,
                min_input_files: request.min_input_files,
                target_file_bytes: request.target_file_bytes,
            }
        } else {
            LeftReason::NoGroupOfTwo { files: small_files }
        }
    };
    if request.partitions.is_empty() {
        return if groups.is_empty() {
            vec![(None, reason(None))]
        } else {
            Vec::new()
        };
    }
    let mut seen = HashSet::new();
    let mut left = Vec::new();
    for path in &request.partitions {
        if !seen.insert(path.as_str()) {
            continue;
        }
        match decode_partition_path(path) {
            None => left.push((Some(path.clone()), LeftReason::NotAPartitionPath)),
            Some(values) if planned.contains(&values) => {}
            Some(values) => left.push((Some(path.clone()), reason(Some(&values)))),
        }
    }
    left
}

/// Whether one (spec, partition)'s candidates are worth a rewrite, as `rewrite_data_files`
/// decides per file group: at least two, and `min_input_files` of them or more than a target
/// file's worth of bytes.
fn worth_rewriting(request: &PlanRequest, candidates: &[&DataFileFacts]) -> bool {
    let count = candidates.len() as u64;
    let bytes: u64 = candidates.iter().map(|file| file.size_bytes).sum();
    count >= 2 && (count >= request.min_input_files || bytes > request.target_file_bytes)
}

/// First fit, largest first, into bins of at most `capacity` bytes (a file larger than that is a
/// bin of its own).
fn bin_pack(mut files: Vec<&DataFileFacts>, capacity: u64) -> Vec<Vec<&DataFileFacts>> {
    files.sort_by(|a, b| b.size_bytes.cmp(&a.size_bytes).then(a.path.cmp(&b.path)));
    let mut bins: Vec<(u64, Vec<&DataFileFacts>)> = Vec::new();
    for file in files {
        match bins
            .iter_mut()
            .find(|(used, _)| used.saturating_add(file.size_bytes) <= capacity)
        {
            Some((used, bin)) => {
                *used += file.size_bytes;
                bin.push(file);
            }
            None => bins.push((file.size_bytes, vec![file])),
        }
    }
    bins.into_iter().map(|(_, bin)| bin).collect()
}

/// Whether a delete file may delete rows of a data file, by Iceberg's scoping rules: position
/// deletes apply to data files of their partition (or of the whole table when their spec is
/// unpartitioned) with a data sequence number not above theirs, narrowed by the data file they
/// reference or the bounds of their `file_path` column; equality deletes to data files with a
/// lower data sequence number.
pub fn delete_applies(delete: &DeleteFileFacts, data: &DataFileFacts) -> bool {
    let same_scope = delete.spec_unpartitioned
        || (delete.spec_id == data.spec_id && delete.partition == data.partition);
    if !same_scope {
        return false;
    }
    match delete.kind {
        DeleteKind::Equality => data.data_sequence_number < delete.data_sequence_number,
        DeleteKind::Position => {
            if data.data_sequence_number > delete.data_sequence_number {
                return false;
            }
            if let Some(referenced) = &delete.referenced_data_file {
                return referenced == &data.path;
            }
            match &delete.referenced_path_bounds {
                Some((lower, upper)) => {
                    lower.as_str() <= data.path.as_str() && data.path.as_str() <= upper.as_str()
                }
                None => true,
            }
        }
    }
}

/// Whether the rewrite of `inputs`, planned on a snapshot of data sequence number
/// `starting_sequence_number`, may be committed on a table whose live data files are `live` and
/// live delete files are `deletes`: every input is still live, and no position delete committed
/// since the start applies to an input. Equality deletes committed since need no refusal where
/// the outputs stay in the input's spec and partition: they keep the starting sequence number,
/// so such deletes apply to them as to the inputs (Iceberg's `RewriteFiles` with a data sequence
/// number ignores them the same way). An input of another spec than `output_spec_id` has its rows
/// moved out of the delete's scope, so an equality delete committed since refuses it too.
pub fn validate_rewrite(
    inputs: &[DataFileFacts],
    starting_sequence_number: i64,
    output_spec_id: i32,
    live: &HashSet<&str>,
    deletes: &[DeleteFileFacts],
) -> Result<(), ConflictReason> {
    for input in inputs {
        if !live.contains(input.path.as_str()) {
            return Err(ConflictReason::InputGone {
                path: input.path.clone(),
            });
        }
    }
    for delete in deletes {
        if delete.data_sequence_number <= starting_sequence_number {
            continue;
        }
        let refuses = |input: &&DataFileFacts| {
            (delete.kind == DeleteKind::Position || input.spec_id != output_spec_id)
                && delete_applies(delete, input)
        };
        if let Some(input) = inputs.iter().find(refuses) {
            return Err(ConflictReason::NewDeleteApplies {
                delete_file: delete.path.clone(),
                path: input.path.clone(),
            });
        }
    }
    Ok(())
}

/// The delete files a rewrite makes dangling, removed in its `replace` snapshot: each applies to
/// one of the rewritten `inputs` (it was applied to their rows) and, by Iceberg's scoping rules
/// ([`delete_applies`]), to no data file live after the commit — the table's other live data
/// files and the rewrite's outputs (which carry the starting sequence number, so an equality
/// delete committed before the run no longer applies to them), together `files_after`, asked for
/// only when some delete applied to an input. A delete that might still apply to a live file
/// stays (an equality delete with an older data file of its partition left), as do deletes that
/// touch no input (not this rewrite's to judge). As Spark's `rewrite_data_files` with
/// dangling-delete removal: no reader opens them again.
pub fn dangling_deletes<'a>(
    inputs: &[DataFileFacts],
    deletes: &'a [DeleteFileFacts],
    files_after: impl FnOnce() -> Vec<DataFileFacts>,
) -> Vec<&'a DeleteFileFacts> {
    let applied: Vec<&DeleteFileFacts> = deletes
        .iter()
        .filter(|delete| inputs.iter().any(|input| delete_applies(delete, input)))
        .collect();
    if applied.is_empty() {
        return applied;
    }
    let rewritten: HashSet<&str> = inputs.iter().map(|file| file.path.as_str()).collect();
    let after: Vec<DataFileFacts> = files_after()
        .into_iter()
        .filter(|file| !rewritten.contains(file.path.as_str()))
        .collect();
    applied
        .into_iter()
        .filter(|delete| !after.iter().any(|file| delete_applies(delete, file)))
        .collect()
}

/// Characters Java's `URLEncoder` leaves as they are (space becomes `+`).
const PATH_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'.')
    .remove(b'-')
    .remove(b'*')
    .remove(b'_')
    .remove(b' ');

/// A partition path as Iceberg's Java writers put it in data file keys: `name=value` per field,
/// joined by `/`, names and values URL-encoded (a space as `+`).
pub fn partition_path(values: &PartitionValues) -> String {
    let encode = |text: &str| {
        percent_encoding::utf8_percent_encode(text, PATH_VALUE)
            .to_string()
            .replace(' ', "+")
    };
    values
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("/")
}

/// The (name, value) pairs of a partition path as the run names it, decoded (`+` is a space);
/// `None` when a segment is not `name=value` or not UTF-8. `""` is the unpartitioned path.
pub fn decode_partition_path(path: &str) -> Option<PartitionValues> {
    if path.is_empty() {
        return Some(Vec::new());
    }
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(&text.replace('+', " "))
            .decode_utf8()
            .ok()
            .map(|text| text.into_owned())
    };
    path.split('/')
        .map(|segment| {
            let (name, value) = segment.split_once('=')?;
            Some((decode(name)?, decode(value)?))
        })
        .collect()
}

#[cfg(test)]
mod tests;
