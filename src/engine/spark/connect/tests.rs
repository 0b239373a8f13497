use super::*;

fn job(conf: &[(&str, &str)]) -> SparkJob {
    SparkJob {
        run_id: "20240501T120000Z-abc".to_string(),
        table: "a.b".to_string(),
        catalog: "lakehouse".to_string(),
        statements: vec![Statement::new(StatementKind::Other, "SELECT 1")],
        nonce: "0f1e2d3c4b5a69788796a5b4c3d2e1f0".to_string(),
        conf: conf
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        options: Vec::new(),
        recovery: Vec::new(),
        claimed: Default::default(),
        attempt: 1,
        env: Vec::new(),
        timeout: Duration::from_secs(60),
    }
}

#[test]
fn a_runs_session_is_made_of_its_nonce() {
    let nonce = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let id = run_session_id(nonce, 1);
    assert_eq!(id, "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0");
    assert_eq!(id, run_session_id(nonce, 1), "the same after a restart");
    assert_eq!(
        run_session_id(nonce, 2),
        "0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f1",
        "each attempt its own session"
    );
    // A version 4 UUID, as the client and the server require, whatever the nonce.
    for nonce in ["ffffffffffffffffffffffffffffffff", "", "not hex"] {
        let id = run_session_id(nonce, 3);
        let chars: Vec<char> = id.chars().collect();
        assert_eq!(chars.len(), 36, "{id}");
        for (index, c) in chars.iter().enumerate() {
            match index {
                8 | 13 | 18 | 23 => assert_eq!(*c, '-', "{id}"),
                14 => assert_eq!(*c, '4', "version 4: {id}"),
                19 => assert!("89ab".contains(*c), "RFC 4122 variant: {id}"),
                _ => assert!(c.is_ascii_hexdigit() && !c.is_ascii_uppercase(), "{id}"),
            }
        }
    }
    assert_ne!(
        run_session_id("", 1),
        run_session_id("", 1),
        "no nonce: a random session"
    );
}

#[test]
fn only_the_catalog_and_session_settings_reach_a_session() {
    let settings = session_settings(&job(&[
        (
            "spark.sql.catalog.lakehouse",
            "org.apache.iceberg.spark.SparkCatalog",
        ),
        ("spark.sql.catalog.lakehouse.uri", "http://rest:8181"),
        ("spark.sql.catalog.lakehouse2.uri", "http://other"),
        ("spark.sql.extensions", "x"),
        ("spark.sql.catalogImplementation", "in-memory"),
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.sql.shuffle.partitions", "8"),
        ("spark.hadoop.fs.s3a.endpoint", "http://s3"),
        ("spark.ui.enabled", "false"),
    ]));
    assert_eq!(settings.catalog_key, "spark.sql.catalog.lakehouse");
    assert_eq!(
        settings.catalog,
        vec![
            (
                "spark.sql.catalog.lakehouse".to_string(),
                "org.apache.iceberg.spark.SparkCatalog".to_string()
            ),
            (
                "spark.sql.catalog.lakehouse.uri".to_string(),
                "http://rest:8181".to_string()
            ),
        ]
    );
    assert_eq!(
        settings.session,
        vec![
            ("spark.sql.session.timeZone".to_string(), "UTC".to_string()),
            ("spark.sql.shuffle.partitions".to_string(), "8".to_string()),
        ]
    );
}

#[test]
fn reads_between_writes_run_together_and_writes_alone() {
    let statements = [
        "REFRESH TABLE c.a.b",
        "DESCRIBE TABLE c.a.b",
        "SHOW TBLPROPERTIES c.a.b ('sort-order')",
        "CALL c.system.rewrite_data_files(table => 'a.b')",
        "SELECT 1",
        "select 2",
        "SELECT 3",
        "CALL c.system.expire_snapshots(table => 'a.b')",
        "SELECT 4",
    ];
    assert_eq!(
        read_only_groups(&statements),
        vec![0..1, 1..3, 3..4, 4..7, 7..8, 8..9]
    );
    assert!(read_only_groups(&[]).is_empty());
}

#[test]
fn endpoints_are_validated_and_shown_without_their_token() {
    let endpoint = ConnectEndpoint::parse("sc://spark.internal:15002", true)
        .unwrap()
        .with_token(Some("very-secret-token".to_string()));
    assert_eq!(endpoint.shown(), "sc://spark.internal:15002 (TLS) (token)");
    let shown = ConnectEndpoint::parse("sc://h:1/;token=abc123secret;use_ssl=true", false)
        .unwrap()
        .shown();
    assert!(!shown.contains("abc123secret"), "{shown}");
    assert!(ConnectEndpoint::parse("http://h:15002", false).is_err());
    assert!(ConnectEndpoint::parse("", false).is_err());
    assert!(ConnectEndpoint::parse("sc://h:15002/path", false).is_err());
}

#[test]
fn transport_failures_are_told_from_statement_failures() {
    let refused = SparkError::connect_msg("[Unavailable] tcp connect error");
    assert!(server_error(&refused).transport);
    let mut failed = SparkError::value("TABLE_OR_VIEW_NOT_FOUND", &[]);
    failed.grpc_code = Some(13);
    assert!(!server_error(&failed).transport);
}

#[tokio::test]
async fn a_server_that_is_not_there_fails_within_the_connect_timeout() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let runner = ConnectRunner::new(
        settings(
            &format!("sc://127.0.0.1:{port}"),
            false,
            None,
            Duration::from_secs(3),
        )
        .unwrap(),
    );
    let started = std::time::Instant::now();
    let error = runner.run(&job(&[])).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("engine unavailable"), "{error}");
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{port}")),
        "{error}"
    );
}
