use super::*;
use proptest::prelude::*;

fn aws_record(name: &str, bucket: &str, key: &str, size: Option<u64>) -> String {
    let size = size
        .map(|size| format!(",\"size\":{size}"))
        .unwrap_or_default();
    format!(
        r#"{{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1","eventTime":"2024-05-01T12:00:00.000Z","eventName":"{name}","userIdentity":{{"principalId":"EXAMPLE"}},"s3":{{"s3SchemaVersion":"1.0","configurationId":"landing","bucket":{{"name":"{bucket}","arn":"arn:aws:s3:::{bucket}"}},"object":{{"key":"{key}"{size},"eTag":"abc","sequencer":"0055AED6DCD90281E5"}}}}}}"#
    )
}

fn records_body(records: &[String]) -> String {
    format!(r#"{{"Records":[{}]}}"#, records.join(","))
}

fn only_records(body: &str) -> Vec<Result<S3Record, RecordError>> {
    match parse_message(body).unwrap() {
        MessageBody::Records(records) => records,
        MessageBody::TestEvent => panic!("expected records"),
    }
}

#[test]
fn raw_records_are_parsed() {
    let body = records_body(&[aws_record(
        "ObjectCreated:Put",
        "lakehouse-data",
        "warehouse/t/data/part-0.parquet",
        Some(1024),
    )]);
    let records = only_records(&body);
    let record = records[0].as_ref().unwrap();
    assert_eq!(record.event_name, "ObjectCreated:Put");
    assert!(record.is_object_created());
    assert_eq!(record.bucket, "lakehouse-data");
    assert_eq!(record.key, "warehouse/t/data/part-0.parquet");
    assert_eq!(record.size, Some(1024));
    assert_eq!(
        record.event_millis,
        parse_rfc3339("2024-05-01T12:00:00Z").unwrap()
    );
    assert_eq!(record.sequencer.as_deref(), Some("0055AED6DCD90281E5"));
}

#[test]
fn sns_wrapped_records_are_unwrapped() {
    let inner = records_body(&[aws_record("ObjectCreated:Put", "b", "k.parquet", Some(1))]);
    let body = serde_json::json!({
        "Type": "Notification",
        "MessageId": "1",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:landing",
        "Message": inner,
    })
    .to_string();
    let records = only_records(&body);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].as_ref().unwrap().key, "k.parquet");
}

#[test]
fn test_events_raw_and_wrapped_count_nothing() {
    let test_event = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2024-05-01T12:00:00.000Z","Bucket":"b","RequestId":"x","HostId":"y"}"#;
    assert!(matches!(
        parse_message(test_event).unwrap(),
        MessageBody::TestEvent
    ));
    let wrapped = serde_json::json!({"Type": "Notification", "Message": test_event}).to_string();
    assert!(matches!(
        parse_message(&wrapped).unwrap(),
        MessageBody::TestEvent
    ));
}

#[test]
fn eventbridge_object_created_is_counted_and_deleted_has_no_size() {
    let created = r#"{"version":"0","id":"1","detail-type":"Object Created","source":"aws.s3","account":"111122223333","time":"2021-11-12T00:00:00Z","region":"ca-central-1","resources":["arn:aws:s3:::b"],"detail":{"version":"0","bucket":{"name":"b"},"object":{"key":"t/data/x=1/f+1.parquet","size":5,"etag":"e","sequencer":"00617F08299329D189"},"request-id":"N4N7GDK58NMKJ12R","requester":"123456789012","reason":"PutObject"}}"#;
    let record = only_records(created).remove(0).unwrap();
    assert_eq!(record.event_name, "ObjectCreated:Put");
    assert_eq!(
        record.key, "t/data/x=1/f+1.parquet",
        "EventBridge keys are not URL-encoded"
    );
    assert_eq!(record.size, Some(5));

    let deleted = r#"{"version":"0","id":"2","detail-type":"Object Deleted","source":"aws.s3","time":"2021-11-12T00:00:00Z","detail":{"version":"0","bucket":{"name":"b"},"object":{"key":"k.parquet","sequencer":"00617F0829932"},"reason":"DeleteObject","deletion-type":"Permanently Deleted"}}"#;
    let record = only_records(deleted).remove(0).unwrap();
    assert!(!record.is_object_created());
    assert_eq!(record.size, None);
}

#[test]
fn keys_are_url_decoded() {
    let body = records_body(&[aws_record(
        "ObjectCreated:Put",
        "b",
        "dt%3D2024/a+b%2Bc.parquet",
        Some(1),
    )]);
    assert_eq!(
        only_records(&body)[0].as_ref().unwrap().key,
        "dt=2024/a b+c.parquet"
    );
}

#[test]
fn minio_records_are_normalised() {
    let body = r#"{"EventName":"s3:ObjectCreated:Put","Key":"lakehouse-data/warehouse/t/data/f.parquet","Records":[{"eventVersion":"2.0","eventSource":"minio:s3","awsRegion":"","eventTime":"2024-05-01T12:00:00.000Z","eventName":"s3:ObjectCreated:Put","userIdentity":{"principalId":"minio"},"requestParameters":{},"responseElements":{},"s3":{"s3SchemaVersion":"1.0","configurationId":"Config","bucket":{"name":"lakehouse-data","ownerIdentity":{"principalId":"minio"},"arn":"arn:aws:s3:::lakehouse-data"},"object":{"key":"warehouse%2Ft%2Fdata%2Ff.parquet","size":2048,"eTag":"x","contentType":"application/octet-stream","userMetadata":{},"sequencer":"17A"}},"source":{"host":"","port":"","userAgent":""}}]}"#;
    let record = only_records(body).remove(0).unwrap();
    assert_eq!(record.event_name, "ObjectCreated:Put");
    assert_eq!(record.key, "warehouse/t/data/f.parquet");
    assert_eq!(record.size, Some(2048));
}

#[test]
fn event_version_three_is_rejected_and_two_nine_with_unknown_fields_accepted() {
    let v3 =
        records_body(&[aws_record("ObjectCreated:Put", "b", "k.parquet", Some(1))
            .replace("\"2.1\"", "\"3.0\"")]);
    assert_eq!(
        only_records(&v3)[0],
        Err(RecordError::UnsupportedVersion("3.0".to_string()))
    );
    let v29 = records_body(&[aws_record("ObjectCreated:Put", "b", "k.parquet", Some(1))
        .replace("\"2.1\"", "\"2.9\"")
        .replace(
            "\"awsRegion\"",
            "\"somethingNew\":{\"nested\":[1,2]},\"awsRegion\"",
        )]);
    assert!(only_records(&v29)[0].is_ok());
}

#[test]
fn malformed_bodies_are_message_errors() {
    assert!(matches!(parse_message(""), Err(MessageError::Empty)));
    assert!(matches!(parse_message("   \n"), Err(MessageError::Empty)));
    assert!(matches!(
        parse_message("{not json"),
        Err(MessageError::Json(_))
    ));
    assert!(matches!(parse_message("[1,2]"), Err(MessageError::Json(_))));
    assert!(matches!(
        parse_message(r#"{"hello":"world"}"#),
        Err(MessageError::UnknownShape)
    ));
    assert!(matches!(
        parse_message(r#"{"Type":"Notification","Message":"nope"}"#),
        Err(MessageError::Sns(_))
    ));
}

#[test]
fn one_bad_record_does_not_hide_the_others() {
    let body = records_body(&[
        aws_record("ObjectCreated:Put", "b", "one.parquet", Some(1)),
        r#"{"eventVersion":"2.1","eventName":"ObjectCreated:Put"}"#.to_string(),
        aws_record("ObjectCreated:Put", "b", "three.parquet", Some(3)),
    ]);
    let records = only_records(&body);
    assert_eq!(records.len(), 3);
    assert!(records[0].is_ok());
    assert_eq!(records[1], Err(RecordError::Missing("eventTime")));
    assert_eq!(records[2].as_ref().unwrap().key, "three.parquet");
}

#[test]
fn size_of_the_wrong_type_is_a_record_error() {
    let body = records_body(&[aws_record("ObjectCreated:Put", "b", "k.parquet", None)
        .replace("\"eTag\"", "\"size\":\"big\",\"eTag\"")]);
    assert!(matches!(
        only_records(&body)[0],
        Err(RecordError::Malformed(_))
    ));
}

#[test]
fn oversized_and_deeply_nested_bodies_are_rejected() {
    let huge = format!(r#"{{"Records":[],"pad":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
    assert!(matches!(
        parse_message(&huge),
        Err(MessageError::TooLarge(_))
    ));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(parse_message(&deep), Err(MessageError::Json(_))));
    let deep_record = format!(
        r#"{{"Records":[{}{}]}}"#,
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    match parse_message(&deep_record) {
        Err(_) => {}
        Ok(MessageBody::Records(records)) => assert!(records.iter().all(Result::is_err)),
        Ok(MessageBody::TestEvent) => panic!("a nested array is not a test event"),
    }
}

#[test]
fn sequencers_compare_after_right_padding() {
    use std::cmp::Ordering;
    assert_eq!(
        compare_sequencers("0055AED6DCD90281E5", "0055aed6dcd90281e5"),
        Ordering::Equal
    );
    assert_eq!(
        compare_sequencers("0055AED6DCD9028", "0055AED6DCD90281E5"),
        Ordering::Less
    );
    assert_eq!(
        compare_sequencers("0056", "0055AED6DCD90281E5"),
        Ordering::Greater
    );
}

proptest! {
    #[test]
    fn parsing_never_panics(body in "\\PC*") {
        let _ = parse_message(&body);
    }

    #[test]
    fn parsing_arbitrary_json_never_panics(value in arbitrary_json()) {
        let _ = parse_message(&value.to_string());
        let wrapped = serde_json::json!({"Records": [value.clone()], "Type": "Notification", "Message": value.to_string()});
        let _ = parse_message(&wrapped.to_string());
    }
}

fn arbitrary_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-zA-Z0-9:%+ ]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("Records".to_string()),
                    Just("eventVersion".to_string()),
                    Just("s3".to_string()),
                    Just("bucket".to_string()),
                    Just("object".to_string()),
                    Just("key".to_string()),
                    Just("size".to_string()),
                    Just("name".to_string()),
                    Just("eventName".to_string()),
                    Just("eventTime".to_string()),
                    Just("detail".to_string()),
                    Just("source".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}
