//! How the RocksDB store lays its records out: keys that sort as their parts do, the JSON values,
//! the borrowed views of a value that a scan needs, and the errors of each.

use super::*;

/// The keys of a table's records in a per-table family (`table \0 ...`), as the range
/// `[table \0, table \1)`: exactly the keys with that prefix, so no other table's (`a.bc`,
/// `a.b.c` for `a.b`).
pub(super) fn table_range(table: &str) -> (Vec<u8>, Vec<u8>) {
    let start = joined(table.as_bytes(), b"");
    let mut end = table.as_bytes().to_vec();
    end.push(SEPARATOR + 1);
    (start, end)
}

/// The one field of a [`SeenEntry`] that forgetting a table reads, without copying it.
#[derive(Deserialize)]
pub(super) struct SeenOwner<'a> {
    #[serde(borrow)]
    pub(super) table: Cow<'a, str>,
}

/// The fields of a [`SeenEntry`] its index entry is made of.
#[derive(Deserialize)]
pub(super) struct SeenIndexFields<'a> {
    #[serde(borrow)]
    pub(super) table: Cow<'a, str>,
    pub(super) first_seen_millis: UnixMillis,
}

/// The object of a [`FileEntry`], to tell whether a log entry is a remembered key's file.
#[derive(Deserialize)]
pub(super) struct LoggedObject<'a> {
    #[serde(borrow)]
    pub(super) bucket: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) key: Cow<'a, str>,
}

/// Length of an index key's time and separator, before the `seen` key.
pub(super) const TIME_PREFIX: usize = 9;

/// A time as 8 bytes that sort like the times (big endian, sign bit flipped).
pub(super) fn time_key(millis: UnixMillis) -> [u8; 8] {
    ((millis as u64) ^ (1 << 63)).to_be_bytes()
}

/// The `seen_by_time` key of a `seen` key (bucket \0 key) first seen at `first_seen_millis`.
pub(super) fn index_key(first_seen_millis: UnixMillis, seen_key: &[u8]) -> Vec<u8> {
    joined(&time_key(first_seen_millis), seen_key)
}

pub(super) fn family<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, StoreError> {
    db.cf_handle(name)
        .ok_or_else(|| StoreError::Read(format!("column family {name} is missing")))
}

pub(super) fn joined(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(first.len() + 1 + second.len());
    key.extend_from_slice(first);
    key.push(SEPARATOR);
    key.extend_from_slice(second);
    key
}

/// table \0 resolution slot: a slot's sign bit flipped, so big-endian bytes sort like the numbers.
pub(super) fn sample_key(table: &str, resolution: Resolution, slot: i64) -> Vec<u8> {
    let mut suffix = vec![resolution.tag()];
    suffix.extend_from_slice(&((slot as u64) ^ (1 << 63)).to_be_bytes());
    joined(table.as_bytes(), &suffix)
}

pub(super) fn slot_from_key(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("state values always serialize")
}

pub(super) fn decode<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(value).map_err(|error| corrupt(key, error))
}

pub(super) fn read_error(error: rocksdb::Error) -> StoreError {
    StoreError::Read(error.to_string())
}

pub(super) fn corrupt(key: &[u8], error: serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        key: String::from_utf8_lossy(key).replace('\0', "/"),
        message: error.to_string(),
    }
}

pub(super) fn open_error(path: &Path, error: rocksdb::Error) -> StoreError {
    let message = error.to_string();
    if message.contains("lock file") || message.contains("LOCK") {
        StoreError::Locked {
            path: path.display().to_string(),
        }
    } else {
        StoreError::Open {
            path: path.display().to_string(),
            message,
        }
    }
}
