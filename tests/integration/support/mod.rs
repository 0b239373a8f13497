//! Test harness for the real local stack: a moto server (S3 + SQS on one port) and an ElasticMQ
//! (a second, independent SQS server), queues with dead-letter queues, buckets whose
//! ObjectCreated notifications go to a queue, and icepack processes run from the built binary.
//! Every name is unique per test; every process is killed when its handle drops.

#![allow(dead_code)]

pub mod browser;
pub mod connect;
pub mod elasticmq;
pub mod measure;
pub mod pyiceberg;
pub mod spark;
pub mod warm_stack;

#[allow(unused_imports)]
pub use elasticmq::ElasticMq;

use std::net::TcpListener;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::Client;
use icepack::config::{Int, SqsConfig};
use icepack::intake::queue::SqsQueue;

pub const ACCOUNT: &str = "123456789012";
pub const REGION: &str = "us-east-1";

/// The body of a GET, as text (`/metrics`, `/readyz`); panics on a failed request.
pub async fn get_text(url: &str) -> String {
    let response = reqwest::get(url)
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    response
        .text()
        .await
        .unwrap_or_else(|error| panic!("GET {url}: reading the body: {error}"))
}

/// The body of a GET, as JSON; panics on a failed request or a body that is not JSON.
pub async fn get_json(url: &str) -> serde_json::Value {
    let response = reqwest::get(url)
        .await
        .unwrap_or_else(|error| panic!("GET {url}: {error}"));
    response
        .json()
        .await
        .unwrap_or_else(|error| panic!("GET {url}: not JSON: {error}"))
}

/// Environment every AWS client in tests (ours and icepack's) uses against moto.
pub const AWS_ENV: [(&str, &str); 5] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_REGION", REGION),
    ("AWS_EC2_METADATA_DISABLED", "true"),
    ("AWS_CONFIG_FILE", "/dev/null"),
];

pub fn set_aws_env() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (name, value) in AWS_ENV {
            std::env::set_var(name, value);
        }
    });
}

pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// A port nothing listens on right now (for a service a test starts).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_until_or(what, timeout, check, String::new).await
}

/// [`wait_until`], and on a timeout the panic carries `explain()`: what the test can tell
/// about why (a status, a log's tail), read when the wait failed.
pub async fn wait_until_or<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
    explain: impl FnOnce() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                explain()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Waits until a server `child` started answers `url` with a success; fails at once, with its
/// `log`, if the process exits first, and with the log after `timeout`.
pub async fn wait_for_answer(
    what: &str,
    child: &mut Child,
    url: &str,
    log: &Path,
    timeout: Duration,
) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + timeout;
    let log = || std::fs::read_to_string(log).unwrap_or_default();
    loop {
        if let Ok(response) = http.get(url).send().await {
            if response.status().is_success() {
                return;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited ({status}) before answering:\n{}", log());
        }
        if Instant::now() > deadline {
            panic!("{what} did not answer {url} within {timeout:?}:\n{}", log());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a part of the stack `test` needs is here (`present`). Its absence fails the test in CI
/// (`ICEPACK_E2E` or `CI` set: a run there never skips silently) and skips it elsewhere; `what`
/// names the part, `hint` says how to provide it beside `make test`.
pub fn needed_here(test: &str, present: bool, what: &str, hint: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var_os("ICEPACK_E2E").is_some() || std::env::var_os("CI").is_some() {
        panic!(
            "{test} needs {what}: run it through `make test` (deploy/local/with-stack.sh){hint}"
        );
    }
    eprintln!(
        "skipping {test}: no {what} (run `make test` or deploy/local/with-stack.sh cargo test{hint})"
    );
    false
}

/// An SQS server a test started (moto or ElasticMQ), so that one test body runs against both:
///
/// ```ignore
/// #[tokio::test]
/// async fn x_on_moto() { x::<Moto>().await }
/// #[tokio::test]
/// async fn x_on_elasticmq() { x::<ElasticMq>().await }
/// async fn x<S: QueueServer>() { let Some(server) = S::start_for("x").await else { return }; ... }
/// ```
///
/// The queue operations are [`SqsEndpoint`]'s, which every server derefs to.
#[allow(async_fn_in_trait)]
pub trait QueueServer: Deref<Target = SqsEndpoint> + Sized {
    /// For messages: "moto", "ElasticMQ".
    const NAME: &'static str;

    /// Whether this server can run here; when it cannot, panics in CI and says so elsewhere.
    fn available(test: &str) -> bool;

    /// A server on a given port (e.g. one an icepack was pointed at before it was up); returns
    /// once it answers.
    async fn start_on(port: u16) -> Self;

    async fn start() -> Self {
        Self::start_on(free_port()).await
    }

    /// A server for `test`, or `None` (the test is skipped) where it is not [`available`].
    ///
    /// [`available`]: QueueServer::available
    async fn start_for(test: &str) -> Option<Self> {
        if !Self::available(test) {
            return None;
        }
        Some(Self::start().await)
    }

    /// Kills the server: its port refuses connections until [`restart`](QueueServer::restart).
    fn stop(&mut self);

    /// A fresh server on the same port (queues created through the API are gone); returns once
    /// it answers.
    async fn restart(&mut self);
}

/// What a test does with an SQS server through the API (the same on every server).
pub struct SqsEndpoint {
    pub endpoint: String,
    pub port: u16,
}

impl SqsEndpoint {
    pub fn on_port(port: u16) -> SqsEndpoint {
        SqsEndpoint {
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
        }
    }

    pub async fn sqs(&self) -> Client {
        self.sqs_queue("http://unused").await.client().clone()
    }

    pub async fn sqs_queue(&self, queue_url: &str) -> SqsQueue {
        SqsQueue::connect(&SqsConfig {
            queue_url: queue_url.to_string(),
            region: REGION.to_string(),
            endpoint_url: self.endpoint.clone(),
            wait_time_seconds: Int::new(1),
            max_messages: Int::new(10),
            visibility_timeout_seconds: Int::new(30),
            pollers: Int::new(1),
        })
        .await
    }

    /// A queue without a redrive policy; returns its URL.
    pub async fn create_queue(&self, name: &str) -> String {
        self.sqs()
            .await
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .unwrap()
            .queue_url()
            .unwrap()
            .to_string()
    }

    /// A queue with a dead-letter queue after `max_receive_count` receives; returns both URLs.
    pub async fn create_queue_with_dlq(
        &self,
        name: &str,
        max_receive_count: u32,
    ) -> (String, String) {
        let sqs = self.sqs().await;
        let dlq_url = sqs
            .create_queue()
            .queue_name(format!("{name}-dlq"))
            .send()
            .await
            .unwrap()
            .queue_url()
            .unwrap()
            .to_string();
        let redrive = format!(
            r#"{{"deadLetterTargetArn":"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}-dlq","maxReceiveCount":"{max_receive_count}"}}"#
        );
        let url = sqs
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::RedrivePolicy, redrive)
            .send()
            .await
            .unwrap()
            .queue_url()
            .unwrap()
            .to_string();
        (url, dlq_url)
    }

    pub async fn send(&self, queue_url: &str, body: &str) {
        self.sqs()
            .await
            .send_message()
            .queue_url(queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }

    /// Visible plus in-flight messages.
    pub async fn queue_depth(&self, queue_url: &str) -> u64 {
        let attributes = self
            .sqs()
            .await
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let attributes = attributes.attributes().unwrap();
        [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|name| attributes[name].parse::<u64>().unwrap())
        .sum()
    }

    /// Receives (and so hides) up to 10 messages: for looking into a dead-letter queue.
    pub async fn receive_bodies(&self, queue_url: &str) -> Vec<String> {
        self.sqs()
            .await
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap()
            .messages()
            .iter()
            .filter_map(|message| message.body().map(str::to_string))
            .collect()
    }
}

/// A moto server on a free loopback port, serving S3 and SQS.
pub struct Moto {
    child: Option<Child>,
    server: SqsEndpoint,
    log: PathBuf,
}

impl Deref for Moto {
    type Target = SqsEndpoint;

    fn deref(&self) -> &SqsEndpoint {
        &self.server
    }
}

impl QueueServer for Moto {
    const NAME: &'static str = "moto";

    /// moto comes with `make deps`; [`QueueServer::start_on`] says how to install it.
    fn available(_test: &str) -> bool {
        true
    }

    async fn start_on(port: u16) -> Moto {
        let mut moto = Moto {
            child: None,
            server: SqsEndpoint::on_port(port),
            log: std::env::temp_dir().join(format!("moto-{port}.log")),
        };
        moto.restart().await;
        moto
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn restart(&mut self) {
        self.stop();
        set_aws_env();
        let moto =
            std::env::var("ICEPACK_TEST_MOTO_SERVER").unwrap_or_else(|_| "moto_server".to_string());
        let child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).unwrap())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot start `{moto}` ({error}); run `make test` or `pip install 'moto[server]'`")
            });
        let url = format!("{}/moto-api/", self.endpoint);
        let child = self.child.insert(child);
        wait_for_answer("moto", child, &url, &self.log, Duration::from_secs(30)).await;
    }
}

/// A queue, its dead-letter queue, and the bucket notifying the queue ([`Moto::landing`]).
pub struct Landing {
    pub queue_url: String,
    pub dlq_url: String,
    pub bucket: String,
}

impl Moto {
    pub async fn start() -> Moto {
        <Moto as QueueServer>::start().await
    }

    pub async fn start_on(port: u16) -> Moto {
        <Moto as QueueServer>::start_on(port).await
    }

    /// The landing zone most tests start from: a queue with a dead-letter queue (after
    /// `max_receives` receives) and a bucket whose ObjectCreated notifications go to it, all
    /// with unique names.
    pub async fn landing(&self, max_receives: u32) -> Landing {
        let queue = unique("landing");
        let bucket = unique("lake");
        let (queue_url, dlq_url) = self.create_queue_with_dlq(&queue, max_receives).await;
        self.create_bucket_notifying(&bucket, &queue).await;
        Landing {
            queue_url,
            dlq_url,
            bucket,
        }
    }

    /// A bucket whose ObjectCreated notifications go to the queue (moto first sends s3:TestEvent).
    pub async fn create_bucket_notifying(&self, bucket: &str, queue_name: &str) {
        let http = reqwest::Client::new();
        let created = self
            .s3_request(
                &http,
                reqwest::Method::PUT,
                &format!("/{bucket}"),
                Vec::new(),
            )
            .await;
        assert!(
            created.status().is_success(),
            "create bucket: {}",
            created.status()
        );
        let notification = format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><NotificationConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><QueueConfiguration><Id>landing</Id><Queue>arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name}</Queue><Event>s3:ObjectCreated:*</Event></QueueConfiguration></NotificationConfiguration>"#
        );
        let configured = self
            .s3_request(
                &http,
                reqwest::Method::PUT,
                &format!("/{bucket}?notification"),
                notification.into_bytes(),
            )
            .await;
        assert!(
            configured.status().is_success(),
            "notification: {}",
            configured.status()
        );
    }

    /// PutObject; `key` is given decoded and encoded here.
    pub async fn put_object(&self, bucket: &str, key: &str, size: usize) {
        let http = reqwest::Client::new();
        let encoded = encode_key(key);
        let response = self
            .s3_request(
                &http,
                reqwest::Method::PUT,
                &format!("/{bucket}/{encoded}"),
                vec![b'x'; size],
            )
            .await;
        assert!(
            response.status().is_success(),
            "put {key}: {}",
            response.status()
        );
    }

    /// HeadObject: when the object was last written (its `Last-Modified`, whole seconds, in
    /// milliseconds since the epoch), `None` when it is absent.
    pub async fn last_modified(&self, bucket: &str, key: &str) -> Option<i64> {
        let http = reqwest::Client::new();
        let encoded = encode_key(key);
        let response = self
            .s3_request(
                &http,
                reqwest::Method::HEAD,
                &format!("/{bucket}/{encoded}"),
                Vec::new(),
            )
            .await;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return None;
        }
        assert!(
            response.status().is_success(),
            "head {key}: {}",
            response.status()
        );
        let header = response.headers()["last-modified"].to_str().unwrap();
        Some(
            chrono::DateTime::parse_from_rfc2822(header)
                .unwrap_or_else(|error| panic!("Last-Modified {header}: {error}"))
                .timestamp_millis(),
        )
    }

    /// ListObjectsV2: every key under `prefix`, page by page.
    pub async fn list_keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let http = reqwest::Client::new();
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = format!(
                "/{bucket}?list-type=2&prefix={}",
                percent_encoding::utf8_percent_encode(prefix, percent_encoding::NON_ALPHANUMERIC)
            );
            if let Some(token) = &token {
                query.push_str(&format!(
                    "&continuation-token={}",
                    percent_encoding::utf8_percent_encode(
                        token,
                        percent_encoding::NON_ALPHANUMERIC
                    )
                ));
            }
            let response = self
                .s3_request(&http, reqwest::Method::GET, &query, Vec::new())
                .await;
            assert!(
                response.status().is_success(),
                "list: {}",
                response.status()
            );
            let body = response.text().await.unwrap();
            let between = |text: &str, tag: &str| -> Vec<String> {
                text.split(&format!("<{tag}>"))
                    .skip(1)
                    .filter_map(|part| part.split_once(&format!("</{tag}>")))
                    .map(|(value, _)| value.replace("&amp;", "&"))
                    .collect()
            };
            keys.extend(between(&body, "Key"));
            token = between(&body, "NextContinuationToken").into_iter().next();
            if token.is_none() {
                return keys;
            }
        }
    }

    /// GetObject: the object's bytes (`key` given decoded); fails the test when it is absent.
    pub async fn get_object(&self, bucket: &str, key: &str) -> Vec<u8> {
        let http = reqwest::Client::new();
        let encoded = encode_key(key);
        let response = self
            .s3_request(
                &http,
                reqwest::Method::GET,
                &format!("/{bucket}/{encoded}"),
                Vec::new(),
            )
            .await;
        assert!(
            response.status().is_success(),
            "get {key}: {}",
            response.status()
        );
        response.bytes().await.unwrap().to_vec()
    }

    async fn s3_request(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        path: &str,
        body: Vec<u8>,
    ) -> reqwest::Response {
        // moto does not check signatures, but routes by the credential scope of this header.
        http.request(method, format!("{}{path}", self.endpoint))
            .header(
                "Authorization",
                format!("AWS4-HMAC-SHA256 Credential=testing/20240101/{REGION}/s3/aws4_request, SignedHeaders=host, Signature=0"),
            )
            .header("Content-Type", "application/xml")
            .body(body)
            .send()
            .await
            .unwrap()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A test's icepack: its config file and state directory, and the processes run over them.
pub struct Icepack {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    children: Vec<Child>,
    /// Set for every process this handle starts.
    pub env: Vec<(String, String)>,
}

/// Says that a test crate's fault-point tests were left out of this build (no `failpoints`
/// feature); in CI, where `make test` enables the feature, that is an error.
pub fn fault_point_tests_left_out(tests: &str) {
    if std::env::var("CI").is_ok() {
        panic!("{tests} need the `failpoints` feature in CI: run them through `make test`");
    }
    eprintln!(
        "skipping {tests}: the binary has no fault points (cargo test --features failpoints)"
    );
}

pub fn binary() -> &'static str {
    match std::env::var("ICEPACK_TEST_BINARY") {
        Ok(path) => Box::leak(path.into_boxed_str()),
        Err(_) => env!("CARGO_BIN_EXE_icepack"),
    }
}

impl Icepack {
    pub fn with_config(toml: &str) -> Icepack {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("icepack.toml");
        let toml = toml.replace(
            "@STATE_DIR@",
            &dir.path().join("state").display().to_string(),
        );
        std::fs::write(&config, toml).unwrap();
        Icepack {
            dir,
            config,
            children: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn log_path(&self, index: usize) -> PathBuf {
        self.dir.path().join(format!("run-{index}.log"))
    }

    /// Starts `icepack run`; `failpoints` arms fault points (`ICEPACK_FAILPOINTS`, e.g.
    /// `intake.before_commit=return`), which only a build with the `failpoints` feature has.
    pub fn spawn_run(&mut self, failpoints: &str) -> usize {
        assert!(
            failpoints.is_empty() || cfg!(feature = "failpoints"),
            "{failpoints}: the binary has no fault points; mark the test #[cfg(feature = \"failpoints\")]"
        );
        let index = self.children.len();
        let log = std::fs::File::create(self.log_path(index)).unwrap();
        let mut command = Command::new(binary());
        command
            .args(["run", "--config"])
            .arg(&self.config)
            .env("ICEPACK_FAILPOINTS", failpoints)
            .env("RUST_LOG", "info,icepack=debug")
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (name, value) in AWS_ENV {
            command.env(name, value);
        }
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        self.children.push(command.spawn().unwrap());
        index
    }

    pub fn log(&self, index: usize) -> String {
        std::fs::read_to_string(self.log_path(index)).unwrap_or_default()
    }

    /// Waits for run `index` to exit by itself.
    pub async fn wait_exit(&mut self, index: usize, timeout: Duration) -> ExitStatus {
        let child = &mut self.children[index];
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "icepack run {index} did not exit"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The process id of run `index` (for reading its /proc entries).
    pub fn pid(&self, index: usize) -> u32 {
        self.children[index].id()
    }

    /// Whether run `index` is still running.
    pub fn children_alive(&mut self, index: usize) -> bool {
        self.children[index].try_wait().unwrap().is_none()
    }

    /// SIGKILL, as a crash or the OOM killer would.
    pub async fn kill(&mut self, index: usize) -> ExitStatus {
        self.signal(index, libc::SIGKILL);
        self.wait_exit(index, Duration::from_secs(30)).await
    }

    /// Sends `signal` (e.g. SIGHUP) to run `index`, without waiting for anything.
    pub fn signal(&self, index: usize, signal: i32) {
        unsafe {
            libc::kill(self.children[index].id() as i32, signal);
        }
    }

    /// SIGTERM, then waits for the exit.
    pub async fn terminate(&mut self, index: usize) -> ExitStatus {
        self.signal(index, libc::SIGTERM);
        self.wait_exit(index, Duration::from_secs(60)).await
    }

    /// Runs a one-shot subcommand and returns (success, stdout, stderr).
    pub fn command(&self, args: &[&str]) -> (bool, String, String) {
        self.command_with_env(args, &[])
    }

    /// Same, with extra environment (e.g. `ICEPACK_SPARK__RUNNER` overrides).
    pub fn command_with_env(
        &self,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> (bool, String, String) {
        let mut command = Command::new(binary());
        command.args(args).arg("--config").arg(&self.config);
        for (name, value) in AWS_ENV.iter().chain(extra_env) {
            command.env(name, value);
        }
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        let output = command.output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// `icepack status --json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let (ok, stdout, stderr) = self.command(&["status", "--json"]);
        assert!(ok, "status failed: {stderr}");
        serde_json::from_str(&stdout).unwrap()
    }

    pub fn pending_files(&self, table: &str) -> u64 {
        self.status()["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["table"] == table)
            .map(|entry| entry["pending_files"].as_u64().unwrap())
            .unwrap()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }
}

impl Drop for Icepack {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn path_str(path: &Path) -> String {
    path.display().to_string()
}

/// An S3 key as a request path has it: each segment percent-encoded, the slashes kept.
fn encode_key(key: &str) -> String {
    key.split('/')
        .map(|segment| {
            percent_encoding::utf8_percent_encode(segment, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("/")
}
