//! One suite, run against every store implementation.

use super::*;
use crate::model::state::PendingCounts;

fn file(key: &str) -> FileEntry {
    FileEntry {
        bucket: "b".to_string(),
        key: key.to_string(),
        size: 10,
        event_millis: 5,
        partition: "dt=1".to_string(),
        source: crate::model::state::FileSource::Events,
    }
}

fn exercise(store: &dyn StateStore) {
    assert_eq!(store.load_table("n.t").unwrap(), TableSnapshot::default());
    let state = TableState {
        pending: PendingCounts {
            files: 2,
            bytes: 20,
            oldest_event_millis: Some(5),
            newest_event_millis: Some(6),
        },
        next_file_seq: 2,
        ..TableState::default()
    };
    store
        .commit(vec![
            Op::PutTable {
                table: "n.t".to_string(),
                state: state.clone(),
            },
            Op::PutPartition {
                table: "n.t".to_string(),
                partition: "dt=1".to_string(),
                counts: PartitionCounts {
                    files: 2,
                    bytes: 20,
                    ..Default::default()
                },
            },
            Op::PutPartition {
                table: "n.t".to_string(),
                partition: "dt=2".to_string(),
                counts: PartitionCounts {
                    files: 0,
                    bytes: 0,
                    ..Default::default()
                },
            },
            Op::PutPartition {
                table: "n.tt".to_string(),
                partition: "".to_string(),
                counts: PartitionCounts {
                    files: 9,
                    bytes: 9,
                    ..Default::default()
                },
            },
            Op::PutSeen {
                bucket: "b".to_string(),
                key: "k1".to_string(),
                entry: SeenEntry {
                    table: "n.t".to_string(),
                    first_seen_millis: 100,
                    seq: Some(1),
                },
            },
            Op::PutSeen {
                bucket: "b".to_string(),
                key: "k2".to_string(),
                entry: SeenEntry {
                    table: "n.t".to_string(),
                    first_seen_millis: 200,
                    seq: None,
                },
            },
            Op::PutFile {
                table: "n.t".to_string(),
                seq: 256,
                entry: file("k2"),
            },
            Op::PutFile {
                table: "n.t".to_string(),
                seq: 1,
                entry: file("k1"),
            },
        ])
        .unwrap();
    store
        .commit(vec![Op::DeletePartition {
            table: "n.t".to_string(),
            partition: "dt=2".to_string(),
        }])
        .unwrap();

    let loaded = store.load_table("n.t").unwrap();
    assert_eq!(loaded.state, state);
    assert_eq!(
        loaded.partitions.len(),
        1,
        "other tables' partitions stay out"
    );
    assert_eq!(
        loaded.partitions["dt=1"],
        PartitionCounts {
            files: 2,
            bytes: 20,
            ..Default::default()
        }
    );
    assert_eq!(
        store
            .seen(&[("b", "k1"), ("b", "k3"), ("c", "k1")])
            .unwrap(),
        vec![true, false, false]
    );
    let files = store.files("n.t").unwrap();
    assert_eq!(
        files.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        vec![1, 256]
    );
    assert_eq!(files[0].1.key, "k1");

    assert_eq!(
        store.seen_entries(&[("b", "k2"), ("b", "zz")]).unwrap(),
        vec![
            Some(SeenEntry {
                table: "n.t".to_string(),
                first_seen_millis: 200,
                seq: None,
            }),
            None
        ]
    );
    store
        .commit(vec![
            Op::PutFile {
                table: "n.t".to_string(),
                seq: 300,
                entry: file("k3"),
            },
            Op::PutFile {
                table: "n.tt".to_string(),
                seq: 1,
                entry: file("other"),
            },
            Op::DeleteFilesBelow {
                table: "n.t".to_string(),
                seq: 256,
            },
        ])
        .unwrap();
    let seqs = |table: &str| {
        store
            .files(table)
            .unwrap()
            .iter()
            .map(|(seq, _)| *seq)
            .collect::<Vec<_>>()
    };
    assert_eq!(seqs("n.t"), vec![256, 300]);
    assert_eq!(seqs("n.tt"), vec![1], "other tables' files are untouched");
    store
        .commit(vec![Op::DeleteFile {
            table: "n.t".to_string(),
            seq: 300,
        }])
        .unwrap();
    assert_eq!(seqs("n.t"), vec![256]);

    assert_eq!(
        store.purge_seen_before(150).unwrap(),
        PurgeSummary {
            examined: 1,
            purged: 1,
            ..PurgeSummary::default()
        },
        "k1 (first seen at 100) left the log when files below 256 were deleted"
    );
    assert_eq!(
        store.seen(&[("b", "k1"), ("b", "k2")]).unwrap(),
        vec![false, true]
    );
}

#[test]
fn memory_store_behaves() {
    exercise(&MemoryStore::new());
}

#[test]
fn rocks_store_behaves() {
    let directory = tempfile::tempdir().unwrap();
    exercise(&RocksStore::open(directory.path()).unwrap());
}

#[test]
fn rocks_store_survives_reopen_and_reads_while_held() {
    let directory = tempfile::tempdir().unwrap();
    let store = RocksStore::open(directory.path()).unwrap();
    store
        .commit(vec![Op::PutTable {
            table: "n.t".to_string(),
            state: TableState {
                next_file_seq: 7,
                ..TableState::default()
            },
        }])
        .unwrap();
    let reader = RocksStore::open_read_only(directory.path()).unwrap();
    assert_eq!(reader.load_table("n.t").unwrap().state.next_file_seq, 7);
    assert!(matches!(reader.commit(vec![]), Err(StoreError::ReadOnly)));
    drop(store);
    let reopened = RocksStore::open(directory.path()).unwrap();
    assert_eq!(reopened.load_table("n.t").unwrap().state.next_file_seq, 7);
}

#[test]
fn a_read_only_view_of_a_store_without_our_families_reads_empty() {
    let directory = tempfile::tempdir().unwrap();
    // A store as a starting service may leave it for an instant: only the default family.
    let mut options = rocksdb::Options::default();
    options.create_if_missing(true);
    drop(rocksdb::DB::open(&options, directory.path()).unwrap());
    let reader = RocksStore::open_read_only(directory.path()).unwrap();
    assert_eq!(reader.load_table("n.t").unwrap(), TableSnapshot::default());
    assert_eq!(reader.seen(&[("b", "k")]).unwrap(), vec![false]);
    assert!(reader.files("n.t").unwrap().is_empty());
}

#[test]
fn a_second_writer_is_refused_with_a_clear_error() {
    let directory = tempfile::tempdir().unwrap();
    let _held = RocksStore::open(directory.path()).unwrap();
    let error = RocksStore::open(directory.path())
        .err()
        .expect("second open must fail");
    assert!(matches!(error, StoreError::Locked { .. }), "{error}");
    assert!(error
        .to_string()
        .contains("in use by another icepack process"));
}

#[test]
fn memory_store_can_fail_commits() {
    let store = MemoryStore::new();
    store.fail_commits(true);
    assert!(store.commit(vec![]).is_err());
    store.fail_commits(false);
    store.commit(vec![]).unwrap();
    assert_eq!(store.num_commits(), 1);
}

/// Every record a table can have: a state, two partitions, three logged files (sequence numbers
/// at both ends of the range) and two remembered keys, one a compaction's own output. Each table
/// also remembers a key in a bucket of its own.
fn put_whole_table(store: &dyn StateStore, table: &str) {
    let seen = |bucket: &str, key: String, seq| Op::PutSeen {
        bucket: bucket.to_string(),
        key,
        entry: SeenEntry {
            table: table.to_string(),
            first_seen_millis: 100,
            seq,
        },
    };
    let mut ops = vec![Op::PutTable {
        table: table.to_string(),
        state: TableState {
            next_file_seq: u64::MAX,
            ..TableState::default()
        },
    }];
    for partition in ["", "dt=1"] {
        ops.push(Op::PutPartition {
            table: table.to_string(),
            partition: partition.to_string(),
            counts: PartitionCounts {
                files: 1,
                bytes: 10,
                ..Default::default()
            },
        });
    }
    for seq in [0, 1, u64::MAX] {
        ops.push(Op::PutFile {
            table: table.to_string(),
            seq,
            entry: file(&format!("{table}/{seq}")),
        });
    }
    ops.push(seen("b", format!("{table}/1"), Some(1)));
    ops.push(seen("b", format!("{table}/out"), None));
    ops.push(seen(&format!("bucket-{table}"), "k".to_string(), Some(0)));
    store.commit(ops).unwrap();
}

/// The keys `put_whole_table` remembers for a table.
fn seen_keys_of(table: &str) -> Vec<(String, String)> {
    vec![
        ("b".to_string(), format!("{table}/1")),
        ("b".to_string(), format!("{table}/out")),
        (format!("bucket-{table}"), "k".to_string()),
    ]
}

/// All a store can tell of a table: its snapshot, its file log, what it remembers of its keys.
#[allow(clippy::type_complexity)]
fn everything_about(
    store: &dyn StateStore,
    table: &str,
) -> (TableSnapshot, Vec<(u64, FileEntry)>, Vec<Option<SeenEntry>>) {
    let keys = seen_keys_of(table);
    let keys: Vec<(&str, &str)> = keys.iter().map(|(b, k)| (b.as_str(), k.as_str())).collect();
    (
        store.load_table(table).unwrap(),
        store.files(table).unwrap(),
        store.seen_entries(&keys).unwrap(),
    )
}

fn forget(store: &dyn StateStore) {
    // Names that share prefixes with `a.b` both ways; in the RocksDB store, table and partition
    // (or sequence number) are joined with a 0 byte.
    let tables = ["a", "a.b", "a.bc", "a.b.c", "a.b_c"];
    for table in tables {
        put_whole_table(store, table);
    }
    let before: Vec<_> = tables
        .iter()
        .map(|table| everything_about(store, table))
        .collect();
    assert_eq!(before[1].0.partitions.len(), 2);
    assert_eq!(before[1].1.len(), 3);
    assert!(before[1].2.iter().all(Option::is_some));

    assert_eq!(
        store.forget_table("a.b").unwrap(),
        ForgetSummary {
            table_state: true,
            partitions: 2,
            files: 3,
            seen_keys: 3,
        }
    );

    assert_eq!(store.load_table("a.b").unwrap(), TableSnapshot::default());
    assert!(store.files("a.b").unwrap().is_empty());
    let keys = seen_keys_of("a.b");
    let keys: Vec<(&str, &str)> = keys.iter().map(|(b, k)| (b.as_str(), k.as_str())).collect();
    assert_eq!(store.seen(&keys).unwrap(), vec![false; 3]);
    assert_eq!(store.seen_entries(&keys).unwrap(), vec![None; 3]);
    for (table, before) in tables.iter().zip(&before) {
        if *table != "a.b" {
            assert_eq!(
                &everything_about(store, table),
                before,
                "{table} is untouched by forgetting a.b"
            );
        }
    }

    // Forgetting again, or a table never seen, finds nothing.
    assert_eq!(store.forget_table("a.b").unwrap(), ForgetSummary::default());
    assert_eq!(
        store.forget_table("never.seen").unwrap(),
        ForgetSummary::default()
    );

    // The shorter name takes nothing of the longer ones.
    assert_eq!(
        store.forget_table("a").unwrap(),
        ForgetSummary {
            table_state: true,
            partitions: 2,
            files: 3,
            seen_keys: 3,
        }
    );
    for (table, before) in tables.iter().zip(&before).skip(2) {
        assert_eq!(
            &everything_about(store, table),
            before,
            "{table} is untouched by forgetting a"
        );
    }

    // A forgotten table is counted afresh.
    put_whole_table(store, "a.b");
    assert_eq!(everything_about(store, "a.b"), before[1]);
}

#[test]
fn memory_store_forgets_one_table() {
    forget(&MemoryStore::new());
}

#[test]
fn rocks_store_forgets_one_table() {
    let directory = tempfile::tempdir().unwrap();
    forget(&RocksStore::open(directory.path()).unwrap());
}

#[test]
fn rocks_store_forgets_for_good_and_not_read_only() {
    let directory = tempfile::tempdir().unwrap();
    let store = RocksStore::open(directory.path()).unwrap();
    put_whole_table(&store, "a.b");
    put_whole_table(&store, "a.bc");
    let kept = everything_about(&store, "a.bc");

    let reader = RocksStore::open_read_only(directory.path()).unwrap();
    assert!(matches!(
        reader.forget_table("a.b"),
        Err(StoreError::ReadOnly)
    ));
    assert_eq!(store.load_table("a.b").unwrap().partitions.len(), 2);

    assert!(store.forget_table("a.b").unwrap().table_state);
    drop(reader);
    drop(store);
    let reopened = RocksStore::open(directory.path()).unwrap();
    assert_eq!(
        everything_about(&reopened, "a.b"),
        (TableSnapshot::default(), Vec::new(), vec![None; 3])
    );
    assert_eq!(everything_about(&reopened, "a.bc"), kept);
}

#[test]
fn memory_store_forget_fails_like_a_commit() {
    let store = MemoryStore::new();
    put_whole_table(&store, "a.b");
    store.fail_commits(true);
    assert!(store.forget_table("a.b").is_err());
    assert!(store.load_table("a.b").unwrap().state.next_file_seq > 0);
    store.fail_commits(false);
    assert!(store.forget_table("a.b").unwrap().table_state);
}

fn seen_op(table: &str, key: &str, first_seen_millis: UnixMillis, seq: Option<u64>) -> Op {
    Op::PutSeen {
        bucket: "b".to_string(),
        key: key.to_string(),
        entry: SeenEntry {
            table: table.to_string(),
            first_seen_millis,
            seq,
        },
    }
}

/// Issue 15 part 5: a purge reads the keys first seen before its cutoff, not the keys remembered.
/// More expired keys than one purge step; every hundredth expired key's file is still in the log.
fn purge_reads_only_expired_keys(store: &dyn StateStore) {
    const EXPIRED: u64 = 2_500;
    const RECENT: u64 = 5_000;
    let mut ops = vec![seen_op("n.t", "negative-time", -1_000, None)];
    for n in 0..EXPIRED {
        ops.push(seen_op(
            "n.t",
            &format!("old/{n}"),
            1_000 + n as i64,
            Some(n),
        ));
        if n % 100 == 0 {
            ops.push(Op::PutFile {
                table: "n.t".to_string(),
                seq: n,
                entry: file(&format!("old/{n}")),
            });
        }
    }
    for n in 0..RECENT {
        let seq = (n % 2 == 0).then_some(EXPIRED + n);
        ops.push(seen_op("n.t", &format!("new/{n}"), 10_000 + n as i64, seq));
    }
    store.commit(ops).unwrap();

    let first = store.purge_seen_before(5_000).unwrap();
    assert_eq!(
        first,
        PurgeSummary {
            examined: EXPIRED + 1,
            purged: EXPIRED + 1 - 25,
            kept_in_log: 25,
            stale: 0,
        },
        "the {RECENT} recent keys are not read"
    );
    let remembered = |key: &str| store.seen(&[("b", key)]).unwrap()[0];
    assert!(!remembered("old/1") && !remembered("negative-time"));
    assert!(remembered("old/100") && remembered("new/0") && remembered("new/1"));
    assert_eq!(
        store.purge_seen_before(5_000).unwrap(),
        PurgeSummary {
            examined: 25,
            kept_in_log: 25,
            ..PurgeSummary::default()
        },
        "the next purge reads only the keys it kept"
    );
    let all = store.purge_seen_before(UnixMillis::MAX).unwrap();
    assert_eq!((all.examined, all.purged), (25 + RECENT, RECENT));
}

#[test]
fn memory_store_purge_reads_only_expired_keys() {
    purge_reads_only_expired_keys(&MemoryStore::new());
}

#[test]
fn rocks_store_purge_reads_only_expired_keys() {
    let directory = tempfile::tempdir().unwrap();
    purge_reads_only_expired_keys(&RocksStore::open(directory.path()).unwrap());
}

/// Issue 15 part 5: a key whose file is still pending or claimed (its sequence number is in its
/// table's log under that key) outlives the retention, and goes once its file left the log.
fn pending_and_claimed_keys_outlive_the_retention(store: &dyn StateStore) {
    let state = TableState {
        next_file_seq: 4,
        claim: Some(crate::model::state::Claim {
            run_id: "run-1".to_string(),
            trigger: crate::model::task::Trigger::Files,
            started_millis: 150,
            upto_seq: 2,
            counts: PendingCounts::default(),
            partitions: Default::default(),
            task: crate::model::task::Task::Rewrite(crate::model::task::Rewrite {
                min_input_files: 2,
                ..crate::model::task::Rewrite::whole_table()
            }),
            nonce: String::new(),
        }),
        ..TableState::default()
    };
    let logged = |seq, key: &str| Op::PutFile {
        table: "n.t".to_string(),
        seq,
        entry: file(key),
    };
    store
        .commit(vec![
            Op::PutTable {
                table: "n.t".to_string(),
                state,
            },
            // Claimed (below the claim's upto_seq), claimed, pending.
            seen_op("n.t", "claimed-0", 100, Some(0)),
            logged(0, "claimed-0"),
            seen_op("n.t", "claimed-1", 100, Some(1)),
            logged(1, "claimed-1"),
            seen_op("n.t", "pending-3", 100, Some(3)),
            logged(3, "pending-3"),
            // Compacted earlier (its log entry is gone), a run's output, and a key whose
            // sequence number logs another key's file.
            seen_op("n.t", "compacted", 100, Some(2)),
            seen_op("n.t", "output", 100, None),
            seen_op("n.t", "other-seq", 100, Some(3)),
            // Another table's log has the sequence number: not this key's table.
            seen_op("n.u", "pending-3", 100, Some(3)),
        ])
        .unwrap();
    // (`n.u`'s key is the same object as `n.t`'s: the later put made it `n.u`'s.)
    let remembered = |keys: &[&str]| {
        let objects: Vec<(&str, &str)> = keys.iter().map(|key| ("b", *key)).collect();
        store.seen(&objects).unwrap()
    };
    assert_eq!(
        store.purge_seen_before(1_000).unwrap(),
        PurgeSummary {
            examined: 6,
            purged: 4,
            kept_in_log: 2,
            stale: 0,
        }
    );
    assert_eq!(
        remembered(&[
            "claimed-0",
            "claimed-1",
            "pending-3",
            "compacted",
            "output",
            "other-seq"
        ]),
        vec![true, true, false, false, false, false]
    );

    // Re-put `pending-3` as `n.t`'s; the purge keeps all three, every time it looks again.
    store
        .commit(vec![seen_op("n.t", "pending-3", 100, Some(3))])
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            store.purge_seen_before(1_000).unwrap(),
            PurgeSummary {
                examined: 3,
                kept_in_log: 3,
                ..PurgeSummary::default()
            }
        );
    }

    // The run succeeds: the claimed files leave the log, their keys can go; the pending one stays.
    store
        .commit(vec![Op::DeleteFilesBelow {
            table: "n.t".to_string(),
            seq: 2,
        }])
        .unwrap();
    assert_eq!(
        store.purge_seen_before(1_000).unwrap(),
        PurgeSummary {
            examined: 3,
            purged: 2,
            kept_in_log: 1,
            stale: 0,
        }
    );
    assert_eq!(
        remembered(&["claimed-0", "claimed-1", "pending-3"]),
        vec![false, false, true]
    );
}

#[test]
fn memory_store_keeps_the_keys_of_pending_and_claimed_files() {
    pending_and_claimed_keys_outlive_the_retention(&MemoryStore::new());
}

#[test]
fn rocks_store_keeps_the_keys_of_pending_and_claimed_files() {
    let directory = tempfile::tempdir().unwrap();
    pending_and_claimed_keys_outlive_the_retention(&RocksStore::open(directory.path()).unwrap());
}

/// A key remembered again under another first-seen time leaves its old index entry behind: the
/// purge drops that entry and keeps the key until its own time comes.
fn stale_index_entries_are_dropped(store: &dyn StateStore) {
    store.commit(vec![seen_op("n.t", "k", 100, None)]).unwrap();
    store.commit(vec![seen_op("n.t", "k", 300, None)]).unwrap();
    assert_eq!(
        store.purge_seen_before(200).unwrap(),
        PurgeSummary {
            examined: 1,
            stale: 1,
            ..PurgeSummary::default()
        }
    );
    assert_eq!(store.seen(&[("b", "k")]).unwrap(), vec![true]);
    assert_eq!(
        store.purge_seen_before(400).unwrap(),
        PurgeSummary {
            examined: 1,
            purged: 1,
            ..PurgeSummary::default()
        }
    );
    assert_eq!(store.seen(&[("b", "k")]).unwrap(), vec![false]);
}

#[test]
fn memory_store_drops_stale_index_entries() {
    stale_index_entries_are_dropped(&MemoryStore::new());
}

#[test]
fn rocks_store_drops_stale_index_entries() {
    let directory = tempfile::tempdir().unwrap();
    stale_index_entries_are_dropped(&RocksStore::open(directory.path()).unwrap());
}

/// Issue 15 part 5: forgetting a table takes its index entries (a stale one too), no other's.
fn forgetting_a_table_takes_its_index_entries(store: &dyn StateStore) {
    put_whole_table(store, "a.b");
    put_whole_table(store, "a.bc");
    // `a.b`'s output remembered again later: its first index entry is stale.
    store
        .commit(vec![seen_op("a.b", "a.b/out", 200, None)])
        .unwrap();
    assert_eq!(store.forget_table("a.b").unwrap().seen_keys, 3);
    // Only `a.bc`'s three keys are left in the index: the one of its logged file (sequence
    // number 1) is kept, the other two go.
    assert_eq!(
        store.purge_seen_before(UnixMillis::MAX).unwrap(),
        PurgeSummary {
            examined: 3,
            purged: 2,
            kept_in_log: 1,
            stale: 0,
        }
    );
}

/// Issue 20: a table's run history, in order, bounded by the range delete, gone with the table,
/// and not mixed with a table whose name extends this one's.
fn run_history(store: &dyn StateStore) {
    let run = |run_id: &str| crate::model::state::RunRecord {
        run_id: run_id.to_string(),
        trigger: crate::model::task::Trigger::Files,
        started_millis: 1,
        finished_millis: 2,
        claimed_files: 3,
        claimed_bytes: 4,
        succeeded: true,
        failure_class: None,
        error: None,
        result: None,
        output_files: 1,
        duration_millis: 1,
        attempts: 1,
        strategy: None,
        maintenance: None,
        manifests: None,
        orphan_files: None,
        delete_rewrite: None,
        statistics_files: None,
        partitions: vec!["d=1".to_string()],
        maintenance_failed: None,
        ran_on: None,
        left: Vec::new(),
    };
    let put = |table: &str, seq: u64| Op::PutRun {
        table: table.to_string(),
        seq,
        record: run(&format!("{table}-{seq}")),
    };
    store
        .commit(
            (0..5)
                .map(|seq| put("a.b", seq))
                .chain([put("a.bc", 0)])
                .collect(),
        )
        .unwrap();
    store
        .commit(vec![Op::DeleteRunsBelow {
            table: "a.b".to_string(),
            seq: 3,
        }])
        .unwrap();
    let ids = |table: &str| -> Vec<String> {
        store
            .runs(table)
            .unwrap()
            .into_iter()
            .map(|(_, run)| run.run_id)
            .collect()
    };
    assert_eq!(ids("a.b"), vec!["a.b-3", "a.b-4"]);
    assert_eq!(ids("a.bc"), vec!["a.bc-0"]);
    store.forget_table("a.b").unwrap();
    assert!(ids("a.b").is_empty());
    assert_eq!(ids("a.bc"), vec!["a.bc-0"]);
}

#[test]
fn memory_store_keeps_a_bounded_run_history() {
    run_history(&MemoryStore::new());
}

#[test]
fn rocks_store_keeps_a_bounded_run_history() {
    let directory = tempfile::tempdir().unwrap();
    run_history(&RocksStore::open(directory.path()).unwrap());
}

#[test]
fn memory_store_forgets_a_tables_index_entries() {
    forgetting_a_table_takes_its_index_entries(&MemoryStore::new());
}

#[test]
fn rocks_store_forgets_a_tables_index_entries() {
    let directory = tempfile::tempdir().unwrap();
    forgetting_a_table_takes_its_index_entries(&RocksStore::open(directory.path()).unwrap());
}

/// Issue 15 part 5, the upgrade: a store written before `seen_by_time` existed (the four families
/// of the earlier release, values as it wrote them) is indexed once, at its first open; the purge
/// then reads only its expired keys, and forgetting a table finds the table's keys.
#[test]
fn a_store_from_before_the_index_is_indexed_once_at_open() {
    let directory = tempfile::tempdir().unwrap();
    {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        let db = rocksdb::DB::open_cf(
            &options,
            directory.path(),
            ["tables", "partitions", "seen", "files"],
        )
        .unwrap();
        let seen = db.cf_handle("seen").unwrap();
        let put_seen = |key: &str, first_seen_millis, seq| {
            let entry = SeenEntry {
                table: "n.t".to_string(),
                first_seen_millis,
                seq,
            };
            db.put_cf(
                seen,
                format!("b\0{key}"),
                serde_json::to_vec(&entry).unwrap(),
            )
            .unwrap();
        };
        for n in 0..30 {
            put_seen(&format!("old/{n}"), 100 + n, None);
        }
        put_seen("old/pending", 100, Some(0));
        db.put_cf(
            db.cf_handle("files").unwrap(),
            b"n.t\0\0\0\0\0\0\0\0\0",
            serde_json::to_vec(&file("old/pending")).unwrap(),
        )
        .unwrap();
        for n in 0..300 {
            put_seen(&format!("new/{n}"), 10_000 + n, Some(1 + n as u64));
        }
        db.put_cf(seen, b"b\0garbage", b"not json").unwrap();
    }

    let store = RocksStore::open(directory.path()).unwrap();
    assert_eq!(store.seen_keys_indexed_at_open(), Some(331));
    assert_eq!(
        store.files("n.t").unwrap()[0].1.key,
        "old/pending",
        "the log entry is where the test meant it"
    );
    assert_eq!(
        store.purge_seen_before(5_000).unwrap(),
        PurgeSummary {
            examined: 31,
            purged: 30,
            kept_in_log: 1,
            stale: 0,
        }
    );
    assert_eq!(
        store
            .seen(&[
                ("b", "old/0"),
                ("b", "old/pending"),
                ("b", "new/0"),
                ("b", "garbage")
            ])
            .unwrap(),
        vec![false, true, true, true]
    );
    drop(store);

    let reopened = RocksStore::open(directory.path()).unwrap();
    assert_eq!(reopened.seen_keys_indexed_at_open(), None, "indexed once");
    assert_eq!(reopened.forget_table("n.t").unwrap().seen_keys, 301);
    assert_eq!(
        reopened.purge_seen_before(UnixMillis::MAX).unwrap(),
        PurgeSummary::default()
    );
}

/// A new store has nothing to index: its open writes nothing (a service starts on a disk that
/// refuses writes), and its first write marks the index whole.
#[test]
fn a_new_store_is_marked_indexed_by_its_first_write() {
    let directory = tempfile::tempdir().unwrap();
    let indexed_at_open = || {
        RocksStore::open(directory.path())
            .unwrap()
            .seen_keys_indexed_at_open()
    };
    assert_eq!(indexed_at_open(), Some(0));
    assert_eq!(indexed_at_open(), Some(0), "nothing written yet");
    let store = RocksStore::open(directory.path()).unwrap();
    store.commit(vec![seen_op("n.t", "k", 100, None)]).unwrap();
    drop(store);
    assert_eq!(indexed_at_open(), None);
    let store = RocksStore::open(directory.path()).unwrap();
    assert_eq!(store.purge_seen_before(200).unwrap().purged, 1);
}

/// Both resolutions of a table's series, apart from each other and from a table whose name
/// extends this one's; the retention drops one resolution's old points only; forget takes all.
fn series(store: &dyn StateStore) {
    use crate::model::series::{Resolution, Sample};
    let put = |table: &str, resolution: Resolution, slot: i64, files: u64| Op::PutSample {
        table: table.to_string(),
        resolution,
        slot,
        sample: Sample(files, files * 10, files),
    };
    store
        .commit(vec![
            put("a.b", Resolution::Minute, 29_000_001, 3),
            put("a.b", Resolution::Minute, 29_000_000, 2),
            put("a.b", Resolution::Minute, 28_000_000, 1),
            put("a.b", Resolution::Hour, 483_000, 9),
            put("a.b", Resolution::Hour, 470_000, 8),
            put("a.bc", Resolution::Minute, 29_000_000, 7),
            // A later point of the same minute replaces it.
            put("a.b", Resolution::Minute, 29_000_001, 4),
        ])
        .unwrap();
    let series = store.series("a.b").unwrap();
    assert_eq!(
        series.minutes,
        [
            (28_000_000, Sample(1, 10, 1)),
            (29_000_000, Sample(2, 20, 2)),
            (29_000_001, Sample(4, 40, 4))
        ]
    );
    assert_eq!(
        series.hours,
        [(470_000, Sample(8, 80, 8)), (483_000, Sample(9, 90, 9))]
    );
    store
        .commit(vec![Op::DeleteSamplesBelow {
            table: "a.b".to_string(),
            resolution: Resolution::Minute,
            slot: 29_000_000,
        }])
        .unwrap();
    let series = store.series("a.b").unwrap();
    assert_eq!(series.minutes.len(), 2);
    assert_eq!(series.hours.len(), 2, "the hours are another series");
    assert_eq!(store.series("a.bc").unwrap().minutes.len(), 1);
    store.forget_table("a.b").unwrap();
    assert_eq!(
        store.series("a.b").unwrap(),
        crate::model::series::Series::default()
    );
    assert_eq!(store.series("a.bc").unwrap().minutes.len(), 1);
}

#[test]
fn memory_store_keeps_the_series() {
    series(&MemoryStore::new());
}

#[test]
fn rocks_store_keeps_the_series_and_reads_it_back_after_a_reopen() {
    let directory = tempfile::tempdir().unwrap();
    series(&RocksStore::open(directory.path()).unwrap());
    let reopened = RocksStore::open(directory.path()).unwrap();
    assert_eq!(reopened.series("a.bc").unwrap().minutes.len(), 1);
}
