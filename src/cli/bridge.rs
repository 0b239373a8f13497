//! `icepack bridge`: MinIO webhooks into an SQS queue.

use super::*;

pub(crate) fn bridge(path: &Path, listen: std::net::SocketAddr) -> Result<()> {
    let config = load_config(path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let queue = Arc::new(SqsQueue::connect(&config.sqs).await);
        let token = std::env::var("ICEPACK_BRIDGE_TOKEN").ok().filter(|token| !token.is_empty());
        tokio::select! {
            served = icepack::bridge::serve(listen, queue, token) => served.with_context(|| format!("cannot serve on {listen}")),
            _ = wait_for_signal() => Ok(()),
        }
    })
}
