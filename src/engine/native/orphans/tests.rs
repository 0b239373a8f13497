use super::*;

const LOCATION: &str = "s3://lake/warehouse/analytics/events";
const CUTOFF: i64 = 1_000_000;

fn listed(path: &str, modified_millis: i64) -> ListedFile {
    ListedFile {
        path: format!("{LOCATION}/{path}"),
        size: 10,
        modified_millis,
    }
}

fn reachable_of(paths: &[&str]) -> Reachable {
    let mut reachable = Reachable::default();
    for path in paths {
        reachable.insert(path);
    }
    reachable
}

fn request(dry_run: bool) -> OrphanRequest {
    OrphanRequest {
        older_than_millis: CUTOFF,
        dry_run,
    }
}

fn fields(names: &[&str]) -> HashSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

#[test]
fn only_old_unreachable_visible_files_are_orphans() {
    let reachable = reachable_of(&[
        &format!("{LOCATION}/data/day=1/a.parquet"),
        &format!("{LOCATION}/metadata/snap-1.avro"),
        &format!("{LOCATION}/metadata/00001-x.metadata.json"),
    ]);
    let files = vec![
        listed("data/day=1/a.parquet", 5),
        listed("metadata/snap-1.avro", 5),
        listed("metadata/00001-x.metadata.json", 5),
        listed("data/day=1/orphan.parquet", CUTOFF - 1),
        listed("metadata/orphan-m0.avro", 7),
        // At the cutoff or after: a writer's upload may still be on its way to a commit.
        listed("data/day=1/fresh.parquet", CUTOFF),
        listed("data/day=1/fresher.parquet", CUTOFF + 1),
        // Hidden: never orphans.
        listed("data/_temporary/0/part-0.parquet", 5),
        listed("data/day=1/.a.parquet.crc", 5),
        listed("_SUCCESS", 5),
    ];
    let report = find_orphans(
        LOCATION,
        files,
        &reachable,
        &fields(&["day"]),
        request(true),
    )
    .unwrap();
    assert_eq!(
        report.orphans,
        [
            format!("{LOCATION}/data/day=1/orphan.parquet"),
            format!("{LOCATION}/metadata/orphan-m0.avro"),
        ]
    );
    assert_eq!(report.young, 2);
    assert_eq!(report.hidden, 3);
    assert_eq!(report.listed, 10);
    assert_eq!(report.reachable, 3);
    assert!(report.dry_run);
}

#[test]
fn a_partition_directory_of_a_field_named_with_an_underscore_is_not_hidden() {
    let files = vec![
        listed("data/_bucket=3/orphan.parquet", 5),
        listed("data/_other=3/kept.parquet", 5),
        listed("data/_bucket=3/_hidden.parquet", 5),
    ];
    let report = find_orphans(
        LOCATION,
        files,
        &Reachable::default(),
        &fields(&["_bucket"]),
        request(false),
    )
    .unwrap();
    assert_eq!(
        report.orphans,
        [format!("{LOCATION}/data/_bucket=3/orphan.parquet")]
    );
    assert_eq!(report.hidden, 2);
    assert!(!report.dry_run);
}

#[test]
fn s3a_and_s3n_paths_are_s3_paths() {
    let reachable = reachable_of(&["s3a://lake/warehouse/analytics/events/data/a.parquet"]);
    let report = find_orphans(
        LOCATION,
        vec![listed("data/a.parquet", 5)],
        &reachable,
        &HashSet::new(),
        request(false),
    )
    .unwrap();
    assert!(report.orphans.is_empty(), "{report:?}");
}

#[test]
fn a_path_reachable_under_another_bucket_stops_the_run() {
    let reachable = reachable_of(&["s3://other-lake/warehouse/analytics/events/data/a.parquet"]);
    let error = find_orphans(
        LOCATION,
        vec![listed("data/a.parquet", 5), listed("data/b.parquet", 5)],
        &reachable,
        &HashSet::new(),
        request(false),
    )
    .unwrap_err();
    assert!(error.to_string().contains("nothing was deleted"), "{error}");
}

#[test]
fn local_paths_compare_in_every_form() {
    let reachable = reachable_of(&[
        "file:/tmp/wh/t/data/a.parquet",
        "file:///tmp/wh/t/data/b.parquet",
        "/tmp/wh//t/data/c.parquet",
    ]);
    let files = ["a", "b", "c", "d"]
        .iter()
        .map(|name| ListedFile {
            path: format!("file:///tmp/wh/t/data/{name}.parquet"),
            size: 1,
            modified_millis: 5,
        })
        .collect();
    let report = find_orphans(
        "file:///tmp/wh/t",
        files,
        &reachable,
        &HashSet::new(),
        request(false),
    )
    .unwrap();
    assert_eq!(report.orphans, ["file:///tmp/wh/t/data/d.parquet"]);
}

#[tokio::test]
async fn a_local_location_is_listed_with_every_file_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    std::fs::create_dir_all(root.join("data/day=1")).unwrap();
    std::fs::create_dir_all(root.join("metadata")).unwrap();
    std::fs::write(root.join("data/day=1/a.parquet"), b"abc").unwrap();
    std::fs::write(root.join("metadata/v1.metadata.json"), b"{}").unwrap();
    let storage = super::super::storage::ObjectStorage::local();
    let location = format!("file://{}", root.display());
    let mut files = storage.list(&format!("{location}/")).await.unwrap();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let paths: Vec<&str> = files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            format!("{location}/data/day=1/a.parquet"),
            format!("{location}/metadata/v1.metadata.json"),
        ]
    );
    assert_eq!(files[0].size, 3);
    assert!(files[0].modified_millis > 1_600_000_000_000);

    let failed = storage.delete_files(&[paths[0].to_string()]).await.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    assert!(!root.join("data/day=1/a.parquet").exists());
    assert!(root.join("metadata/v1.metadata.json").exists());
    // A table with no files yet: nothing listed.
    let empty = storage
        .list(&format!("file://{}", dir.path().join("none").display()))
        .await
        .unwrap();
    assert!(empty.is_empty());
}
