//! Turning a batch of SQS message bodies into per-table candidates: parse, route, classify.
//! Pure; the [`IntakeRouter`](crate::intake::router::IntakeRouter) actor runs it and commits.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::base::clock::UnixMillis;
use crate::config::TableSpec;
use crate::intake::event::{parse_message, MessageBody};
use crate::intake::routing::{partition_of, Disposition, IgnoreReason, Router, TableIndex};

/// A record that routed to a table as a small data file, a manifest or a delete file; not yet
/// checked for duplicates. Born here, counted by the table's accumulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    pub event_millis: UnixMillis,
    pub partition: String,
    pub kind: FileKind,
}

/// What an announced file is to its table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileKind {
    /// A small data file: pending until a run compacts it.
    #[default]
    Data,
    /// A new manifest: counted toward `max_manifests`, never pending.
    Manifest,
    /// A new delete file: counted toward `delete_file_threshold`, never pending.
    Delete,
}

/// The (bucket, key) of each candidate, in order: what is looked up in the `seen` family.
pub fn object_keys(candidates: &[Candidate]) -> Vec<(&str, &str)> {
    candidates
        .iter()
        .map(|candidate| (candidate.bucket.as_str(), candidate.key.as_str()))
        .collect()
}

/// One message as received from the queue (or read by `replay`).
#[derive(Debug, Clone)]
pub struct InboundMessage {
    pub id: String,
    pub body: String,
}

/// Counts over a batch of messages; the JSON shape is `replay`'s summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IntakeSummary {
    pub messages: u64,
    pub invalid_messages: u64,
    pub records: u64,
    pub counted: u64,
    pub ignored: IgnoredCounts,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IgnoredCounts {
    pub not_created: u64,
    pub unrouted: u64,
    pub not_data_file: u64,
    pub large_file: u64,
    pub duplicate: u64,
}

impl IgnoredCounts {
    pub fn add(&mut self, reason: IgnoreReason, count: u64) {
        let slot = match reason {
            IgnoreReason::NotCreated => &mut self.not_created,
            IgnoreReason::Unrouted => &mut self.unrouted,
            IgnoreReason::NotDataFile => &mut self.not_data_file,
            IgnoreReason::LargeFile => &mut self.large_file,
            IgnoreReason::Duplicate => &mut self.duplicate,
        };
        *slot += count;
    }

    pub fn get(&self, reason: IgnoreReason) -> u64 {
        match reason {
            IgnoreReason::NotCreated => self.not_created,
            IgnoreReason::Unrouted => self.unrouted,
            IgnoreReason::NotDataFile => self.not_data_file,
            IgnoreReason::LargeFile => self.large_file,
            IgnoreReason::Duplicate => self.duplicate,
        }
    }
}

impl IntakeSummary {
    pub fn merge(&mut self, other: &IntakeSummary) {
        self.messages += other.messages;
        self.invalid_messages += other.invalid_messages;
        self.records += other.records;
        self.counted += other.counted;
        for reason in IgnoreReason::ALL {
            self.ignored.add(reason, other.ignored.get(reason));
        }
    }
}

/// What happens to a message once the batch is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every record's effect is durable: delete it from the queue.
    Delete,
    /// The message (or one of its records) could not be parsed: leave it for redelivery and, after
    /// the queue's `maxReceiveCount`, its dead-letter queue. Its valid records are still counted.
    Keep { error: String },
}

/// A batch after parsing and routing, before duplicate checks and the commit.
#[derive(Debug, Default)]
pub struct IntakePlan {
    pub verdicts: Vec<Verdict>,
    pub candidates: BTreeMap<TableIndex, Vec<Candidate>>,
    pub summary: IntakeSummary,
}

pub fn plan_batch<S: Borrow<TableSpec>>(
    messages: &[InboundMessage],
    router: &Router,
    tables: &[S],
) -> IntakePlan {
    let mut plan = IntakePlan::default();
    for message in messages {
        plan.summary.messages += 1;
        let records = match parse_message(&message.body) {
            Ok(MessageBody::TestEvent) => Vec::new(),
            Ok(MessageBody::Records(records)) => records,
            Err(error) => {
                plan.summary.invalid_messages += 1;
                plan.verdicts.push(Verdict::Keep {
                    error: error.to_string(),
                });
                continue;
            }
        };
        let mut record_errors = Vec::new();
        for (position, record) in records.into_iter().enumerate() {
            let record = match record {
                Ok(record) => record,
                Err(error) => {
                    record_errors.push(format!("record {position}: {error}"));
                    continue;
                }
            };
            plan.summary.records += 1;
            match router.classify(tables, &record) {
                Disposition::Ignore(reason) => plan.summary.ignored.add(reason, 1),
                Disposition::Candidate { table, size } => {
                    let partition = partition_of(&tables[table].borrow().prefix, &record.key);
                    plan.candidates.entry(table).or_default().push(Candidate {
                        bucket: record.bucket,
                        key: record.key,
                        size,
                        event_millis: record.event_millis,
                        partition,
                        kind: FileKind::Data,
                    });
                }
                metadata @ (Disposition::Manifest { .. } | Disposition::DeleteFile { .. }) => {
                    let (table, kind) = match metadata {
                        Disposition::Manifest { table } => (table, FileKind::Manifest),
                        Disposition::DeleteFile { table } => (table, FileKind::Delete),
                        _ => unreachable!("matched above"),
                    };
                    plan.candidates.entry(table).or_default().push(Candidate {
                        size: record.size.unwrap_or_default(),
                        bucket: record.bucket,
                        key: record.key,
                        event_millis: record.event_millis,
                        partition: String::new(),
                        kind,
                    });
                }
            }
        }
        if record_errors.is_empty() {
            plan.verdicts.push(Verdict::Delete);
        } else {
            plan.summary.invalid_messages += 1;
            plan.verdicts.push(Verdict::Keep {
                error: record_errors.join("; "),
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn tables() -> Vec<TableSpec> {
        Config::from_toml_str(
            "[[tables]]\ntable = \"a.orders\"\nbucket = \"lake\"\nprefix = \"w/orders/\"\n",
        )
        .unwrap()
        .table_specs()
    }

    fn record(name: &str, key: &str, size: u64) -> String {
        format!(
            r#"{{"eventVersion":"2.1","eventTime":"2024-05-01T12:00:00Z","eventName":"{name}","s3":{{"bucket":{{"name":"lake"}},"object":{{"key":"{key}","size":{size}}}}}}}"#
        )
    }

    fn message(id: &str, records: &[String]) -> InboundMessage {
        InboundMessage {
            id: id.to_string(),
            body: format!(r#"{{"Records":[{}]}}"#, records.join(",")),
        }
    }

    #[test]
    fn a_batch_is_classified_with_reasons() {
        let tables = tables();
        let router = Router::new(&tables);
        let messages = vec![
            message(
                "1",
                &[
                    record("ObjectCreated:Put", "w/orders/data/dt%3D1/a.parquet", 10),
                    record("ObjectRemoved:Delete", "w/orders/data/b.parquet", 0),
                    record("ObjectCreated:Put", "w/orders/metadata/v1.json", 10),
                    record("ObjectCreated:Put", "w/other/c.parquet", 10),
                    record(
                        "ObjectCreated:Put",
                        "w/orders/data/big.parquet",
                        64 * 1024 * 1024,
                    ),
                ],
            ),
            InboundMessage {
                id: "2".to_string(),
                body: "not json".to_string(),
            },
            message(
                "3",
                &[
                    record("ObjectCreated:Put", "w/orders/data/d.parquet", 10),
                    r#"{"eventVersion":"3.0"}"#.to_string(),
                ],
            ),
        ];
        let plan = plan_batch(&messages, &router, &tables);
        assert_eq!(plan.verdicts[0], Verdict::Delete);
        assert!(matches!(plan.verdicts[1], Verdict::Keep { .. }));
        assert!(matches!(&plan.verdicts[2], Verdict::Keep { error } if error.contains("record 1")));
        assert_eq!(plan.summary.messages, 3);
        assert_eq!(plan.summary.invalid_messages, 2);
        assert_eq!(plan.summary.records, 6);
        assert_eq!(plan.summary.ignored.not_created, 1);
        assert_eq!(plan.summary.ignored.not_data_file, 1);
        assert_eq!(plan.summary.ignored.unrouted, 1);
        assert_eq!(plan.summary.ignored.large_file, 1);
        let candidates = &plan.candidates[&0];
        assert_eq!(candidates.len(), 2);
        assert_eq!(candidates[0].key, "w/orders/data/dt=1/a.parquet");
        assert_eq!(candidates[0].partition, "dt=1");
    }
}
