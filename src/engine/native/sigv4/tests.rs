use super::*;

/// AWS's SigV4 test suite (aws-sig-v4-test-suite): its credentials, region, service and time.
const ACCESS_KEY: &str = "AKIDEXAMPLE";
const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// 2015-08-30T12:36:00Z.
const SUITE_SECONDS: u64 = 1_440_938_160;

fn suite_credentials() -> Credentials {
    Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "test-suite")
}

fn suite_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(SUITE_SECONDS)
}

/// The suite's `Authorization` for a request with only `host` and `x-amz-date` signed.
fn suite_authorization(method: &str, url: &str, body: &[u8]) -> String {
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("example.amazonaws.com"));
    let signed = signed_headers(
        &suite_credentials(),
        "us-east-1",
        "service",
        (method, url, &headers, body),
        suite_time(),
        false,
    )
    .unwrap();
    let find = |name: &str| {
        signed
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
            .unwrap_or_else(|| panic!("no {name} in {signed:?}"))
    };
    assert_eq!(find("x-amz-date"), "20150830T123600Z");
    find("authorization")
}

/// The suite's vectors of plain paths. (Its `get-utf8` signs the raw path encoded once; AWS
/// services other than S3 — and Java's signer, whose `doubleUrlEncode` is on — encode the path
/// the request carries once more, as the SDK's signer does here.)
#[test]
fn requests_are_signed_as_the_aws_test_suite_says() {
    let scope = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=";
    for (case, method, url, signature) in [
        (
            "get-vanilla",
            "GET",
            "https://example.amazonaws.com/",
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        ),
        (
            "get-vanilla-query-order-key-case",
            "GET",
            "https://example.amazonaws.com/?Param2=value2&Param1=value1",
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        ),
        (
            "post-vanilla",
            "POST",
            "https://example.amazonaws.com/",
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        ),
    ] {
        assert_eq!(
            suite_authorization(method, url, b""),
            format!("{scope}{signature}"),
            "{case}"
        );
    }
}

#[test]
fn the_body_hash_is_sent_and_signed_as_javas_signer_does() {
    let mut headers = HeaderMap::new();
    headers.insert(
        "host",
        HeaderValue::from_static("glue.us-east-1.amazonaws.com"),
    );
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    let body = br#"{"updates":[]}"#;
    let signed = signed_headers(
        &suite_credentials(),
        "us-east-1",
        "glue",
        (
            "POST",
            "https://glue.us-east-1.amazonaws.com/iceberg/v1/namespaces/a/tables/t",
            &headers,
            body,
        ),
        suite_time(),
        true,
    )
    .unwrap();
    let value = |name: &str| {
        signed
            .iter()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
            .unwrap_or_default()
            .to_string()
    };
    // sha256 of the body (`sha256sum`).
    assert_eq!(
        value("x-amz-content-sha256"),
        "7ba5c52c249dc28c4917d6cb8c68f4298b621f3458fdd2aed92f217677e3c385"
    );
    let authorization = value("authorization");
    assert!(
        authorization.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/glue/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date, Signature="
        ),
        "{authorization}"
    );
    assert!(!authorization.contains(SECRET_KEY));
}

#[tokio::test]
async fn the_catalogs_properties_turn_signing_on_with_their_region_name_and_keys() {
    let aws = aws_config::SdkConfig::builder().build();
    let properties = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect()
    };
    assert!(SigV4::from_properties(&properties(&[]), &aws)
        .unwrap()
        .is_none());
    assert!(
        SigV4::from_properties(&properties(&[("rest.sigv4-enabled", "false")]), &aws)
            .unwrap()
            .is_none()
    );
    let error =
        SigV4::from_properties(&properties(&[("rest.sigv4-enabled", "true")]), &aws).unwrap_err();
    assert!(error.to_string().contains("region"), "{error}");
    let signer = SigV4::from_properties(
        &properties(&[
            ("rest.sigv4-enabled", "true"),
            ("client.region", "eu-west-1"),
            ("rest.signing-name", "s3tables"),
            ("rest.access-key-id", ACCESS_KEY),
            ("rest.secret-access-key", SECRET_KEY),
        ]),
        &aws,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        (signer.region.as_str(), signer.name.as_str()),
        ("eu-west-1", "s3tables")
    );
    assert!(!format!("{signer:?}").contains(SECRET_KEY));
    // A bearer token the request carried moves aside; the signature takes its place.
    let mut headers = HeaderMap::new();
    headers.insert(
        "host",
        HeaderValue::from_static("s3tables.eu-west-1.amazonaws.com"),
    );
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer t0ken"));
    signer
        .sign(
            "GET",
            "https://s3tables.eu-west-1.amazonaws.com/iceberg/v1/config",
            &mut headers,
            b"",
        )
        .await
        .unwrap();
    assert_eq!(headers[ORIGINAL_AUTHORIZATION], "Bearer t0ken");
    let authorization = headers[AUTHORIZATION].to_str().unwrap();
    assert!(
        authorization.contains("/eu-west-1/s3tables/aws4_request"),
        "{authorization}"
    );
    assert!(headers.contains_key("x-amz-date"));
    for odd in [
        "file:///tmp/catalog",
        "https://user:pass@glue.example.com/x",
        "no url",
    ] {
        let refused = signer
            .sign("GET", odd, &mut HeaderMap::new(), b"")
            .await
            .unwrap_err();
        assert!(!refused.to_string().contains("pass@"), "{refused}");
    }
    let half = SigV4::from_properties(
        &properties(&[
            ("rest.sigv4-enabled", "true"),
            ("rest.signing-region", "us-east-1"),
            ("rest.access-key-id", ACCESS_KEY),
        ]),
        &aws,
    )
    .unwrap_err();
    assert!(half.to_string().contains("go together"), "{half}");
}
