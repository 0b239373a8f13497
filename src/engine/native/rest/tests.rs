use super::*;
use iceberg::spec::{Snapshot, TableMetadata};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap as AxumHeaders, Method as AxumMethod, StatusCode as AxumStatus, Uri};
use axum::response::IntoResponse;

const SECRET: &str = "client-secret-7731";

/// A REST catalog standing in for the real one: a `prefix` override, an OAuth2 token
/// endpoint that hands out numbered tokens, the table, and commit answers from a script.
#[derive(Default)]
struct Scripted {
    commits: Mutex<Vec<u16>>,
    tokens: Mutex<u32>,
    seen: Mutex<Vec<(String, String, Option<String>)>>,
    /// Every request as it arrived: method, path and query, headers, body.
    raw: Mutex<Vec<(String, String, AxumHeaders, String)>>,
}

async fn serve(
    State(scripted): State<Arc<Scripted>>,
    method: AxumMethod,
    uri: Uri,
    headers: AxumHeaders,
    body: String,
) -> axum::response::Response {
    let authorization = headers
        .get("authorization")
        .map(|value| value.to_str().unwrap().to_string());
    scripted.seen.lock().unwrap().push((
        method.to_string(),
        uri.to_string(),
        authorization.clone(),
    ));
    scripted.raw.lock().unwrap().push((
        method.to_string(),
        uri.to_string(),
        headers.clone(),
        body.clone(),
    ));
    let table = "/v1/ws/one/namespaces/analytics%1Fdaily/tables/events";
    match (method.as_str(), uri.path()) {
        ("GET", "/v1/config") => (
            AxumStatus::OK,
            r#"{"defaults":{},"overrides":{"prefix":"ws/one"}}"#,
        )
            .into_response(),
        ("POST", "/v1/oauth/tokens") => {
            assert!(body.contains(&format!("client_secret={SECRET}")), "{body}");
            assert!(body.contains("client_id=icepack"), "{body}");
            let mut tokens = scripted.tokens.lock().unwrap();
            *tokens += 1;
            (
                AxumStatus::OK,
                format!(
                    r#"{{"access_token":"token-{}","token_type":"bearer"}}"#,
                    *tokens
                ),
            )
                .into_response()
        }
        (_, path) if path != table => {
            (AxumStatus::NOT_FOUND, format!("no route {path}")).into_response()
        }
        ("GET", _) => {
            let metadata: serde_json::Value =
                serde_json::from_str(super::super::testdata::METADATA_V2).unwrap();
            let answer = serde_json::json!({
                "metadata-location": "s3://lake/warehouse/analytics/events/metadata/00003-8f3c8b4e-3a9c-4f57-9c1e-3c3a7a2f1b10.metadata.json",
                "metadata": metadata,
                "config": {"s3.access-key-id": "vended"}
            });
            (AxumStatus::OK, answer.to_string()).into_response()
        }
        ("POST", _) => {
            let status = scripted.commits.lock().unwrap().remove(0);
            if status == 401 && authorization.as_deref() == Some("Bearer token-1") {
                return (AxumStatus::UNAUTHORIZED, "expired").into_response();
            }
            let body = r#"{"error":{"message":"Requirement failed: branch main has changed","type":"CommitFailedException","code":409}}"#;
            (AxumStatus::from_u16(status).unwrap(), body).into_response()
        }
        _ => (AxumStatus::METHOD_NOT_ALLOWED, "").into_response(),
    }
}

fn replace_on(metadata: &TableMetadata) -> Snapshot {
    Snapshot::builder()
        .with_snapshot_id(42)
        .with_parent_snapshot_id(metadata.current_snapshot_id())
        .with_sequence_number(metadata.last_sequence_number() + 1)
        .with_timestamp_ms(metadata.last_updated_ms() + 1)
        .with_manifest_list("s3://lake/t/metadata/snap-42.avro")
        .with_summary(iceberg::spec::Summary {
            operation: iceberg::spec::Operation::Replace,
            additional_properties: HashMap::new(),
        })
        .build()
}

#[tokio::test]
async fn an_answer_lost_after_sending_is_unknown_for_a_commit_and_unavailable_for_a_read() {
    // A server that takes each request and hangs up without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; 65536];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buffer).await;
            drop(socket);
        }
    });
    let metadata: TableMetadata =
        serde_json::from_str(super::super::testdata::METADATA_V2).unwrap();
    let aws = SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let mut client = RestTableCatalog {
        signer: None,
        http: http_client().unwrap(),
        aws,
        catalog: CatalogConfig {
            catalog_impl: super::super::catalog::REST_CATALOG_IMPL.to_string(),
            uri: format!("http://{address}"),
            warehouse: "s3://lake/warehouse".to_string(),
            io_impl: String::new(),
            s3_endpoint: String::new(),
            properties: Default::default(),
        },
        auth: Auth::None,
        headers: HeaderMap::new(),
        table_url: Url::parse(&format!("http://{address}/v1/namespaces/a/tables/t")).unwrap(),
        identifier: TableIdent::from_strs(["a", "t"]).unwrap(),
        server_properties: Default::default(),
    };
    let base = LoadedTable {
        metadata: std::sync::Arc::new(metadata.clone()),
        metadata_location:
            "s3://lake/t/metadata/00003-8f3c8b4e-3a9c-4f57-9c1e-3c3a7a2f1b10.metadata.json"
                .to_string(),
        file_io: iceberg::io::FileIO::new_with_memory(),
        storage: crate::engine::native::storage::ObjectStorage::local(),
    };
    let connect = RestTableCatalog::connect(
        http_client().unwrap(),
        client.aws.clone(),
        &client.catalog,
        "a.t",
    )
    .await
    .err()
    .unwrap();
    assert!(
        matches!(connect, NativeError::CatalogUnavailable(_)),
        "a lost answer to GET /v1/config: {connect:?}"
    );
    let commit = client
        .commit(&base, replace_on(&metadata))
        .await
        .unwrap_err();
    assert!(matches!(commit, CommitError::StateUnknown(_)), "{commit:?}");
    let read = client.load().await.unwrap_err();
    assert!(
        matches!(read, NativeError::CatalogUnavailable(_)),
        "{read:?}"
    );
    // Nothing listening: the commit never left.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    client.table_url = Url::parse(&format!(
        "http://127.0.0.1:{closed_port}/v1/namespaces/a/tables/t"
    ))
    .unwrap();
    let refused = client
        .commit(&base, replace_on(&metadata))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            CommitError::Failed(NativeError::CatalogUnavailable(_))
        ),
        "{refused:?}"
    );
}

#[tokio::test]
async fn commits_answer_conflict_unknown_or_failure_as_the_catalog_says() {
    let scripted = Arc::new(Scripted::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(serve)
        .with_state(scripted.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let catalog = CatalogConfig {
        catalog_impl: super::super::catalog::REST_CATALOG_IMPL.to_string(),
        uri: format!("http://{address}/"),
        warehouse: "s3://lake/warehouse".to_string(),
        io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
        s3_endpoint: String::new(),
        properties: [("credential".to_string(), format!("icepack:{SECRET}"))].into(),
    };
    let aws = SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let client = RestTableCatalog::connect(
        http_client().unwrap(),
        aws,
        &catalog,
        "analytics.daily.events",
    )
    .await
    .unwrap();
    let table = client.load().await.unwrap();
    assert_eq!(table.metadata.last_sequence_number(), 3);

    scripted
        .commits
        .lock()
        .unwrap()
        .extend([409, 503, 400, 401, 200]);
    let conflict = client
        .commit(&table, replace_on(&table.metadata))
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, CommitError::Conflict(ref message) if message.contains("branch main has changed")),
        "{conflict:?}"
    );
    let unknown = client
        .commit(&table, replace_on(&table.metadata))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, CommitError::StateUnknown(_)),
        "{unknown:?}"
    );
    let refused = client
        .commit(&table, replace_on(&table.metadata))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, CommitError::Failed(NativeError::InvalidInput(_))),
        "{refused:?}"
    );
    // An expired token: exchanged again, the commit sent again (a 401 never committed).
    let answer = client.commit(&table, replace_on(&table.metadata)).await;
    assert!(
        matches!(answer, Err(CommitError::StateUnknown(ref message)) if message.contains("not valid")),
        "a 200 whose body is no commit answer: {answer:?}"
    );

    let seen = scripted.seen.lock().unwrap().clone();
    let table_requests: Vec<&(String, String, Option<String>)> = seen
        .iter()
        .filter(|(_, uri, _)| uri.contains("/tables/"))
        .collect();
    assert!(
        table_requests
            .iter()
            .all(|(_, uri, _)| uri
                .starts_with("/v1/ws/one/namespaces/analytics%1Fdaily/tables/events")),
        "{seen:?}"
    );
    assert_eq!(
        table_requests.last().unwrap().2.as_deref(),
        Some("Bearer token-2"),
        "{seen:?}"
    );
    assert!(seen
        .iter()
        .all(|(_, uri, authorization)| !uri.contains(SECRET)
            && authorization
                .as_deref()
                .is_none_or(|value| !value.contains(SECRET))));
    for error in [
        format!("{conflict:?}"),
        format!("{unknown:?}"),
        format!("{refused:?}"),
    ] {
        assert!(
            !error.contains(SECRET) && !error.contains("token-"),
            "{error}"
        );
    }
}

#[test]
fn a_commit_asserts_the_table_and_its_main_branch() {
    let metadata: TableMetadata =
        serde_json::from_str(super::super::testdata::METADATA_V2).unwrap();
    let identifier = TableIdent::from_strs(["analytics", "events"]).unwrap();
    let parent = metadata.current_snapshot_id().unwrap();
    let snapshot = Snapshot::builder()
        .with_snapshot_id(42)
        .with_parent_snapshot_id(Some(parent))
        .with_sequence_number(metadata.last_sequence_number() + 1)
        .with_timestamp_ms(metadata.last_updated_ms() + 1)
        .with_manifest_list("s3://lake/t/metadata/snap-42.avro")
        .with_summary(iceberg::spec::Summary {
            operation: iceberg::spec::Operation::Replace,
            additional_properties: HashMap::new(),
        })
        .build();
    let request = commit_request(&identifier, Change::snapshot(&metadata, snapshot).unwrap());
    let json = serde_json::to_value(&request).unwrap();
    let requirements = json["requirements"].as_array().unwrap();
    assert_eq!(requirements[0]["type"], "assert-table-uuid");
    assert_eq!(requirements[0]["uuid"], metadata.uuid().to_string());
    assert_eq!(requirements[1]["type"], "assert-ref-snapshot-id");
    assert_eq!(requirements[1]["ref"], "main");
    assert_eq!(requirements[1]["snapshot-id"], parent);
    let updates = json["updates"].as_array().unwrap();
    assert_eq!(updates[0]["action"], "add-snapshot");
    assert_eq!(updates[0]["snapshot"]["summary"]["operation"], "replace");
    assert_eq!(updates[1]["action"], "set-snapshot-ref");
    assert_eq!(updates[1]["ref-name"], "main");
    assert_eq!(updates[1]["snapshot-id"], 42);
    assert_eq!(updates[1]["type"], "branch");
}

/// A catalog behind AWS (Glue's, S3 Tables' REST endpoints): every request carries a SigV4
/// signature that verifies against the request as it arrived — the headers it names, the path
/// and query on the wire (`%1F` between namespace levels), the body — and the catalog's own
/// token moves to `Original-Authorization`, as Java's signer does.
#[tokio::test]
async fn a_sigv4_catalogs_requests_verify_as_they_arrive() {
    let scripted = Arc::new(Scripted::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(serve)
        .with_state(scripted.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    let catalog = CatalogConfig {
        catalog_impl: super::super::catalog::REST_CATALOG_IMPL.to_string(),
        uri: format!("http://{address}/"),
        warehouse: "s3://lake/warehouse".to_string(),
        io_impl: "org.apache.iceberg.aws.s3.S3FileIO".to_string(),
        s3_endpoint: String::new(),
        properties: [
            ("token", "catalog-token-5"),
            ("rest.sigv4-enabled", "true"),
            ("rest.signing-region", "us-west-2"),
            ("rest.signing-name", "glue"),
            ("rest.access-key-id", "AKIDEXAMPLE"),
            ("rest.secret-access-key", secret),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect(),
    };
    let aws = SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let client = RestTableCatalog::connect(
        http_client().unwrap(),
        aws,
        &catalog,
        "analytics.daily.events",
    )
    .await
    .unwrap();
    let table = client.load().await.unwrap();
    scripted.commits.lock().unwrap().push(409);
    let _ = client.commit(&table, replace_on(&table.metadata)).await;

    let credentials =
        aws_credential_types::Credentials::new("AKIDEXAMPLE", secret, None, None, "test");
    let requests = scripted.raw.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "config, load, commit");
    for (method, path, headers, body) in requests {
        assert_eq!(headers["original-authorization"], "Bearer catalog-token-5");
        let authorization = headers["authorization"].to_str().unwrap().to_string();
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
                && authorization.contains("/us-west-2/glue/aws4_request, "),
            "{authorization}"
        );
        assert!(!authorization.contains(secret));
        // Verified as AWS verifies: the headers it names, its time, the request as received.
        let named: Vec<&str> = authorization
            .split("SignedHeaders=")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .split(';')
            .collect();
        assert!(named.contains(&"x-amz-content-sha256"), "{named:?}");
        let mut signed = HeaderMap::new();
        for name in &named {
            signed.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(headers[*name].as_bytes()).unwrap(),
            );
        }
        let date = headers["x-amz-date"].to_str().unwrap();
        let time = chrono::NaiveDateTime::parse_from_str(date, "%Y%m%dT%H%M%SZ")
            .unwrap()
            .and_utc();
        let time = std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(time.timestamp() as u64);
        let expected = super::super::sigv4::signed_headers_for_test(
            &credentials,
            "us-west-2",
            "glue",
            (
                &method,
                &format!("http://{address}{path}"),
                &signed,
                body.as_bytes(),
            ),
            time,
        );
        assert_eq!(authorization, expected, "{method} {path}");
    }
}
