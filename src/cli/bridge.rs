//! `icepack bridge`: MinIO webhooks into an SQS queue.

use super::*;

pub(crate) fn bridge(path: &Path, listen: std::net::SocketAddr) -> Result<()> {
    let config = load_config(path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let token = std::env::var("ICEPACK_BRIDGE_TOKEN")
        .ok()
        .filter(|token| !token.is_empty());
    // Refused before anything connects: a bridge anyone can post to is not started.
    icepack::intake::bridge::access(listen, token.as_deref())?;
    runtime.block_on(async move {
        let queue = Arc::new(SqsQueue::connect(&config.sqs).await);
        tokio::select! {
            served = icepack::intake::bridge::serve(listen, queue, token) => served.with_context(|| format!("the bridge on {listen} stopped")),
            _ = wait_for_signal() => Ok(()),
        }
    })
}
