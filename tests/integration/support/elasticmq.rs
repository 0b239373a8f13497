//! ElasticMQ, a second SQS server independent of moto (Scala, in-memory), so that the SQS
//! behaviour icepack relies on is checked against two implementations. Each handle runs its own
//! JVM (`org.elasticmq.server.Main`, ~3.5 s to answer) on a loopback port, from the classpath
//! `deploy/local/elasticmq.sh --env` prints (`ICEPACK_TEST_ELASTICMQ_CLASSPATH`, set by
//! `deploy/local/with-stack.sh`). Queues are created through the API, as on moto.

use std::ops::Deref;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{set_aws_env, QueueServer, SqsEndpoint, ACCOUNT, REGION};

pub const CLASSPATH_ENV: &str = "ICEPACK_TEST_ELASTICMQ_CLASSPATH";

/// A short-lived test server: a small heap, one GC thread, the JIT's first tier only (answers in
/// ~3 s instead of ~3.6 s, and takes less of a small CI machine's CPU while it starts).
pub const TEST_JAVA_OPTIONS: &[&str] = &["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"];

/// For throughput (the benchmark): the JVM's defaults.
pub const DEFAULT_JAVA_OPTIONS: &[&str] = &[];

/// An ElasticMQ server on a loopback port; killed when dropped.
pub struct ElasticMq {
    child: Option<Child>,
    server: SqsEndpoint,
    java_options: Vec<String>,
    /// The generated HOCON configuration and the server's log, both removed on drop.
    config: PathBuf,
    log: PathBuf,
}

impl Deref for ElasticMq {
    type Target = SqsEndpoint;

    fn deref(&self) -> &SqsEndpoint {
        &self.server
    }
}

/// The server's configuration: the SQS REST API on `port` only (no stats UI), queue URLs naming
/// that port, the account and region moto uses (so queue ARNs in redrive policies agree).
fn configuration(port: u16) -> String {
    format!(
        r#"include classpath("application.conf")
node-address {{
  protocol = http
  host = "127.0.0.1"
  port = {port}
  context-path = ""
}}
rest-sqs {{
  enabled = true
  bind-port = {port}
  bind-hostname = "127.0.0.1"
  sqs-limits = strict
}}
rest-stats.enabled = false
aws {{
  region = "{REGION}"
  accountId = "{ACCOUNT}"
}}
queues {{}}
"#
    )
}

impl QueueServer for ElasticMq {
    const NAME: &'static str = "ElasticMQ";

    /// A missing classpath fails in CI, so a run there can never skip ElasticMQ silently.
    fn available(test: &str) -> bool {
        super::needed_here(
            test,
            std::env::var_os(CLASSPATH_ENV).is_some(),
            &format!("ElasticMQ ({CLASSPATH_ENV} is not set)"),
            " or `set -a; eval \"$(deploy/local/elasticmq.sh --env)\"; set +a`",
        )
    }

    async fn start_on(port: u16) -> ElasticMq {
        ElasticMq::start_with_java_options(port, TEST_JAVA_OPTIONS).await
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
        let classpath = std::env::var(CLASSPATH_ENV)
            .unwrap_or_else(|_| panic!("{CLASSPATH_ENV} is not set: check ElasticMq::available"));
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new("java")
            .args(&self.java_options)
            .arg("-cp")
            .arg(classpath)
            .arg(format!("-Dconfig.file={}", self.config.display()))
            .arg("org.elasticmq.server.Main")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start ElasticMQ with `java` ({error})"));
        let url = format!("{}/?Action=ListQueues", self.endpoint);
        let child = self.child.insert(child);
        super::wait_for_answer("ElasticMQ", child, &url, &self.log, Duration::from_secs(60)).await;
    }
}

impl ElasticMq {
    /// A server on `port` whose JVM runs with `java_options`; returns once it answers.
    pub async fn start_with_java_options(port: u16, java_options: &[&str]) -> ElasticMq {
        let dir = std::env::temp_dir();
        let config = dir.join(format!("elasticmq-{port}.conf"));
        std::fs::write(&config, configuration(port)).unwrap();
        let mut server = ElasticMq {
            child: None,
            server: SqsEndpoint::on_port(port),
            java_options: java_options
                .iter()
                .map(|option| option.to_string())
                .collect(),
            config,
            log: dir.join(format!("elasticmq-{port}.log")),
        };
        server.restart().await;
        server
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ElasticMq {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.config);
        let _ = std::fs::remove_file(&self.log);
    }
}
