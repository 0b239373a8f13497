//! AWS Signature Version 4 on a REST catalog's requests, as Iceberg's Java client signs them
//! (`RESTSigV4Signer`) for catalogs behind AWS — Glue's Iceberg REST endpoint
//! (`rest.signing-name = glue`), S3 Tables' (`s3tables`), API Gateway (`execute-api`, the
//! default):
//!
//! - on with `rest.sigv4-enabled = true`; the region is `rest.signing-region`, else the
//!   catalog's `client.region`, else the AWS chain's;
//! - credentials from `rest.access-key-id` / `rest.secret-access-key` (/ `rest.session-token`)
//!   when set, else the same AWS chain as SQS and S3 (environment, profile, web identity — IRSA on
//!   EKS —, instance metadata), asked for each request so rotated credentials are used;
//! - the body's SHA-256 goes in `x-amz-content-sha256` and is signed; an `Authorization` header
//!   the request already has (a bearer token) moves to `Original-Authorization`, as in Java.
//!
//! The signing itself is the AWS SDK's (`aws-sigv4`), checked here against AWS's published
//! SigV4 test suite. No key, secret, token or signature is ever logged or put in an error.

use std::collections::HashMap;
use std::time::SystemTime;

use aws_config::SdkConfig;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
};
use aws_sigv4::sign::v4;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};

use super::NativeError;

/// The header a request's own `Authorization` moves to before signing.
const ORIGINAL_AUTHORIZATION: &str = "original-authorization";

/// Java's default `rest.signing-name`.
const DEFAULT_SIGNING_NAME: &str = "execute-api";

/// Where a request's credentials come from.
enum Source {
    Static(Credentials),
    Chain(SharedCredentialsProvider),
}

/// The signer of one REST catalog's requests.
pub struct SigV4 {
    region: String,
    name: String,
    source: Source,
}

impl std::fmt::Debug for SigV4 {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SigV4({}, {})", self.name, self.region)
    }
}

impl SigV4 {
    /// The signer the catalog's properties ask for (`None`: requests go unsigned).
    pub fn from_properties(
        properties: &HashMap<String, String>,
        aws: &SdkConfig,
    ) -> Result<Option<SigV4>, NativeError> {
        let property = |key: &str| properties.get(key).filter(|value| !value.is_empty());
        if !property("rest.sigv4-enabled").is_some_and(|value| value.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let region = property("rest.signing-region")
            .or_else(|| property("client.region"))
            .cloned()
            .or_else(|| aws.region().map(|region| region.to_string()))
            .ok_or_else(|| {
                NativeError::InvalidInput(
                    "rest.sigv4-enabled needs a region: rest.signing-region, client.region or AWS_REGION"
                        .to_string(),
                )
            })?;
        let name = property("rest.signing-name")
            .cloned()
            .unwrap_or_else(|| DEFAULT_SIGNING_NAME.to_string());
        let source = match (
            property("rest.access-key-id"),
            property("rest.secret-access-key"),
        ) {
            (Some(key), Some(secret)) => Source::Static(Credentials::new(
                key,
                secret,
                property("rest.session-token").cloned(),
                None,
                "icepack-catalog-properties",
            )),
            (Some(_), None) | (None, Some(_)) => {
                return Err(NativeError::InvalidInput(
                    "rest.access-key-id and rest.secret-access-key go together".to_string(),
                ))
            }
            (None, None) => Source::Chain(aws.credentials_provider().ok_or_else(|| {
                NativeError::InvalidInput(
                    "rest.sigv4-enabled, but the AWS chain has no credentials provider".to_string(),
                )
            })?),
        };
        Ok(Some(SigV4 {
            region,
            name,
            source,
        }))
    }

    /// Signs a request: adds `x-amz-date`, `x-amz-content-sha256`, `Authorization` (and
    /// `x-amz-security-token` with temporary credentials) to `headers`.
    pub async fn sign(
        &self,
        method: &str,
        url: &str,
        headers: &mut HeaderMap,
        body: &[u8],
    ) -> Result<(), NativeError> {
        // The signer takes the host from the URL; a URL without one (or with user information,
        // which would be signed as part of it) cannot be signed as the server will check it.
        let parsed = reqwest::Url::parse(url)
            .map_err(|_| NativeError::InvalidInput("the REST catalog's URL is not a URL".into()))?;
        if parsed.host_str().is_none()
            || !parsed.username().is_empty()
            || parsed.password().is_some()
        {
            return Err(NativeError::InvalidInput(
                "a SigV4-signed REST catalog's `uri` needs a host and no user information"
                    .to_string(),
            ));
        }
        let credentials = match &self.source {
            Source::Static(credentials) => credentials.clone(),
            Source::Chain(provider) => provider.provide_credentials().await.map_err(|error| {
                NativeError::CatalogUnavailable(format!(
                    "no AWS credentials to sign the REST catalog's requests: {}",
                    crate::base::redact::hide_secrets(&error.to_string())
                ))
            })?,
        };
        if let Some(original) = headers.remove(AUTHORIZATION) {
            headers.insert(HeaderName::from_static(ORIGINAL_AUTHORIZATION), original);
        }
        let signed = signed_headers(
            &credentials,
            &self.region,
            &self.name,
            (method, url, &*headers, body),
            SystemTime::now(),
            true,
        )?;
        for (name, value) in signed {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| NativeError::Other("SigV4 gave an invalid header name".to_string()))?;
            let value = HeaderValue::from_str(&value).map_err(|_| {
                NativeError::Other("SigV4 gave an invalid header value".to_string())
            })?;
            headers.insert(name, value);
        }
        Ok(())
    }
}

/// The headers SigV4 adds to a request (`method`, `url`, its headers and body) signed at `time`;
/// with `content_sha256`, the body's hash is sent and signed in `x-amz-content-sha256`.
fn signed_headers(
    credentials: &Credentials,
    region: &str,
    name: &str,
    (method, url, headers, body): (&str, &str, &HeaderMap, &[u8]),
    time: SystemTime,
    content_sha256: bool,
) -> Result<Vec<(String, String)>, NativeError> {
    let failed = |what: &str| NativeError::Other(format!("cannot sign the request: {what}"));
    let mut settings = SigningSettings::default();
    if content_sha256 {
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    }
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(name)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|error| failed(&error.to_string()))?
        .into();
    let header_pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let request = SignableRequest::new(
        method,
        url,
        header_pairs.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|_| failed("the request is not signable"))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|_| failed("the signer refused the request"))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect())
}

/// The `Authorization` a request signed at `time` carries (a verifier's view, for tests).
#[cfg(test)]
pub fn signed_headers_for_test(
    credentials: &Credentials,
    region: &str,
    name: &str,
    request: (&str, &str, &HeaderMap, &[u8]),
    time: SystemTime,
) -> String {
    signed_headers(credentials, region, name, request, time, true)
        .unwrap()
        .into_iter()
        .find(|(header, _)| header == "authorization")
        .map(|(_, value)| value)
        .unwrap()
}

#[cfg(test)]
#[path = "sigv4/tests.rs"]
mod tests;
