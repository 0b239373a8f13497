use super::*;

#[test]
fn locations_are_s3_or_local() {
    assert!(supported_location("s3://bucket/warehouse"));
    assert!(supported_location("s3a://bucket/warehouse"));
    assert!(supported_location("file:///tmp/warehouse"));
    assert!(supported_location("/tmp/warehouse"));
    assert!(!supported_location("gs://bucket/warehouse"));
    assert!(!supported_location("hdfs://namenode/warehouse"));
    assert!(matches!(
        locate("s3a://bucket/a/b.parquet"),
        Ok(Location::Object {
            bucket: "bucket",
            key: "a/b.parquet"
        })
    ));
    let refused = locate("abfss://user:secret@account/x").err().unwrap();
    assert!(!refused.to_string().contains("secret"), "{refused}");
}

#[test]
fn the_catalogs_endpoint_turns_on_path_style_and_its_properties_win() {
    let catalog = CatalogConfig {
        catalog_impl: "org.apache.iceberg.rest.RESTCatalog".to_string(),
        uri: "http://rest:8181".to_string(),
        warehouse: "s3://lake/warehouse".to_string(),
        io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
        s3_endpoint: "http://127.0.0.1:9000".to_string(),
        properties: [("s3.path-style-access".to_string(), "false".to_string())].into(),
    };
    let properties = catalog_storage_properties(&catalog);
    assert_eq!(properties["s3.endpoint"], "http://127.0.0.1:9000");
    assert_eq!(properties["s3.path-style-access"], "false");
}

/// An S3-compatible store's multipart calls, answering its completion as moto does (with a
/// root element the SDK does not expect) and recording what it got.
#[derive(Default)]
struct OddStore {
    parts: std::sync::Mutex<Vec<usize>>,
    completed: std::sync::atomic::AtomicBool,
    aborted: std::sync::atomic::AtomicBool,
    /// HeadObject answers this many bytes more than it holds (0: the truth).
    head_skew: u64,
}

async fn odd_store(
    axum::extract::State(store): axum::extract::State<Arc<OddStore>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use std::sync::atomic::Ordering;
    let query = uri.query().unwrap_or_default();
    let total = || store.parts.lock().unwrap().iter().sum::<usize>() as u64;
    match method.as_str() {
            "POST" if query.contains("uploads") => (
                axum::http::StatusCode::OK,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult><Bucket>lake</Bucket><Key>big</Key><UploadId>upload-1</UploadId></InitiateMultipartUploadResult>",
            )
                .into_response(),
            "PUT" if query.contains("partNumber") => {
                store.parts.lock().unwrap().push(body.len());
                let etag = format!("\"etag-{}\"", store.parts.lock().unwrap().len());
                (axum::http::StatusCode::OK, [("etag", etag)], "").into_response()
            }
            "POST" if query.contains("uploadId") => {
                store.completed.store(true, Ordering::SeqCst);
                (
                    axum::http::StatusCode::OK,
                    "<CompleteMultipartUploadResponse xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>lake</Bucket><Key>big</Key><ETag>\"whole\"</ETag></CompleteMultipartUploadResponse>",
                )
                    .into_response()
            }
            "HEAD" if store.completed.load(Ordering::SeqCst) => (
                axum::http::StatusCode::OK,
                [("content-length", (total() + store.head_skew).to_string())],
            )
                .into_response(),
            "HEAD" => axum::http::StatusCode::NOT_FOUND.into_response(),
            "DELETE" => {
                store.aborted.store(true, Ordering::SeqCst);
                axum::http::StatusCode::NO_CONTENT.into_response()
            }
            _ => axum::http::StatusCode::BAD_REQUEST.into_response(),
        }
}

/// An S3 client's storage on a local server answering with `app`.
async fn storage_on(app: axum::Router) -> ObjectStorage {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let aws = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    let properties = HashMap::from([
        ("s3.endpoint".to_string(), format!("http://{address}")),
        ("s3.path-style-access".to_string(), "true".to_string()),
        ("s3.access-key-id".to_string(), "key".to_string()),
        ("s3.secret-access-key".to_string(), "secret".to_string()),
    ]);
    ObjectStorage {
        s3: Some(s3_client(&aws, &properties)),
    }
}

async fn write_through_odd_store(head_skew: u64) -> (iceberg::Result<()>, Arc<OddStore>) {
    let store = Arc::new(OddStore {
        head_skew,
        ..OddStore::default()
    });
    let storage = storage_on(
        axum::Router::new()
            .fallback(odd_store)
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(store.clone()),
    )
    .await;
    let mut writer = storage.writer("s3://lake/big").await.unwrap();
    let chunk = Bytes::from(vec![7u8; 3 * 1024 * 1024]);
    for _ in 0..7 {
        writer.write(chunk.clone()).await.unwrap();
    }
    (writer.close().await, store)
}

#[tokio::test]
async fn large_outputs_go_up_in_parts_and_an_odd_completion_answer_is_checked() {
    use std::sync::atomic::Ordering;
    let (closed, store) = write_through_odd_store(0).await;
    closed.unwrap();
    assert_eq!(
        *store.parts.lock().unwrap(),
        [PART_BYTES, PART_BYTES, 21 * 1024 * 1024 - 2 * PART_BYTES],
        "8 MiB parts, the rest last"
    );
    assert!(!store.aborted.load(Ordering::SeqCst));
    // An object of another size than what was sent: the upload failed after all.
    let (closed, store) = write_through_odd_store(1).await;
    let error = closed.unwrap_err();
    assert!(
        error.to_string().contains("CompleteMultipartUpload"),
        "{error}"
    );
    assert!(
        store.aborted.load(Ordering::SeqCst),
        "the upload is aborted"
    );
}

/// Objects served by range, counting the GetObject calls.
struct RangeStore {
    objects: HashMap<String, Bytes>,
    gets: std::sync::atomic::AtomicUsize,
}

async fn range_store(
    axum::extract::State(store): axum::extract::State<Arc<RangeStore>>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    store.gets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let Some(object) = store.objects.get(uri.path()) else {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    };
    let range = headers["range"]
        .to_str()
        .unwrap()
        .trim_start_matches("bytes=");
    let (first, last) = range.split_once('-').unwrap();
    let (first, last): (usize, usize) = (first.parse().unwrap(), last.parse().unwrap());
    let body = object.slice(first..(last + 1).min(object.len()));
    (axum::http::StatusCode::PARTIAL_CONTENT, body).into_response()
}

#[tokio::test]
async fn a_small_objects_later_reads_come_from_its_first_one() {
    use std::sync::atomic::Ordering;
    let small = Bytes::from((0..3_000u32).map(|i| i as u8).collect::<Vec<u8>>());
    let large = Bytes::from(
        (0..2_000_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let store = Arc::new(RangeStore {
        objects: HashMap::from([
            ("/lake/small".to_string(), small.clone()),
            ("/lake/large".to_string(), large.clone()),
        ]),
        gets: Default::default(),
    });
    let storage = storage_on(
        axum::Router::new()
            .fallback(range_store)
            .with_state(store.clone()),
    )
    .await;
    let gets = || store.gets.load(Ordering::SeqCst);

    // A footer's read of a small file is the whole file: what follows is served from it.
    let reader = storage.reader("s3://lake/small").await.unwrap();
    assert_eq!(reader.read(0..3_000).await.unwrap(), small);
    assert_eq!(gets(), 1);
    assert_eq!(reader.read(100..200).await.unwrap(), small.slice(100..200));
    assert_eq!(
        reader.read(2_990..3_000).await.unwrap(),
        small.slice(2_990..3_000)
    );
    assert_eq!(gets(), 1, "the later reads come from memory");
    // Another reader of the same object keeps nothing of this one's.
    let other = storage.reader("s3://lake/small").await.unwrap();
    assert_eq!(other.read(100..200).await.unwrap(), small.slice(100..200));
    assert_eq!(gets(), 2);

    // A large file: its tail is kept, its other ranges are fetched, and a read longer than
    // what is kept is never kept.
    let tail = 2_000_000 - 512 * 1024..2_000_000u64;
    let reader = storage.reader("s3://lake/large").await.unwrap();
    let at = |range: Range<u64>| large.slice(range.start as usize..range.end as usize);
    assert_eq!(reader.read(tail.clone()).await.unwrap(), at(tail.clone()));
    assert_eq!(
        reader.read(1_999_000..1_999_500).await.unwrap(),
        at(1_999_000..1_999_500)
    );
    assert_eq!(gets(), 3);
    assert_eq!(reader.read(0..100).await.unwrap(), at(0..100));
    assert_eq!(gets(), 4, "a range outside the kept bytes is fetched");
    assert_eq!(reader.read(0..1_500_000).await.unwrap(), at(0..1_500_000));
    assert_eq!(reader.read(0..1_500_000).await.unwrap(), at(0..1_500_000));
    assert_eq!(gets(), 6, "a read longer than 1 MiB is not kept");
    assert_eq!(reader.read(50..60).await.unwrap(), at(50..60));
    assert_eq!(gets(), 6, "the last kept read still serves");
}

#[tokio::test]
async fn local_files_are_written_read_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = format!("file://{}/a/b.bin", dir.path().display());
    let storage = ObjectStorage::local();
    storage
        .write(&path, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    assert_eq!(
        storage.read(&path).await.unwrap(),
        Bytes::from_static(b"abc")
    );
    assert_eq!(storage.metadata(&path).await.unwrap().size, 3);
    storage.delete(&path).await.unwrap();
    assert!(!storage.exists(&path).await.unwrap());
    let s3 = storage.read("s3://bucket/key").await.unwrap_err();
    assert!(s3.to_string().contains("no S3 client"), "{s3}");
}
