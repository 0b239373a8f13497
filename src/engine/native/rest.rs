//! An Iceberg REST catalog table: `GET /v1/config`, the table's `LoadTableResult`, and the commit
//! `POST` with the requirements `assert-table-uuid` and `assert-ref-snapshot-id` on `main`
//! (409: a conflict; 500, 502, 503, 504 or a lost answer: state unknown, as Iceberg's Java client
//! treats them). Authentication as the catalog section configures it for Spark: a bearer
//! `token`, or an OAuth2 client `credential` (`id:secret` or `secret`) exchanged at
//! `oauth2-server-uri` (default `{uri}/v1/oauth/tokens`) with `scope` (default `catalog`), and
//! `header.*` properties as extra headers. Tokens and secrets never reach a log or an error.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_config::SdkConfig;
use iceberg::{NamespaceIdent, TableIdent};
use iceberg_catalog_rest::{CommitTableRequest, CommitTableResponse, LoadTableResult};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use tokio::sync::Mutex;

use super::catalog::{
    merged_properties, split_table_name, Change, CommitError, LoadedTable, TableCatalog,
};
use super::NativeError;
use crate::config::CatalogConfig;

/// How long one answer of the catalog may take.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The HTTP client of every REST catalog of an engine (rustls on ring, like the rest of icepack).
pub fn http_client() -> Result<reqwest::Client, NativeError> {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|error| NativeError::Other(format!("cannot build the HTTP client: {error}")))
}

/// How requests are authenticated.
enum Auth {
    None,
    Token(String),
    Credential {
        client_id: Option<String>,
        client_secret: String,
        endpoint: String,
        parameters: Vec<(String, String)>,
        token: Mutex<Option<String>>,
    },
}

/// `GET /v1/config`'s answer.
#[derive(Debug, Default, Deserialize)]
struct ServerConfig {
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    overrides: HashMap<String, String>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: ErrorModel,
}

#[derive(Deserialize)]
struct ErrorModel {
    #[serde(default)]
    message: String,
    #[serde(default, rename = "type")]
    kind: String,
}

/// One table of a REST catalog.
pub struct RestTableCatalog {
    http: reqwest::Client,
    aws: SdkConfig,
    catalog: CatalogConfig,
    auth: Auth,
    headers: HeaderMap,
    /// `{uri}/v1/{prefix}/namespaces/{ns}/tables/{table}`.
    table_url: Url,
    identifier: TableIdent,
    /// The server's defaults and overrides around the catalog's own properties.
    server_properties: (HashMap<String, String>, HashMap<String, String>),
    /// SigV4 on every request (`rest.sigv4-enabled`: Glue's and S3 Tables' REST endpoints).
    signer: Option<super::sigv4::SigV4>,
}

fn unavailable(what: &str, error: reqwest::Error) -> NativeError {
    // reqwest prints the URL; a catalog URL may carry user information.
    NativeError::CatalogUnavailable(crate::base::redact::hide_secrets(&format!(
        "{what}: {}",
        error.without_url()
    )))
}

impl RestTableCatalog {
    pub async fn connect(
        http: reqwest::Client,
        aws: SdkConfig,
        catalog: &CatalogConfig,
        table: &str,
    ) -> Result<RestTableCatalog, NativeError> {
        let (levels, name) = split_table_name(table)?;
        let base = Url::parse(catalog.uri.trim_end_matches('/')).map_err(|_| {
            NativeError::InvalidInput("the REST catalog's `uri` is not a URL".to_string())
        })?;
        let property = |key: &str| {
            catalog
                .properties
                .get(key)
                .filter(|value| !value.is_empty())
        };
        let auth = if let Some(token) = property("token") {
            Auth::Token(token.clone())
        } else if let Some(credential) = property("credential") {
            let (client_id, client_secret) = match credential.split_once(':') {
                Some((id, secret)) => (Some(id.to_string()), secret.to_string()),
                None => (None, credential.clone()),
            };
            let endpoint = property("oauth2-server-uri").cloned().unwrap_or_else(|| {
                format!("{}/v1/oauth/tokens", catalog.uri.trim_end_matches('/'))
            });
            let mut parameters = vec![(
                "scope".to_string(),
                property("scope")
                    .cloned()
                    .unwrap_or_else(|| "catalog".to_string()),
            )];
            for key in ["audience", "resource"] {
                if let Some(value) = property(key) {
                    parameters.push((key.to_string(), value.clone()));
                }
            }
            Auth::Credential {
                client_id,
                client_secret,
                endpoint,
                parameters,
                token: Mutex::new(None),
            }
        } else {
            Auth::None
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("x-client-version"),
            HeaderValue::from_static("0.14.1"),
        );
        for (key, value) in &catalog.properties {
            if let Some(name) = key.strip_prefix("header.") {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    NativeError::InvalidInput(format!("`{key}` is not a valid header name"))
                })?;
                let value = HeaderValue::from_str(value).map_err(|_| {
                    NativeError::InvalidInput(format!(
                        "the value of `{key}` is not a valid header value"
                    ))
                })?;
                headers.insert(name, value);
            }
        }
        let signer = super::sigv4::SigV4::from_properties(
            &catalog
                .properties
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            &aws,
        )?;
        let mut client = RestTableCatalog {
            signer,
            http,
            aws,
            catalog: catalog.clone(),
            auth,
            headers,
            table_url: base.clone(),
            identifier: TableIdent::new(
                NamespaceIdent::from_vec(levels.clone()).map_err(|_| {
                    NativeError::InvalidInput(format!(
                        "table `{}` has no namespace",
                        table.escape_debug()
                    ))
                })?,
                name.clone(),
            ),
            server_properties: Default::default(),
        };
        let mut config_url = base.clone();
        push_segments(&mut config_url, &["v1", "config"])?;
        if !catalog.warehouse.is_empty() {
            config_url
                .query_pairs_mut()
                .append_pair("warehouse", &catalog.warehouse);
        }
        let answer = client
            .send(Method::GET, config_url.clone(), None)
            .await
            .map_err(NoAnswer::for_read)?;
        let server: ServerConfig = match answer.status() {
            StatusCode::OK => answer.json().await.map_err(|error| {
                NativeError::InvalidInput(format!(
                    "the REST catalog's /v1/config answer is not valid: {}",
                    error.without_url()
                ))
            })?,
            status => return Err(answer_error("GET /v1/config", status, answer).await),
        };
        let mut merged: HashMap<String, String> = server.defaults.clone();
        merged.extend(catalog.properties.clone());
        merged.extend(server.overrides.clone());
        let root = match server.overrides.get("uri") {
            Some(uri) => Url::parse(uri.trim_end_matches('/')).map_err(|_| {
                NativeError::InvalidInput(
                    "the REST catalog overrides `uri` with no URL".to_string(),
                )
            })?,
            None => base,
        };
        let mut table_url = root;
        push_segments(&mut table_url, &["v1"])?;
        if let Some(prefix) = merged.get("prefix").filter(|prefix| !prefix.is_empty()) {
            let parts: Vec<&str> = prefix.split('/').filter(|part| !part.is_empty()).collect();
            push_segments(&mut table_url, &parts)?;
        }
        let namespace = levels.join("\u{1f}");
        push_segments(&mut table_url, &["namespaces", &namespace, "tables", &name])?;
        client.table_url = table_url;
        client.server_properties = (server.defaults, server.overrides);
        Ok(client)
    }

    /// The bearer token, exchanged once and cached; `refresh` asks for a new one.
    async fn bearer(&self, refresh: bool) -> Result<Option<String>, NativeError> {
        match &self.auth {
            Auth::None => Ok(None),
            Auth::Token(token) => Ok(Some(token.clone())),
            Auth::Credential {
                client_id,
                client_secret,
                endpoint,
                parameters,
                token,
            } => {
                let mut cached = token.lock().await;
                if let (Some(token), false) = (cached.as_ref(), refresh) {
                    return Ok(Some(token.clone()));
                }
                let mut form: Vec<(&str, &str)> = vec![
                    ("grant_type", "client_credentials"),
                    ("client_secret", client_secret),
                ];
                if let Some(id) = client_id {
                    form.push(("client_id", id));
                }
                form.extend(
                    parameters
                        .iter()
                        .map(|(key, value)| (key.as_str(), value.as_str())),
                );
                let answer = self
                    .http
                    .post(endpoint)
                    .headers(self.headers.clone())
                    .form(&form)
                    .send()
                    .await
                    .map_err(|error| unavailable("the OAuth2 token endpoint", error))?;
                if answer.status() != StatusCode::OK {
                    let status = answer.status();
                    return Err(NativeError::CatalogUnavailable(format!(
                        "the OAuth2 token endpoint refused the client credential ({status})"
                    )));
                }
                let answer: TokenAnswer = answer.json().await.map_err(|_| {
                    NativeError::CatalogUnavailable(
                        "the OAuth2 token endpoint's answer has no access_token".to_string(),
                    )
                })?;
                *cached = Some(answer.access_token.clone());
                Ok(Some(answer.access_token))
            }
        }
    }

    /// Sends a request, once more with a fresh token after a 401 (a credential's token expired).
    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
    ) -> Result<reqwest::Response, NoAnswer> {
        let mut refresh = false;
        loop {
            let mut headers = self.headers.clone();
            if let Some(token) = self.bearer(refresh).await.map_err(NoAnswer::NotSent)? {
                let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    NoAnswer::NotSent(NativeError::InvalidInput(
                        "the catalog's token is not a valid header value".to_string(),
                    ))
                })?;
                headers.insert(AUTHORIZATION, value);
            }
            if body.is_some() {
                headers.insert(
                    reqwest::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
            }
            if let Some(signer) = &self.signer {
                signer
                    .sign(
                        method.as_str(),
                        url.as_str(),
                        &mut headers,
                        body.as_deref().unwrap_or_default(),
                    )
                    .await
                    .map_err(NoAnswer::NotSent)?;
            }
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .headers(headers);
            if let Some(body) = &body {
                request = request.body(body.clone());
            }
            let answer = request.send().await.map_err(|error| {
                if error.is_connect() {
                    NoAnswer::NotSent(unavailable("the REST catalog", error))
                } else {
                    NoAnswer::Lost(format!(
                        "the REST catalog did not answer: {}",
                        crate::base::redact::hide_secrets(&error.without_url().to_string())
                    ))
                }
            })?;
            if answer.status() == StatusCode::UNAUTHORIZED
                && !refresh
                && matches!(self.auth, Auth::Credential { .. })
            {
                refresh = true;
                continue;
            }
            return Ok(answer);
        }
    }

    fn storage_for(
        &self,
        vended: &HashMap<String, String>,
    ) -> (iceberg::io::FileIO, super::storage::ObjectStorage) {
        let (defaults, overrides) = &self.server_properties;
        let mut properties = defaults.clone();
        properties.extend(merged_properties(&self.catalog, &HashMap::new()));
        properties.extend(overrides.clone());
        properties.extend(vended.clone());
        super::storage::table_storage(&self.aws, &properties)
    }
}

/// Why a request got no answer.
enum NoAnswer {
    /// It never left (no connection, no token): nothing happened.
    NotSent(NativeError),
    /// It left and no answer came back: the catalog may have acted on it.
    Lost(String),
}

impl NoAnswer {
    /// For a read, a lost answer is only an unavailable catalog.
    fn for_read(self) -> NativeError {
        match self {
            NoAnswer::NotSent(error) => error,
            NoAnswer::Lost(message) => NativeError::CatalogUnavailable(message),
        }
    }
}

fn push_segments(url: &mut Url, segments: &[&str]) -> Result<(), NativeError> {
    url.path_segments_mut()
        .map_err(|_| {
            NativeError::InvalidInput("the REST catalog's `uri` cannot take a path".to_string())
        })?
        .pop_if_empty()
        .extend(segments);
    Ok(())
}

/// A refusal, with the server's message (short; servers do not echo credentials).
async fn answer_error(what: &str, status: StatusCode, answer: reqwest::Response) -> NativeError {
    let body = answer.bytes().await.unwrap_or_default();
    let detail = serde_json::from_slice::<ErrorAnswer>(&body)
        .map(|error| format!("{}: {}", error.error.kind, error.error.message))
        .unwrap_or_default();
    let detail: String = crate::base::redact::hide_secrets(&detail)
        .chars()
        .take(300)
        .collect();
    let message = format!(
        "{what} answered {status}{}{detail}",
        if detail.is_empty() { "" } else { ": " }
    );
    match status {
        StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST => NativeError::InvalidInput(message),
        status if status.is_server_error() => NativeError::CatalogUnavailable(message),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            NativeError::CatalogUnavailable(message)
        }
        _ => NativeError::Other(message),
    }
}

/// What a `LoadTableResult` vends for the table's files: its `config` and the most specific
/// storage credential for its location.
fn vended_properties(result: &LoadTableResult) -> HashMap<String, String> {
    let mut properties = result.config.clone();
    if let Some(credentials) = &result.storage_credentials {
        if let Some(best) = credentials
            .iter()
            .filter(|credential| result.metadata.location().starts_with(&credential.prefix))
            .max_by_key(|credential| credential.prefix.len())
        {
            properties.extend(best.config.clone());
        }
    }
    properties
}

/// The REST request that commits `change` to the table.
pub fn commit_request(identifier: &TableIdent, change: Change) -> CommitTableRequest {
    CommitTableRequest {
        identifier: Some(identifier.clone()),
        requirements: change.requirements,
        updates: change.updates,
    }
}

#[async_trait]
impl TableCatalog for RestTableCatalog {
    async fn load(&self) -> Result<LoadedTable, NativeError> {
        let answer = self
            .send(Method::GET, self.table_url.clone(), None)
            .await
            .map_err(NoAnswer::for_read)?;
        let status = answer.status();
        if status != StatusCode::OK {
            return Err(answer_error("loading the table", status, answer).await);
        }
        let result: LoadTableResult = answer.json().await.map_err(|error| {
            NativeError::InvalidInput(format!(
                "the REST catalog's table metadata is not valid Iceberg metadata: {}",
                error.without_url()
            ))
        })?;
        let metadata_location = result.metadata_location.clone().ok_or_else(|| {
            NativeError::InvalidInput(
                "the REST catalog returned a staged table (no metadata-location)".to_string(),
            )
        })?;
        let (file_io, storage) = self.storage_for(&vended_properties(&result));
        Ok(LoadedTable {
            metadata: std::sync::Arc::new(result.metadata),
            metadata_location,
            file_io,
            storage,
        })
    }

    async fn commit_change(
        &self,
        base: &LoadedTable,
        change: Change,
    ) -> Result<LoadedTable, CommitError> {
        let request = commit_request(&self.identifier, change);
        let body = serde_json::to_vec(&request).map_err(|error| {
            CommitError::Failed(NativeError::Other(format!(
                "cannot encode the commit: {error}"
            )))
        })?;
        let answer = match self
            .send(Method::POST, self.table_url.clone(), Some(body))
            .await
        {
            Ok(answer) => answer,
            Err(NoAnswer::Lost(message)) => return Err(CommitError::StateUnknown(message)),
            Err(NoAnswer::NotSent(error)) => return Err(CommitError::Failed(error)),
        };
        match answer.status() {
            StatusCode::OK => {
                let committed: CommitTableResponse = answer.json().await.map_err(|error| {
                    CommitError::StateUnknown(format!(
                        "the REST catalog's commit answer is not valid: {}",
                        error.without_url()
                    ))
                })?;
                Ok(LoadedTable {
                    metadata: std::sync::Arc::new(committed.metadata),
                    metadata_location: committed.metadata_location,
                    file_io: base.file_io.clone(),
                    storage: base.storage.clone(),
                })
            }
            StatusCode::CONFLICT => {
                let error = answer_error("the commit", StatusCode::CONFLICT, answer).await;
                Err(CommitError::Conflict(error.to_string()))
            }
            status @ (StatusCode::INTERNAL_SERVER_ERROR
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT) => {
                let error = answer_error("the commit", status, answer).await;
                Err(CommitError::StateUnknown(error.to_string()))
            }
            status => Err(CommitError::Failed(
                answer_error("the commit", status, answer).await,
            )),
        }
    }
}

#[cfg(test)]
mod tests;
