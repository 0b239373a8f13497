//! Test doubles that speak real protocols, shared by unit and integration tests.

pub mod http_receiver {
    //! A real HTTP server on loopback standing in for Slack or a webhook: it records every request
    //! and answers from a script (status, `Retry-After`, body), then 200 once the script is spent.

    use std::collections::VecDeque;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::Router;

    #[derive(Debug, Clone)]
    pub struct Reply {
        pub status: u16,
        pub retry_after: Option<u64>,
        pub body: String,
        pub delay: Duration,
    }

    impl Reply {
        pub fn status(status: u16, body: &str) -> Reply {
            Reply {
                status,
                retry_after: None,
                body: body.to_string(),
                delay: Duration::ZERO,
            }
        }
    }

    #[derive(Debug, Clone)]
    pub struct Received {
        pub path: String,
        pub body: serde_json::Value,
        pub at: std::time::Instant,
    }

    #[derive(Default)]
    struct Shared {
        script: Mutex<VecDeque<Reply>>,
        received: Mutex<Vec<Received>>,
    }

    #[derive(Clone)]
    pub struct Receiver {
        shared: Arc<Shared>,
        pub address: SocketAddr,
    }

    impl Receiver {
        /// Starts on a free loopback port, in the current tokio runtime.
        pub async fn start() -> Receiver {
            let shared = Arc::new(Shared::default());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            let app = Router::new().fallback(handle).with_state(shared.clone());
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            Receiver { shared, address }
        }

        pub fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.address)
        }

        pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
            self.shared.script.lock().unwrap().extend(replies);
        }

        pub fn received(&self) -> Vec<Received> {
            self.shared.received.lock().unwrap().clone()
        }
    }

    async fn handle(
        State(shared): State<Arc<Shared>>,
        uri: axum::http::Uri,
        _headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let reply = shared.script.lock().unwrap().pop_front();
        shared.received.lock().unwrap().push(Received {
            path: uri.path().to_string(),
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
            at: std::time::Instant::now(),
        });
        let reply = reply.unwrap_or_else(|| Reply::status(200, "ok"));
        if !reply.delay.is_zero() {
            tokio::time::sleep(reply.delay).await;
        }
        let status = StatusCode::from_u16(reply.status).unwrap();
        match reply.retry_after {
            Some(seconds) => {
                (status, [("retry-after", seconds.to_string())], reply.body).into_response()
            }
            None => (status, reply.body).into_response(),
        }
    }
}

pub mod stand_in_runner {
    //! A Spark runner standing in for the engine when a test or benchmark is about icepack's
    //! state and scheduling, not Spark: each run calls `on_start`, waits `delay` and returns
    //! `output`. Nothing is ever left over to recover or discard.

    use std::time::Duration;

    use async_trait::async_trait;

    use crate::engine::spark::runner::{EngineError, EngineOutput, SparkJob, SparkRunner};

    /// What a run of `rewrite_data_files` that rewrote `files` files into one prints.
    pub fn rewrite_output(files: u64) -> EngineOutput {
        EngineOutput::rewrite_printed(&format!(
            "rewritten_data_files_count\tadded_data_files_count\trewritten_bytes_count\n{files}\t1\t{}\n",
            files * 1024
        ))
    }

    pub struct StandInRunner {
        pub delay: Duration,
        pub output: EngineOutput,
        pub on_start: Box<dyn Fn(&SparkJob) + Send + Sync>,
    }

    impl StandInRunner {
        /// Succeeds at once, rewriting `files` files.
        pub fn succeeding(files: u64) -> StandInRunner {
            StandInRunner {
                delay: Duration::ZERO,
                output: rewrite_output(files),
                on_start: Box::new(|_| {}),
            }
        }
    }

    #[async_trait]
    impl SparkRunner for StandInRunner {
        async fn run(&self, job: &SparkJob) -> Result<EngineOutput, EngineError> {
            (self.on_start)(job);
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            Ok(self.output.clone())
        }
        fn engine(&self) -> String {
            "stand-in".to_string()
        }
    }
}
