//! The RocksDB [`StateStore`]: one column family per kind of record, one synced `WriteBatch` per
//! commit (atomic across column families, one WAL).
//!
//! Remembered object keys are indexed by their first-seen time (`seen_by_time`, written in the
//! same batch as the key), so the retention purge reads only the keys past the retention.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use rocksdb::{
    BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, Direction, IteratorMode, Options,
    ReadOptions, SnapshotWithThreadMode, WriteBatch, WriteOptions, DB,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{ForgetSummary, Op, PurgeSummary, StateStore, StoreError};
use crate::base::clock::UnixMillis;
use crate::model::series::{Resolution, Sample, Series};
use crate::model::state::{FileEntry, PartitionCounts, SeenEntry, TableSnapshot, TableState};

/// Column families, defined in this one place.
pub mod cf {
    /// table → [`TableState`](crate::model::state::TableState)
    pub const TABLES: &str = "tables";
    /// table \0 partition → [`PartitionCounts`](crate::model::state::PartitionCounts)
    pub const PARTITIONS: &str = "partitions";
    /// bucket \0 key → [`SeenEntry`](crate::model::state::SeenEntry)
    pub const SEEN: &str = "seen";
    /// table \0 sequence (big endian) → [`FileEntry`](crate::model::state::FileEntry)
    pub const FILES: &str = "files";
    /// first seen (8 bytes, in time order) \0 bucket \0 key → table: every `seen` key, in the
    /// order the retention purge forgets them
    pub const SEEN_BY_TIME: &str = "seen_by_time";
    /// table \0 sequence (big endian) → [`RunRecord`](crate::model::state::RunRecord): the run history
    pub const RUNS: &str = "runs";
    /// table \0 resolution (`m` or `h`) slot (big endian, minutes or hours since the epoch) →
    /// [`Sample`](crate::model::series::Sample): the small-files series
    pub const SERIES: &str = "series";
    pub const ALL: [&str; 7] = [TABLES, PARTITIONS, SEEN, FILES, SEEN_BY_TIME, RUNS, SERIES];
}

const SEPARATOR: u8 = 0;

mod keys;
use keys::*;

pub struct RocksStore {
    /// `None` while a reopen after a failed write has not succeeded.
    db: RwLock<Option<DB>>,
    path: PathBuf,
    read_only: bool,
    /// Set by a failed write: from then on nothing reaches RocksDB until [`StateStore::recover`]
    /// has reopened the database (RocksDB may keep a failed write in its memtable, and a write
    /// to a file that failed before is what its assertions abort on).
    failed: AtomicBool,
    /// Commits hold it shared, a purge step alone: no commit lands between a step's reads of
    /// `seen` and `files` and its deletes, so a commit that makes an expired key's file pending
    /// again (a truth read finding it) either comes before the reads, which then see the file in
    /// the log, or after the deletes, and writes the key again itself.
    purge_exclusion: RwLock<()>,
    /// How many remembered keys this open indexed by time (a store written before the index);
    /// `None` when the store had the index already.
    seen_keys_indexed_at_open: Option<u64>,
    /// The store had no remembered keys and no marker yet: the next synced write adds the marker
    /// (an open writes nothing then, so a service starts on a disk that refuses writes).
    seen_index_marker_due: AtomicBool,
}

/// The open database, held for reading (a reopen waits for every holder).
struct OpenDb<'a>(RwLockReadGuard<'a, Option<DB>>);

impl Deref for OpenDb<'_> {
    type Target = DB;

    fn deref(&self) -> &DB {
        self.0.as_ref().expect("checked when taken")
    }
}

/// The key, in RocksDB's default family, that [`StateStore::recover`] writes to prove the store
/// takes synced writes again.
const PROBE_KEY: &[u8] = b"icepack.probe";
const PROBE_BYTES: usize = 1 << 20;
/// The key, in the default family, that says every `seen` key has its `seen_by_time` entry.
const SEEN_INDEX_MARKER: &[u8] = b"icepack.seen_by_time";
/// Index entries a purge step examines (and the longest it holds commits back: one multi-get of
/// as many `seen` entries, one of `files`, one unsynced write).
const PURGE_STEP: usize = 1_000;
/// Index entries written per batch when a store from before the index is indexed.
const INDEX_BATCH: usize = 10_000;

impl RocksStore {
    /// Opens (or creates) the store for writing; fails fast when another process holds it.
    pub fn open(path: &Path) -> Result<RocksStore, StoreError> {
        std::fs::create_dir_all(path).map_err(|error| StoreError::Open {
            path: path.display().to_string(),
            message: format!("cannot create the directory: {error}"),
        })?;
        let mut store = RocksStore {
            db: RwLock::new(Some(Self::open_db(path)?)),
            path: path.to_path_buf(),
            read_only: false,
            failed: AtomicBool::new(false),
            purge_exclusion: RwLock::new(()),
            seen_keys_indexed_at_open: None,
            seen_index_marker_due: AtomicBool::new(false),
        };
        store.seen_keys_indexed_at_open = store.index_seen_keys()?;
        Ok(store)
    }

    /// How many remembered keys this open indexed by first-seen time: `Some` only for the first
    /// open of a store written before the index existed.
    pub fn seen_keys_indexed_at_open(&self) -> Option<u64> {
        self.seen_keys_indexed_at_open
    }

    /// Indexes the remembered keys of a store written before `seen_by_time` existed, once: every
    /// `seen` key gets its index entry, then a marker says the index is whole (from then on every
    /// commit that remembers a key indexes it in the same batch). An open interrupted midway does
    /// it again from the start; the entries are the same. A value that does not decode is not
    /// indexed, so never purged (the full-scan purge before the index stopped at it). A store
    /// without remembered keys has nothing to index: its marker comes with the next write.
    fn index_seen_keys(&self) -> Result<Option<u64>, StoreError> {
        let db = self.db()?;
        if db.get(SEEN_INDEX_MARKER).map_err(read_error)?.is_some() {
            return Ok(None);
        }
        let seen = family(&db, cf::SEEN)?;
        if db.iterator_cf(seen, IteratorMode::Start).next().is_none() {
            self.seen_index_marker_due.store(true, Ordering::SeqCst);
            return Ok(Some(0));
        }
        let index = family(&db, cf::SEEN_BY_TIME)?;
        let mut indexed = 0;
        let mut undecodable = 0u64;
        let mut batch = WriteBatch::default();
        for item in db.iterator_cf(seen, IteratorMode::Start) {
            let (key, value) = item.map_err(read_error)?;
            match serde_json::from_slice::<SeenIndexFields>(&value) {
                Ok(fields) => {
                    batch.put_cf(
                        index,
                        index_key(fields.first_seen_millis, &key),
                        fields.table.as_bytes(),
                    );
                    indexed += 1;
                }
                Err(_) => undecodable += 1,
            }
            if batch.len() >= INDEX_BATCH {
                self.write_with(&db, std::mem::take(&mut batch), false)?;
            }
        }
        batch.put(SEEN_INDEX_MARKER, b"1");
        self.write_with(&db, batch, true)?;
        if indexed > 0 {
            info!(
                indexed,
                "indexed the remembered object keys by first-seen time (a store from before the index)"
            );
        }
        if undecodable > 0 {
            warn!(
                undecodable,
                "remembered object keys whose values do not decode are not indexed and never purged"
            );
        }
        Ok(Some(indexed))
    }

    fn open_db(path: &Path) -> Result<DB, StoreError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_keep_log_file_num(5);
        // One budget for all memtables (RocksDB's default is 64 MiB × 2 per family, which a
        // million pending files fill to ~300 MiB): flushes come sooner, memory stays bounded.
        options.set_db_write_buffer_size(64 << 20);
        // Table files kept open (RocksDB's default is all of them): bounds the descriptors a
        // growing state can take from the process's limit.
        options.set_max_open_files(256);
        // RocksDB's own LOG file: only fatal lines. On a full disk the LOG's first failed append
        // marks its writer failed, and the error handler's next line to it aborts the process
        // in builds with assertions (Debian's librocksdb 7.8.3, the image's):
        // `WritableFileWriter::AssertFalseAndGetStatusForPrevError`. icepack logs every store
        // error itself.
        options.set_log_level(rocksdb::LogLevel::Fatal);
        let descriptors = Self::family_names(&options, path).into_iter().map(|name| {
            let options = Self::family_options(&name);
            ColumnFamilyDescriptor::new(name, options)
        });
        DB::open_cf_descriptors(&options, path, descriptors)
            .map_err(|error| open_error(path, error))
    }

    /// Opens a point-in-time, read-only view; works while a service holds the store. Families the
    /// store does not have yet (a service still creating them) read as empty.
    pub fn open_read_only(path: &Path) -> Result<RocksStore, StoreError> {
        let options = Options::default();
        let names = DB::list_cf(&options, path).map_err(|error| open_error(path, error))?;
        let db = DB::open_cf_for_read_only(&options, path, names, false)
            .map_err(|error| open_error(path, error))?;
        Ok(RocksStore {
            db: RwLock::new(Some(db)),
            path: path.to_path_buf(),
            read_only: true,
            failed: AtomicBool::new(false),
            purge_exclusion: RwLock::new(()),
            seen_keys_indexed_at_open: None,
            seen_index_marker_due: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The write batch a commit of `ops` writes (public so benchmarks can weigh it).
    pub fn write_batch(&self, ops: Vec<Op>) -> Result<WriteBatch, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                Op::PutTable { table, state } => {
                    batch.put_cf(family(&db, cf::TABLES)?, table.as_bytes(), encode(&state));
                }
                Op::PutPartition {
                    table,
                    partition,
                    counts,
                } => batch.put_cf(
                    family(&db, cf::PARTITIONS)?,
                    joined(table.as_bytes(), partition.as_bytes()),
                    encode(&counts),
                ),
                Op::DeletePartition { table, partition } => batch.delete_cf(
                    family(&db, cf::PARTITIONS)?,
                    joined(table.as_bytes(), partition.as_bytes()),
                ),
                Op::PutSeen { bucket, key, entry } => {
                    let seen_key = joined(bucket.as_bytes(), key.as_bytes());
                    batch.put_cf(
                        family(&db, cf::SEEN_BY_TIME)?,
                        index_key(entry.first_seen_millis, &seen_key),
                        entry.table.as_bytes(),
                    );
                    batch.put_cf(family(&db, cf::SEEN)?, seen_key, encode(&entry));
                }
                Op::PutFile { table, seq, entry } => batch.put_cf(
                    family(&db, cf::FILES)?,
                    joined(table.as_bytes(), &seq.to_be_bytes()),
                    encode(&entry),
                ),
                Op::DeleteFile { table, seq } => batch.delete_cf(
                    family(&db, cf::FILES)?,
                    joined(table.as_bytes(), &seq.to_be_bytes()),
                ),
                Op::DeleteFilesBelow { table, seq } => batch.delete_range_cf(
                    family(&db, cf::FILES)?,
                    joined(table.as_bytes(), &0u64.to_be_bytes()),
                    joined(table.as_bytes(), &seq.to_be_bytes()),
                ),
                Op::PutRun { table, seq, record } => batch.put_cf(
                    family(&db, cf::RUNS)?,
                    joined(table.as_bytes(), &seq.to_be_bytes()),
                    encode(&record),
                ),
                Op::DeleteRunsBelow { table, seq } => batch.delete_range_cf(
                    family(&db, cf::RUNS)?,
                    joined(table.as_bytes(), &0u64.to_be_bytes()),
                    joined(table.as_bytes(), &seq.to_be_bytes()),
                ),
                Op::PutSample {
                    table,
                    resolution,
                    slot,
                    sample,
                } => batch.put_cf(
                    family(&db, cf::SERIES)?,
                    sample_key(&table, resolution, slot),
                    encode(&sample),
                ),
                Op::DeleteSamplesBelow {
                    table,
                    resolution,
                    slot,
                } => batch.delete_range_cf(
                    family(&db, cf::SERIES)?,
                    sample_key(&table, resolution, i64::MIN),
                    sample_key(&table, resolution, slot),
                ),
            }
        }
        Ok(batch)
    }

    /// Writes a batch atomically and syncs the WAL before returning. A failure marks the store
    /// failed: nothing reaches RocksDB again until [`StateStore::recover`] reopens it.
    pub fn write_synced(&self, mut batch: WriteBatch) -> Result<(), StoreError> {
        let _shared = self
            .purge_exclusion
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let db = self.db()?;
        let marker_due = self.seen_index_marker_due.load(Ordering::SeqCst);
        if marker_due {
            batch.put(SEEN_INDEX_MARKER, b"1");
        }
        self.write_with(&db, batch, true)?;
        if marker_due {
            self.seen_index_marker_due.store(false, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Writes a batch atomically (synced or not) to the database the caller holds; every write
    /// goes through here. A failure marks the store failed.
    fn write_with(&self, db: &DB, batch: WriteBatch, sync: bool) -> Result<(), StoreError> {
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        let written = if crate::base::failpoint::store_write_error() {
            Err("IO error: No space left on device (failpoint store.write_error)".to_string())
        } else {
            db.write_opt(batch, &options)
                .map_err(|error| error.to_string())
        };
        written.map_err(|message| self.write_failed(message))
    }

    /// Marks the store failed after a write error and returns the error.
    fn write_failed(&self, message: String) -> StoreError {
        self.failed.store(true, Ordering::SeqCst);
        StoreError::Write(message)
    }

    /// The open database; refused while a failed write has not been recovered from.
    fn db(&self) -> Result<OpenDb<'_>, StoreError> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "a write failed; the store is reopened before it is used again".to_string(),
            ));
        }
        let guard = self.db.read().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            return Err(StoreError::Unavailable(
                "the store could not be reopened after a failed write".to_string(),
            ));
        }
        Ok(OpenDb(guard))
    }

    /// Options per family. Almost every `seen` lookup is of a key that is not there (a new
    /// object), and so is a starting accumulator's read of a table never counted before (most of
    /// a large fleet's tables the first time each has an event): whole-key bloom filters, in the
    /// table files and in the memtables, answer those without reading a block or searching the
    /// memtable's skip list.
    fn family_options(name: &str) -> Options {
        let mut options = Options::default();
        if name == cf::SEEN || name == cf::TABLES {
            let mut table = BlockBasedOptions::default();
            table.set_bloom_filter(10.0, false);
            table.set_whole_key_filtering(true);
            options.set_block_based_table_factory(&table);
            // The memtable's filter: 0.5% of its size (about 10 bits a `seen` entry in a full
            // one, 335 KiB at the default 64 MiB), allocated with each memtable.
            options.set_memtable_prefix_bloom_ratio(0.005);
            options.set_memtable_whole_key_filtering(true);
        }
        options
    }

    /// Every family the directory already has (a read-write open must name them all) plus ours.
    fn family_names(options: &Options, path: &Path) -> Vec<String> {
        let mut names = DB::list_cf(options, path).unwrap_or_default();
        for name in cf::ALL.iter().chain(std::iter::once(&"default")) {
            if !names.iter().any(|existing| existing == name) {
                names.push(name.to_string());
            }
        }
        names
    }

    /// A family to read; `None` in a read-only view of a store that does not have it yet.
    fn readable_family<'a>(
        &self,
        db: &'a DB,
        name: &str,
    ) -> Result<Option<&'a ColumnFamily>, StoreError> {
        match db.cf_handle(name) {
            Some(handle) => Ok(Some(handle)),
            None if self.read_only => Ok(None),
            None => Err(StoreError::Read(format!("column family {name} is missing"))),
        }
    }

    /// The raw `seen` values of (bucket, key) pairs, with their store keys, in one multi-get.
    #[allow(clippy::type_complexity)]
    fn seen_values(
        &self,
        objects: &[(&str, &str)],
    ) -> Result<Vec<(Vec<u8>, Option<Vec<u8>>)>, StoreError> {
        let keys: Vec<Vec<u8>> = objects
            .iter()
            .map(|(bucket, key)| joined(bucket.as_bytes(), key.as_bytes()))
            .collect();
        let db = self.db()?;
        let Some(handle) = self.readable_family(&db, cf::SEEN)? else {
            return Ok(keys.into_iter().map(|key| (key, None)).collect());
        };
        let values = db
            .multi_get_cf(keys.iter().map(|key| (handle, key.as_slice())))
            .into_iter()
            .map(|result| result.map_err(|error| StoreError::Read(error.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(keys.into_iter().zip(values).collect())
    }

    fn scan_prefix<T: DeserializeOwned>(
        &self,
        family: &str,
        prefix: &[u8],
    ) -> Result<Vec<(Vec<u8>, T)>, StoreError> {
        let db = self.db()?;
        let Some(handle) = self.readable_family(&db, family)? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        for item in db.iterator_cf(handle, IteratorMode::From(prefix, Direction::Forward)) {
            let (key, value) = item.map_err(|error| StoreError::Read(error.to_string()))?;
            if !key.starts_with(prefix) {
                break;
            }
            let decoded = decode(&key, &value)?;
            found.push((key[prefix.len()..].to_vec(), decoded));
        }
        Ok(found)
    }

    /// Up to `limit` keys of the time index in `[from, end)`, in order.
    /// A table's entries of a family keyed by table \0 sequence number (big endian), in order.
    fn scan_sequenced<T: DeserializeOwned>(
        &self,
        family: &str,
        table: &str,
    ) -> Result<Vec<(u64, T)>, StoreError> {
        self.scan_prefix::<T>(family, &joined(table.as_bytes(), b""))?
            .into_iter()
            .map(|(seq, value)| {
                let seq: [u8; 8] = seq.as_slice().try_into().map_err(|_| StoreError::Corrupt {
                    key: format!("{table}/{family}"),
                    message: "sequence number is not 8 bytes".to_string(),
                })?;
                Ok((u64::from_be_bytes(seq), value))
            })
            .collect()
    }

    fn index_keys(
        &self,
        from: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        let db = self.db()?;
        let index = family(&db, cf::SEEN_BY_TIME)?;
        let mut options = ReadOptions::default();
        options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = db.raw_iterator_cf_opt(index, options);
        iterator.seek(from);
        let mut keys = Vec::new();
        while keys.len() < limit {
            let Some(key) = iterator.key() else { break };
            keys.push(key.to_vec());
            iterator.next();
        }
        iterator.status().map_err(read_error)?;
        Ok(keys)
    }

    /// One purge step over index entries found before the cutoff, alone (no commit in between):
    /// a stale entry (its key is remembered under another time, or not at all) goes; a key whose
    /// file is in its table's log stays with its entry; every other key goes with its entry.
    fn purge_step(
        &self,
        indexed: &[Vec<u8>],
        summary: &mut PurgeSummary,
    ) -> Result<(), StoreError> {
        let _alone = self
            .purge_exclusion
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let db = self.db()?;
        let seen = family(&db, cf::SEEN)?;
        let files = family(&db, cf::FILES)?;
        let index = family(&db, cf::SEEN_BY_TIME)?;
        let seen_key = |indexed: &[u8]| indexed[TIME_PREFIX..].to_vec();
        let values = db.multi_get_cf(indexed.iter().map(|key| (seen, &key[TIME_PREFIX..])));
        let mut batch = WriteBatch::default();
        // Expired keys of files that may still be in the log: (index entry, log key).
        let mut maybe_logged = Vec::new();
        for (indexed, value) in indexed.iter().zip(values) {
            summary.examined += 1;
            let key = seen_key(indexed);
            let entry = match value.map_err(read_error)? {
                Some(value) => Some(decode::<SeenEntry>(&key, &value)?),
                None => None,
            };
            match entry {
                Some(entry) if index_key(entry.first_seen_millis, &key) == *indexed => {
                    match entry.seq {
                        Some(seq) => maybe_logged
                            .push((indexed, joined(entry.table.as_bytes(), &seq.to_be_bytes()))),
                        None => {
                            batch.delete_cf(seen, &key);
                            batch.delete_cf(index, indexed);
                            summary.purged += 1;
                        }
                    }
                }
                _ => {
                    batch.delete_cf(index, indexed);
                    summary.stale += 1;
                }
            }
        }
        let logged = db.multi_get_cf(
            maybe_logged
                .iter()
                .map(|(_, log_key)| (files, log_key.as_slice())),
        );
        for ((indexed, log_key), value) in maybe_logged.iter().zip(logged) {
            let key = seen_key(indexed);
            // The log entry under the key's sequence number is this key's file.
            let in_log = match value.map_err(read_error)? {
                Some(value) => {
                    let object: LoggedObject =
                        serde_json::from_slice(&value).map_err(|error| corrupt(log_key, error))?;
                    joined(object.bucket.as_bytes(), object.key.as_bytes()) == key
                }
                None => false,
            };
            if in_log {
                summary.kept_in_log += 1;
            } else {
                batch.delete_cf(seen, &key);
                batch.delete_cf(index, indexed);
                summary.purged += 1;
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        // Unsynced: a purge lost in a crash is done again by the next one.
        self.write_with(&db, batch, false)
    }

    /// How many keys of a family lie in `[start, end)` in the snapshot (values are not read
    /// into records: a value that does not decode is counted like any other).
    fn count_range(
        &self,
        snapshot: &SnapshotWithThreadMode<DB>,
        family: &ColumnFamily,
        (start, end): (&[u8], &[u8]),
    ) -> Result<u64, StoreError> {
        let mut options = ReadOptions::default();
        options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = snapshot.raw_iterator_cf_opt(family, options);
        iterator.seek(start);
        let mut count = 0;
        while iterator.valid() {
            count += 1;
            iterator.next();
        }
        iterator
            .status()
            .map_err(|error| StoreError::Read(error.to_string()))?;
        Ok(count)
    }
}

impl StateStore for RocksStore {
    fn load_table(&self, table: &str) -> Result<TableSnapshot, StoreError> {
        let db = self.db()?;
        let Some(tables) = self.readable_family(&db, cf::TABLES)? else {
            return Ok(TableSnapshot::default());
        };
        let state = match db
            .get_cf(tables, table.as_bytes())
            .map_err(|error| StoreError::Read(error.to_string()))?
        {
            Some(bytes) => decode::<TableState>(table.as_bytes(), &bytes)?,
            None => TableState::default(),
        };
        drop(db);
        let partitions = self
            .scan_prefix::<PartitionCounts>(cf::PARTITIONS, &joined(table.as_bytes(), b""))?
            .into_iter()
            .map(|(partition, counts)| (String::from_utf8_lossy(&partition).into_owned(), counts))
            .collect();
        Ok(TableSnapshot { state, partitions })
    }

    fn seen(&self, objects: &[(&str, &str)]) -> Result<Vec<bool>, StoreError> {
        Ok(self
            .seen_values(objects)?
            .into_iter()
            .map(|(_, value)| value.is_some())
            .collect())
    }

    fn seen_entries(&self, objects: &[(&str, &str)]) -> Result<Vec<Option<SeenEntry>>, StoreError> {
        self.seen_values(objects)?
            .into_iter()
            .map(|(key, value)| value.map(|value| decode(&key, &value)).transpose())
            .collect()
    }

    fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        let batch = self.write_batch(ops)?;
        self.write_synced(batch)
    }

    fn purge_seen_before(&self, cutoff: UnixMillis) -> Result<PurgeSummary, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let end = time_key(cutoff);
        let mut from = Vec::new();
        let mut summary = PurgeSummary::default();
        loop {
            let indexed = self.index_keys(&from, &end, PURGE_STEP)?;
            let Some(last) = indexed.last() else {
                break;
            };
            // Kept entries stay: the next step starts right after this one's last entry.
            from = joined(last, b"");
            self.purge_step(&indexed, &mut summary)?;
            if indexed.len() < PURGE_STEP {
                break;
            }
        }
        Ok(summary)
    }

    fn files(&self, table: &str) -> Result<Vec<(u64, FileEntry)>, StoreError> {
        self.scan_sequenced(cf::FILES, table)
    }

    fn runs(&self, table: &str) -> Result<Vec<(u64, crate::model::state::RunRecord)>, StoreError> {
        self.scan_sequenced(cf::RUNS, table)
    }

    fn series(&self, table: &str) -> Result<Series, StoreError> {
        let mut series = Series::default();
        for (key, sample) in
            self.scan_prefix::<Sample>(cf::SERIES, &joined(table.as_bytes(), b""))?
        {
            let corrupt = || StoreError::Corrupt {
                key: format!("{table}/{}", cf::SERIES),
                message: "a sample key is not a resolution and 8 bytes".to_string(),
            };
            let (&tag, slot) = key.split_first().ok_or_else(corrupt)?;
            let slot: [u8; 8] = slot.try_into().map_err(|_| corrupt())?;
            let slot = slot_from_key(slot);
            match Resolution::from_tag(tag).ok_or_else(corrupt)? {
                Resolution::Minute => series.minutes.push((slot, sample)),
                Resolution::Hour => series.hours.push((slot, sample)),
            }
        }
        Ok(series)
    }

    fn needs_recovery(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Reopens the database when a write failed (what RocksDB kept of the failed write in memory
    /// is gone; what reached the log is replayed, as after a crash), then commits a synced probe.
    fn recover(&self) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        {
            let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
            if self.failed.load(Ordering::SeqCst) || db.is_none() {
                // Closed before it is opened again: the directory's LOCK is the old handle's.
                drop(db.take());
                *db = Some(Self::open_db(&self.path)?);
                self.failed.store(false, Ordering::SeqCst);
            }
        }
        // A probe the size of a large intake group: a disk with a few bytes left takes a tiny
        // write, then refuses the next real commit, and each such false start costs every
        // message received meanwhile one receive on the way to the dead-letter queue.
        let mut batch = WriteBatch::default();
        batch.put(PROBE_KEY, vec![0x5a; PROBE_BYTES]);
        self.write_synced(batch)?;
        let mut batch = WriteBatch::default();
        batch.delete(PROBE_KEY);
        self.write_synced(batch)
    }

    fn forget_table(&self, table: &str) -> Result<ForgetSummary, StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let db = self.db()?;
        let tables = family(&db, cf::TABLES)?;
        let partitions = family(&db, cf::PARTITIONS)?;
        let files = family(&db, cf::FILES)?;
        let runs = family(&db, cf::RUNS)?;
        let series = family(&db, cf::SERIES)?;
        let seen = family(&db, cf::SEEN)?;
        let index = family(&db, cf::SEEN_BY_TIME)?;
        // Counts from one point in time; the range deletes below also take whatever the table
        // got since.
        let snapshot = db.snapshot();
        let (start, end) = table_range(table);
        let range = (start.as_slice(), end.as_slice());
        let mut summary = ForgetSummary {
            table_state: snapshot
                .get_cf(tables, table.as_bytes())
                .map_err(|error| StoreError::Read(error.to_string()))?
                .is_some(),
            partitions: self.count_range(&snapshot, partitions, range)?,
            files: self.count_range(&snapshot, files, range)?,
            seen_keys: 0,
        };
        let mut batch = WriteBatch::default();
        batch.delete_cf(tables, table.as_bytes());
        batch.delete_range_cf(partitions, &start, &end);
        batch.delete_range_cf(files, &start, &end);
        batch.delete_range_cf(runs, &start, &end);
        batch.delete_range_cf(series, &start, &end);
        // `seen` is keyed by bucket and object key; its index names each key's table, so the
        // whole index is read (small values, nothing decoded). A stale index entry may name a
        // table its key has left: a key goes only when its entry names this table.
        let mut named = BTreeSet::new();
        for item in snapshot.iterator_cf(index, IteratorMode::Start) {
            let (key, value) = item.map_err(read_error)?;
            if *value == *table.as_bytes() {
                batch.delete_cf(index, &key);
                named.insert(key[TIME_PREFIX..].to_vec());
            }
        }
        let named: Vec<Vec<u8>> = named.into_iter().collect();
        for keys in named.chunks(PURGE_STEP) {
            let values = snapshot.multi_get_cf(keys.iter().map(|key| (seen, key.as_slice())));
            for (key, value) in keys.iter().zip(values) {
                let Some(value) = value.map_err(read_error)? else {
                    continue;
                };
                let owner: SeenOwner =
                    serde_json::from_slice(&value).map_err(|error| corrupt(key, error))?;
                if owner.table == table {
                    batch.delete_cf(seen, key);
                    summary.seen_keys += 1;
                }
            }
        }
        drop(snapshot);
        drop(db);
        self.write_synced(batch)?;
        Ok(summary)
    }
}
