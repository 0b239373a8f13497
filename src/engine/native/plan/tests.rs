use super::*;

const MIB: u64 = 1024 * 1024;

fn values(path: &str) -> PartitionValues {
    decode_partition_path(path).unwrap()
}

fn file(path: &str, partition: &str, size_bytes: u64) -> DataFileFacts {
    DataFileFacts {
        path: format!("s3://lake/t/data/{partition}/{path}"),
        size_bytes,
        record_count: 10,
        spec_id: 0,
        partition: values(partition),
        data_sequence_number: 1,
    }
}

fn request(partitions: &[&str]) -> PlanRequest {
    PlanRequest {
        partitions: partitions.iter().map(|path| path.to_string()).collect(),
        mid_sized: MidSizedFiles::Nowhere,
        small_file_bytes: 32 * MIB,
        target_file_bytes: 128 * MIB,
        min_input_files: 5,
        max_group_bytes: 512 * MIB,
        output_spec_id: 0,
        with_deletes: false,
    }
}

fn position_delete(partition: &str, sequence: i64) -> DeleteFileFacts {
    DeleteFileFacts {
        path: format!("s3://lake/t/data/{partition}/delete-{sequence}.parquet"),
        kind: DeleteKind::Position,
        spec_id: 0,
        partition: values(partition),
        spec_unpartitioned: false,
        data_sequence_number: sequence,
        referenced_data_file: None,
        referenced_path_bounds: None,
        size_bytes: 1000,
        record_count: 1,
        equality_ids: Vec::new(),
        native_refusal: None,
    }
}

fn paths(group: &FileGroup) -> Vec<&str> {
    let mut paths: Vec<&str> = group
        .files
        .iter()
        .map(|file| file.path.rsplit('/').next().unwrap())
        .collect();
    paths.sort();
    paths
}

#[test]
fn only_the_runs_partitions_and_their_small_files_are_taken() {
    let files: Vec<DataFileFacts> = (0..6)
        .map(|index| file(&format!("a{index}"), "day=2024-05-01", MIB))
        .chain((0..6).map(|index| file(&format!("b{index}"), "day=2024-05-02", MIB)))
        .chain([file("big", "day=2024-05-01", 40 * MIB)])
        .collect();
    let plan = plan(&request(&["day=2024-05-01"]), &files, &[]).unwrap();
    assert_eq!(plan.groups.len(), 1);
    assert_eq!(paths(&plan.groups[0]), ["a0", "a1", "a2", "a3", "a4", "a5"]);
    assert_eq!(plan.input_bytes(), 6 * MIB);
    let whole = super::plan(&request(&[]), &files, &[]).unwrap();
    assert_eq!(
        whole.input_files(),
        12,
        "no partitions named: the whole table"
    );
}

#[test]
fn files_of_older_specs_are_grouped_together_and_moved_to_the_current_spec() {
    let spec_file = |spec_id: i32, name: &str, partition: &str| DataFileFacts {
        spec_id,
        ..file(name, partition, MIB)
    };
    let mut files: Vec<DataFileFacts> = (0..2)
        .map(|index| spec_file(0, &format!("old{index}"), "ts_day=2024-05-01"))
        .collect();
    files.push(spec_file(0, "old2", "ts_day=2024-05-02"));
    files.push(spec_file(1, "older", "region=eu"));
    files.extend(
        (0..3).map(|index| spec_file(2, &format!("new{index}"), "ts_day=2024-05-01/region=eu")),
    );
    let mut wanted = request(&[
        "ts_day=2024-05-01",
        "ts_day=2024-05-02",
        "region=eu",
        "ts_day=2024-05-01/region=eu",
    ]);
    wanted.min_input_files = 3;
    wanted.output_spec_id = 2;
    let plan = plan(&wanted, &files, &[]).unwrap();
    assert_eq!(plan.groups.len(), 2, "{plan:?}");
    assert_eq!(plan.groups[0].spec_id, 2);
    assert!(!plan.groups[0].repartition);
    assert_eq!(
        plan.groups[0].partition_path(),
        "ts_day=2024-05-01/region=eu"
    );
    assert_eq!(
        paths(&plan.groups[1]),
        ["old0", "old1", "old2", "older"],
        "every older spec's partitions in one group, as Java plans them"
    );
    assert!(plan.groups[1].repartition);
    assert_eq!(plan.groups[1].spec_id, 2, "written in the current spec");
    assert!(plan.groups[1].partition.is_empty());
    assert!(plan.left.is_empty(), "{:?}", plan.left);
    assert_eq!(
        plan.groups[1].describe(),
        "files of older specs 0, 1 moved to spec 2"
    );

    // Too few older files together: left with the reason the merged group gives.
    let only_one_old_day = super::plan(
        &PlanRequest {
            partitions: vec!["ts_day=2024-05-02".to_string()],
            ..wanted.clone()
        },
        &files,
        &[],
    )
    .unwrap();
    assert!(only_one_old_day.groups.is_empty());
    assert!(matches!(
        only_one_old_day.left[..],
        [(Some(_), LeftReason::TooFewSmallFiles { files: 1, .. })]
    ));

    // With the output spec one of theirs, those files keep their partition.
    wanted.output_spec_id = 0;
    let plan = super::plan(&wanted, &files, &[]).unwrap();
    assert_eq!(plan.groups.len(), 1, "{plan:?}");
    assert!(plan.groups[0].repartition);
    assert_eq!(paths(&plan.groups[0]), ["new0", "new1", "new2", "older"]);
    assert!(
        plan.left.iter().all(|(path, _)| path
            .as_deref()
            .is_some_and(|path| path.starts_with("ts_day=2024-05-0") && !path.contains('/'))),
        "{:?}",
        plan.left
    );
}

#[test]
fn encoded_paths_match_decoded_values() {
    let mut files: Vec<DataFileFacts> = (0..5)
        .map(|index| file(&format!("f{index}"), "region=eu+west%2F1", MIB))
        .collect();
    assert_eq!(
        files[0].partition,
        vec![("region".to_string(), "eu west/1".to_string())]
    );
    assert_eq!(partition_path(&files[0].partition), "region=eu+west%2F1");
    files.push(file("other", "region=eu", MIB));
    let plan = plan(&request(&["region=eu+west%2F1"]), &files, &[]).unwrap();
    assert_eq!(plan.input_files(), 5);
    assert_eq!(decode_partition_path("no-equals"), None);
    assert_eq!(decode_partition_path("a=%FF"), None, "not UTF-8");
    assert_eq!(decode_partition_path(""), Some(Vec::new()));
}

#[test]
fn mid_sized_files_join_only_where_the_run_says() {
    let mut files: Vec<DataFileFacts> = Vec::new();
    for day in ["day=2024-05-01", "day=2024-05-02"] {
        files.extend((0..4).map(|index| file(&format!("s{index}"), day, MIB)));
        files.push(file("mid", day, 90 * MIB));
        files.push(file("large", day, 100 * MIB));
    }
    let mut wanted = request(&["day=2024-05-01", "day=2024-05-02"]);
    wanted.min_input_files = 4;
    let small_only = plan(&wanted, &files, &[]).unwrap();
    assert!(small_only.groups.iter().all(|group| group.files.len() == 4));
    wanted.mid_sized = MidSizedFiles::In(vec!["day=2024-05-02".to_string()]);
    let joined = plan(&wanted, &files, &[]).unwrap();
    let second: Vec<&FileGroup> = joined
        .groups
        .iter()
        .filter(|group| group.partition_path() == "day=2024-05-02")
        .collect();
    assert_eq!(second.len(), 1);
    assert_eq!(
        paths(second[0]),
        ["mid", "s0", "s1", "s2", "s3"],
        "96 MiB floor: 100 MiB stays"
    );
    let first: Vec<&FileGroup> = joined
        .groups
        .iter()
        .filter(|group| group.partition_path() == "day=2024-05-01")
        .collect();
    assert_eq!(paths(first[0]), ["s0", "s1", "s2", "s3"]);
    wanted.mid_sized = MidSizedFiles::Everywhere;
    assert_eq!(plan(&wanted, &files, &[]).unwrap().input_files(), 10);
}

#[test]
fn a_partition_is_rewritten_with_enough_files_or_more_than_a_target() {
    let few: Vec<DataFileFacts> = (0..4)
        .map(|index| file(&format!("f{index}"), "", MIB))
        .collect();
    assert!(
        plan(&request(&[]), &few, &[]).unwrap().is_empty(),
        "4 < 5 files"
    );
    let mut wanted = request(&[]);
    wanted.small_file_bytes = 100 * MIB;
    let heavy: Vec<DataFileFacts> = (0..3)
        .map(|index| file(&format!("f{index}"), "", 50 * MIB))
        .collect();
    let plan = plan(&wanted, &heavy, &[]).unwrap();
    assert_eq!(plan.input_files(), 3, "150 MiB > target: one group");
    wanted.max_group_bytes = 100 * MIB;
    assert_eq!(
        super::plan(&wanted, &heavy, &[]).unwrap().input_files(),
        2,
        "groups of 100 MiB at most: a lone file left"
    );
    wanted.max_group_bytes = 512 * MIB;
    let lone = vec![file("one", "", MIB)];
    wanted.min_input_files = 1;
    assert!(
        super::plan(&wanted, &lone, &[]).unwrap().is_empty(),
        "one file alone"
    );
}

#[test]
fn groups_are_packed_up_to_the_maximum_group_size_not_the_target() {
    let files: Vec<DataFileFacts> = (0..30)
        .map(|index| file(&format!("f{index:02}"), "p=1", 10 * MIB))
        .collect();
    let one = plan(&request(&["p=1"]), &files, &[]).unwrap();
    assert_eq!(
        one.groups.len(),
        1,
        "300 MiB: more than a target, one group"
    );
    assert_eq!(one.input_files(), 30);
    let mut wanted = request(&["p=1"]);
    wanted.max_group_bytes = 128 * MIB;
    let plan = plan(&wanted, &files, &[]).unwrap();
    assert_eq!(plan.groups.len(), 3);
    for group in &plan.groups {
        assert!(group.input_bytes() <= 128 * MIB);
    }
    wanted.max_group_bytes = MIB;
    assert_eq!(
        super::plan(&wanted, &files, &[]).unwrap().groups.len(),
        3,
        "groups of a target at least"
    );
    assert_eq!(plan.input_files(), 30);
    let unique: HashSet<&str> = plan
        .groups
        .iter()
        .flat_map(|group| group.files.iter().map(|file| file.path.as_str()))
        .collect();
    assert_eq!(unique.len(), 30, "every file in exactly one group");
}

#[test]
fn equality_deletes_are_applied_unless_the_engine_cannot_apply_them() {
    let files: Vec<DataFileFacts> = (0..5)
        .map(|index| file(&format!("f{index}"), "p=1", MIB))
        .collect();
    assert_eq!(
        plan(&request(&[]), &files, &[position_delete("p=1", 2)])
            .unwrap()
            .input_files(),
        5,
        "position deletes are applied by the rewrite"
    );
    let mut equality = position_delete("p=1", 2);
    equality.kind = DeleteKind::Equality;
    equality.equality_ids = vec![1];
    assert_eq!(
        plan(&request(&[]), &files, &[equality.clone()])
            .unwrap()
            .input_files(),
        5,
        "an equality delete on a required column is applied by the rewrite"
    );
    equality.native_refusal = Some("equality column `id` is optional".to_string());
    equality.data_sequence_number = 1;
    assert!(
        plan(&request(&[]), &files, &[equality.clone()]).is_ok(),
        "equality delete of the same sequence number applies to nothing older"
    );
    equality.data_sequence_number = 2;
    let error = plan(&request(&[]), &files, &[equality.clone()]).unwrap_err();
    assert!(
        matches!(error, PlanError::DeletesApply { ref partition, ref reason, .. } if partition == "p=1" && reason.contains("optional")),
        "{error}"
    );
    equality.partition = values("p=2");
    assert!(
        plan(&request(&[]), &files, &[equality.clone()]).is_ok(),
        "another partition's delete"
    );
    equality.spec_id = 7;
    equality.spec_unpartitioned = true;
    assert!(
        plan(&request(&[]), &files, &[equality]).is_err(),
        "a global delete"
    );
}

#[test]
fn position_deletes_are_narrowed_by_the_file_they_reference() {
    let data = file("f0", "p=1", MIB);
    let mut delete = position_delete("p=1", 2);
    delete.referenced_data_file = Some("s3://lake/t/data/p=1/other".to_string());
    assert!(!delete_applies(&delete, &data));
    delete.referenced_data_file = Some(data.path.clone());
    assert!(delete_applies(&delete, &data));
    delete.referenced_data_file = None;
    delete.referenced_path_bounds = Some((
        "s3://lake/t/data/p=1/g".into(),
        "s3://lake/t/data/p=1/h".into(),
    ));
    assert!(!delete_applies(&delete, &data));
    delete.referenced_path_bounds = Some((data.path.clone(), data.path.clone()));
    assert!(delete_applies(&delete, &data));
    delete.data_sequence_number = 0;
    assert!(!delete_applies(&delete, &data), "older than the data file");
}

#[test]
fn a_rewrite_commits_only_while_its_inputs_live_and_no_new_delete_applies() {
    let inputs = vec![file("f0", "p=1", MIB), file("f1", "p=1", MIB)];
    let live: HashSet<&str> = inputs.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(validate_rewrite(&inputs, 1, 0, &live, &[]), Ok(()));
    let one_gone: HashSet<&str> = [inputs[0].path.as_str()].into();
    assert!(matches!(
        validate_rewrite(&inputs, 1, 0, &one_gone, &[]),
        Err(ConflictReason::InputGone { path }) if path == inputs[1].path
    ));
    assert!(
        validate_rewrite(&inputs, 1, 0, &live, &[position_delete("p=1", 1)]).is_ok(),
        "a delete the plan already saw is not new"
    );
    assert!(matches!(
        validate_rewrite(&inputs, 1, 0, &live, &[position_delete("p=1", 2)]),
        Err(ConflictReason::NewDeleteApplies { .. })
    ));
    assert!(validate_rewrite(&inputs, 1, 0, &live, &[position_delete("p=2", 2)]).is_ok());
    let mut equality = position_delete("p=1", 2);
    equality.kind = DeleteKind::Equality;
    assert!(
        validate_rewrite(&inputs, 1, 0, &live, &[equality.clone()]).is_ok(),
        "outputs keep the starting sequence number: a new equality delete applies to them too"
    );
    assert!(
        matches!(
            validate_rewrite(&inputs, 1, 1, &live, &[equality]),
            Err(ConflictReason::NewDeleteApplies { .. })
        ),
        "outputs moved to another spec leave the new equality delete's scope"
    );
}

#[test]
fn each_partition_asked_for_and_not_rewritten_is_left_with_its_reason() {
    let mut files: Vec<DataFileFacts> = (0..6)
        .map(|index| file(&format!("a{index}"), "p=rewritten", MIB))
        .collect();
    files.extend((0..2).map(|index| file(&format!("b{index}"), "p=few", MIB)));
    files.extend((0..3).map(|index| file(&format!("c{index}"), "p=large", 100 * MIB)));
    files.extend((0..5).map(|index| file(&format!("d{index}"), "p=alone", 30 * MIB)));
    let mut request = request(&[
        "p=rewritten",
        "p=few",
        "p=large",
        "p=gone",
        "p=alone",
        "no-equals-sign",
        "p=few",
    ]);
    request.max_group_bytes = 0;
    request.target_file_bytes = 40 * MIB;
    request.small_file_bytes = 32 * MIB;
    let plan = plan(&request, &files, &[]).unwrap();
    assert_eq!(plan.groups.len(), 1);
    assert_eq!(plan.groups[0].partition, values("p=rewritten"));
    let left: Vec<(Option<&str>, &LeftReason)> = plan
        .left
        .iter()
        .map(|(path, reason)| (path.as_deref(), reason))
        .collect();
    assert_eq!(
        left,
        [
            (
                Some("p=few"),
                &LeftReason::TooFewSmallFiles {
                    files: 2,
                    bytes: 2 * MIB,
                    min_input_files: 5,
                    target_file_bytes: 40 * MIB
                }
            ),
            (Some("p=large"), &LeftReason::NoSmallFile { files: 3 }),
            (Some("p=gone"), &LeftReason::NoLiveFile),
            (Some("p=alone"), &LeftReason::NoGroupOfTwo { files: 5 }),
            (Some("no-equals-sign"), &LeftReason::NotAPartitionPath),
        ],
        "in the request's order, once each"
    );
    assert!(plan.left[0]
        .1
        .to_string()
        .contains("fewer than min_input_files (5)"));
}

#[test]
fn a_whole_table_run_that_plans_nothing_says_why() {
    let files = vec![file("a", "p=1", MIB), file("b", "p=2", MIB)];
    let planned = plan(&request(&[]), &files, &[]).unwrap();
    assert!(planned.is_empty());
    assert_eq!(
        planned.left,
        [(
            None,
            LeftReason::TooFewSmallFiles {
                files: 2,
                bytes: 2 * MIB,
                min_input_files: 5,
                target_file_bytes: 128 * MIB
            }
        )]
    );
    let empty = plan(&request(&[]), &[], &[]).unwrap();
    assert_eq!(empty.left, [(None, LeftReason::NoLiveFile)]);
    // Enough small files for the table, one a partition: spread too thin, and said so.
    let mut two = request(&[]);
    two.min_input_files = 2;
    let spread = plan(&two, &files, &[]).unwrap();
    assert_eq!(
        spread.left,
        [(
            None,
            LeftReason::SpreadThin {
                files: 2,
                partitions: 2,
                min_input_files: 2
            }
        )]
    );
    assert_eq!(
        spread.left[0].1.to_string(),
        "2 small files spread over 2 partitions, none with enough of them to rewrite (min_input_files 2, or more than one target file's bytes)"
    );
}

fn arbitrary_files() -> impl proptest::strategy::Strategy<Value = Vec<DataFileFacts>> {
    use proptest::prelude::*;
    proptest::collection::vec((0u8..6, 0u8..2, 1u64..80, 0u8..3), 0..40).prop_map(|files| {
        files
            .into_iter()
            .enumerate()
            .map(|(index, (partition, spec, mib, sequence))| DataFileFacts {
                spec_id: i32::from(spec),
                data_sequence_number: i64::from(sequence),
                ..file(&format!("f{index}"), &format!("p={partition}"), mib * MIB)
            })
            .collect()
    })
}

proptest::proptest! {
    /// Every partition a run asks for is either rewritten by a group or left with a reason,
    /// never both, and nothing is left that was not asked for; a whole-table run is either
    /// planned or says why.
    #[test]
    fn every_partition_asked_for_is_planned_or_given_a_reason(
        files in arbitrary_files(),
        asked in proptest::collection::vec(0u8..8, 0..6),
        min_input_files in 1u64..8,
        target_mib in 1u64..200,
        max_group_mib in 0u64..300,
        small_mib in 1u64..100,
        joining in proptest::bool::ANY,
        output_spec in 0u8..3,
    ) {
        let paths: Vec<String> = asked.iter().map(|partition| format!("p={partition}")).collect();
        let request = PlanRequest {
            partitions: paths.clone(),
            mid_sized: if joining { MidSizedFiles::Everywhere } else { MidSizedFiles::Nowhere },
            small_file_bytes: small_mib * MIB,
            target_file_bytes: target_mib * MIB,
            min_input_files,
            max_group_bytes: max_group_mib * MIB,
            output_spec_id: i32::from(output_spec),
            with_deletes: false,
        };
        let plan = plan(&request, &files, &[]).unwrap();
        let planned: HashSet<String> = plan
            .groups
            .iter()
            .flat_map(|group| &group.files)
            .map(|file| partition_path(&file.partition))
            .collect();
        for group in &plan.groups {
            proptest::prop_assert_eq!(group.spec_id, request.output_spec_id);
            let consistent = group.files.iter().all(|file| {
                (file.spec_id != request.output_spec_id) == group.repartition
                    && (group.repartition || file.partition == group.partition)
            });
            proptest::prop_assert!(consistent, "older specs only and only they repartition");
        }
        let left: Vec<&str> = plan.left.iter().filter_map(|(path, _)| path.as_deref()).collect();
        let unique: HashSet<&str> = left.iter().copied().collect();
        proptest::prop_assert_eq!(unique.len(), left.len(), "each left once");
        for path in &paths {
            proptest::prop_assert!(
                planned.contains(path) != unique.contains(path.as_str()),
                "{} is planned or left, not both", path
            );
        }
        for path in &planned {
            proptest::prop_assert!(paths.is_empty() || paths.contains(path));
        }
        for path in &left {
            proptest::prop_assert!(paths.iter().any(|asked| asked == path));
        }
        if paths.is_empty() {
            proptest::prop_assert_eq!(plan.groups.is_empty(), plan.left.len() == 1);
            proptest::prop_assert!(plan.left.iter().all(|(path, _)| path.is_none()));
        }
    }
}

#[test]
fn position_deletes_of_rewritten_files_only_are_dangling() {
    let inputs = vec![file("f0", "p=1", MIB), file("f1", "p=1", MIB)];
    let other = file("g0", "p=1", 100 * MIB);
    let mut outputs = vec![file("icepack-out", "p=1", 2 * MIB)];
    outputs[0].data_sequence_number = 1;
    let live: Vec<DataFileFacts> = inputs.iter().cloned().chain([other.clone()]).collect();
    let referencing = |path: &str, sequence: i64| DeleteFileFacts {
        referenced_data_file: Some(path.to_string()),
        path: format!("{path}-deletes.parquet"),
        ..position_delete("p=1", sequence)
    };
    let scoped = referencing(&inputs[0].path, 1);
    let bounded = DeleteFileFacts {
        referenced_path_bounds: Some((inputs[0].path.clone(), inputs[1].path.clone())),
        path: "bounded-deletes.parquet".to_string(),
        ..position_delete("p=1", 1)
    };
    let on_other = referencing(&other.path, 1);
    let unscoped = position_delete("p=1", 1);
    let mut equality = referencing(&inputs[1].path, 2);
    equality.kind = DeleteKind::Equality;
    let elsewhere = referencing("s3://lake/t/data/p=2/h0", 1);
    let deletes = vec![
        scoped.clone(),
        bounded.clone(),
        on_other,
        unscoped,
        equality,
        elsewhere,
    ];
    let after = || live.iter().chain(&outputs).cloned().collect();
    let dangling: Vec<&str> = dangling_deletes(&inputs, &deletes, after)
        .into_iter()
        .map(|delete| delete.path.as_str())
        .collect();
    assert_eq!(
        dangling,
        [scoped.path.as_str(), bounded.path.as_str()],
        "only deletes of rewritten files that reach no live file"
    );

    // An equality delete committed before the run (outputs at the starting sequence number,
    // not below the delete's) dangles once no older file of its partition is live.
    let mut equality = position_delete("p=1", 2);
    equality.kind = DeleteKind::Equality;
    let mut inputs = inputs;
    for input in &mut inputs {
        input.data_sequence_number = 1;
    }
    outputs[0].data_sequence_number = 2;
    let only_inputs = || inputs.iter().chain(&outputs).cloned().collect();
    assert_eq!(
        dangling_deletes(&inputs, std::slice::from_ref(&equality), only_inputs).len(),
        1
    );
    let with_other = || {
        inputs
            .iter()
            .chain(&outputs)
            .chain([&other])
            .cloned()
            .collect()
    };
    assert!(
        dangling_deletes(&inputs, std::slice::from_ref(&equality), with_other).is_empty(),
        "an older live file of its partition keeps it"
    );
}

proptest::proptest! {
    /// A delete the rewrite removes applied to an input and applies to no file live after
    /// it: no row of a live file can come back.
    #[test]
    fn a_dangling_delete_applies_to_no_live_file(
        files in arbitrary_files(),
        rewritten in proptest::collection::vec(proptest::bool::ANY, 40),
        deletes in proptest::collection::vec((0usize..40, 0u8..6, 0u8..3, 0u8..3), 0..12),
    ) {
        let inputs: Vec<DataFileFacts> = files
            .iter()
            .zip(&rewritten)
            .filter(|(_, chosen)| **chosen)
            .map(|(file, _)| file.clone())
            .collect();
        let outputs: Vec<DataFileFacts> = inputs
            .iter()
            .map(|input| DataFileFacts {
                path: format!("{}-out", input.path),
                data_sequence_number: 2,
                ..input.clone()
            })
            .collect();
        let deletes: Vec<DeleteFileFacts> = deletes
            .into_iter()
            .map(|(target, partition, sequence, scope)| DeleteFileFacts {
                referenced_data_file: (scope == 0)
                    .then(|| files.get(target).map(|file| file.path.clone()))
                    .flatten(),
                path: format!("d{target}-{partition}-{sequence}-{scope}"),
                spec_unpartitioned: scope == 2,
                ..position_delete(&format!("p={partition}"), i64::from(sequence))
            })
            .collect();
        let rewritten: HashSet<&str> = inputs.iter().map(|file| file.path.as_str()).collect();
        let after = || files.iter().chain(&outputs).cloned().collect();
        for delete in dangling_deletes(&inputs, &deletes, after) {
            proptest::prop_assert!(inputs.iter().any(|input| delete_applies(delete, input)));
            for file in files.iter().filter(|file| !rewritten.contains(file.path.as_str())).chain(&outputs) {
                proptest::prop_assert!(!delete_applies(delete, file), "{} applies to {}", delete.path, file.path);
            }
        }
    }
}

#[test]
fn a_run_due_by_its_deletes_rewrites_every_file_a_delete_reaches_whatever_its_size() {
    let mut files: Vec<DataFileFacts> = vec![
        file("large-deleted", "p=1", 500 * MIB),
        file("large-clean", "p=1", 500 * MIB),
        file("small", "p=2", MIB),
    ];
    files[0].data_sequence_number = 1;
    let delete = DeleteFileFacts {
        referenced_data_file: Some(files[0].path.clone()),
        ..position_delete("p=1", 1)
    };
    let mut due = request(&[]);
    assert!(
        plan(&due, &files, std::slice::from_ref(&delete))
            .unwrap()
            .groups
            .is_empty(),
        "a compaction takes small files only"
    );
    due.with_deletes = true;
    let planned = plan(&due, &files, std::slice::from_ref(&delete)).unwrap();
    assert_eq!(planned.groups.len(), 1, "{planned:?}");
    assert_eq!(
        paths(&planned.groups[0]),
        ["large-deleted"],
        "alone, and only the file the delete reaches"
    );
}
