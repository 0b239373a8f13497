//! [`Queue`] over Amazon SQS (or any server speaking its JSON protocol: ElasticMQ, moto, LocalStack).
//! Credentials come from the standard AWS provider chain.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageSystemAttributeName,
};
use aws_sdk_sqs::Client;
use aws_smithy_http_client::tls;

use super::{FailedEntry, Queue, QueueError, Receipt, ReceivedMessage};
use crate::config::SqsConfig;

pub struct SqsQueue {
    client: Client,
    queue_url: String,
}

impl SqsQueue {
    pub async fn connect(config: &SqsConfig) -> SqsQueue {
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .operation_attempt_timeout(Duration::from_secs(config.wait_time_seconds.get() + 15))
            .build();
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .http_client(https_client())
            .region(Region::new(config.region.clone()))
            .timeout_config(timeouts)
            .load()
            .await;
        let mut builder = aws_sdk_sqs::config::Builder::from(&shared);
        if !config.endpoint_url.is_empty() {
            builder = builder.endpoint_url(&config.endpoint_url);
        }
        SqsQueue {
            client: Client::from_conf(builder.build()),
            queue_url: config.queue_url.clone(),
        }
    }

    /// A queue on a client already connected (clients are shared by queues of the same region
    /// and endpoint: one connection pool and credentials cache for many tenants' queues).
    pub fn on_client(client: Client, queue_url: &str) -> SqsQueue {
        SqsQueue {
            client,
            queue_url: queue_url.to_string(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sends one message (the MinIO bridge forwards notifications with it).
    pub async fn send(&self, body: &str) -> Result<String, QueueError> {
        let output = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .send()
            .await
            .map_err(|error| queue_error("SendMessage", error))?;
        Ok(output.message_id().unwrap_or_default().to_string())
    }
}

/// The SDK's HTTPS client (for SQS and for the credential providers: STS, IMDS, SSO) on rustls
/// with ring, the crypto provider the rest of the binary uses (Cargo.toml says why).
fn https_client() -> aws_sdk_sqs::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// The error and its causes as the message, the SDK's debug form as the detail: together what
/// `DisplayErrorContext` prints.
fn queue_error(operation: &'static str, error: impl std::error::Error) -> QueueError {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    QueueError {
        operation,
        message,
        detail: format!(" ({error:?})"),
    }
}

/// Batch entry ids are positions: SQS limits their characters, and message ids are not ours.
fn failed_entries(
    receipts: &[Receipt],
    failed: &[aws_sdk_sqs::types::BatchResultErrorEntry],
) -> Vec<FailedEntry> {
    failed
        .iter()
        .map(|entry| FailedEntry {
            id: entry
                .id()
                .parse::<usize>()
                .ok()
                .and_then(|position| receipts.get(position))
                .map(|receipt| receipt.id.clone())
                .unwrap_or_else(|| entry.id().to_string()),
            code: entry.code().to_string(),
            message: entry.message().unwrap_or_default().to_string(),
        })
        .collect()
}

#[async_trait]
impl Queue for SqsQueue {
    async fn receive(
        &self,
        max_messages: i32,
        wait_time_seconds: i32,
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(max_messages)
            .wait_time_seconds(wait_time_seconds)
            .visibility_timeout(visibility_timeout_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|error| queue_error("ReceiveMessage", error))?;
        Ok(output
            .messages()
            .iter()
            .map(|message| ReceivedMessage {
                id: message.message_id().unwrap_or_default().to_string(),
                receipt_handle: message.receipt_handle().unwrap_or_default().to_string(),
                body: message.body().unwrap_or_default().to_string(),
                receive_count: message
                    .attributes()
                    .and_then(|attributes| {
                        attributes.get(&MessageSystemAttributeName::ApproximateReceiveCount)
                    })
                    .and_then(|count| count.parse().ok())
                    .unwrap_or(1),
            })
            .collect())
    }

    async fn delete(&self, receipts: &[Receipt]) -> Result<Vec<FailedEntry>, QueueError> {
        if receipts.is_empty() {
            return Ok(Vec::new());
        }
        let entries = receipts
            .iter()
            .enumerate()
            .map(|(position, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(position.to_string())
                    .receipt_handle(&receipt.receipt_handle)
                    .build()
                    .map_err(|error| queue_error("DeleteMessageBatch", error))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|error| queue_error("DeleteMessageBatch", error))?;
        Ok(failed_entries(receipts, output.failed()))
    }

    async fn extend_visibility(
        &self,
        receipts: &[Receipt],
        visibility_timeout_seconds: i32,
    ) -> Result<Vec<FailedEntry>, QueueError> {
        if receipts.is_empty() {
            return Ok(Vec::new());
        }
        let entries = receipts
            .iter()
            .enumerate()
            .map(|(position, receipt)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(position.to_string())
                    .receipt_handle(&receipt.receipt_handle)
                    .visibility_timeout(visibility_timeout_seconds)
                    .build()
                    .map_err(|error| queue_error("ChangeMessageVisibilityBatch", error))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|error| queue_error("ChangeMessageVisibilityBatch", error))?;
        Ok(failed_entries(receipts, output.failed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::config::{Credentials, SharedCredentialsProvider};
    use tokio::io::AsyncReadExt;

    /// The SDK's client on ring speaks TLS to an `https` endpoint: what reaches the server first
    /// is a TLS handshake record (a client built without a usable crypto provider would fail
    /// before connecting, or panic).
    #[tokio::test]
    async fn an_https_endpoint_gets_a_tls_handshake_from_the_ring_client() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(https_client())
            .region(Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::for_tests()))
            .endpoint_url(&endpoint)
            .build();
        let client = Client::from_conf(config);
        let queue_url = format!("{endpoint}/000000000000/q");
        let request = tokio::spawn(async move {
            let _ = client
                .get_queue_attributes()
                .queue_url(queue_url)
                .send()
                .await;
        });
        let (mut socket, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("the client connects")
            .unwrap();
        let mut record = [0u8; 3];
        socket.read_exact(&mut record).await.unwrap();
        request.abort();
        // ContentType handshake (22), TLS major version 3.
        assert_eq!(
            record[..2],
            [22, 3],
            "a TLS record, not plain HTTP: {record:?}"
        );
    }
}
