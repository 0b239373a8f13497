//! S3 event notifications as they arrive in SQS message bodies, turned into plain records.
//!
//! Shapes understood: raw S3 `Records` (AWS and MinIO), SNS envelopes around them, EventBridge
//! "Object Created"/"Object Deleted" events, and `s3:TestEvent`. A body that is none of these is an
//! invalid message; inside a valid `Records` array each record is parsed on its own, so one bad
//! record does not hide the others.

pub mod key;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::base::clock::{parse_rfc3339, UnixMillis};
use key::{check_key, decode_event_key, KeyError};

/// SQS bodies are at most 1 MiB; anything larger is not an S3 notification.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// One S3 object event, normalised across shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Record {
    /// `ObjectCreated:Put`, `ObjectRemoved:Delete`, ... without any `s3:` prefix.
    pub event_name: String,
    pub bucket: String,
    /// Decoded object key.
    pub key: String,
    pub size: Option<u64>,
    pub event_millis: UnixMillis,
    pub sequencer: Option<String>,
}

impl S3Record {
    pub fn is_object_created(&self) -> bool {
        self.event_name.starts_with("ObjectCreated:")
    }
}

/// What a message body contains.
#[derive(Debug)]
pub enum MessageBody {
    /// `s3:TestEvent`: acknowledge, count nothing.
    TestEvent,
    /// Records, each parsed independently.
    Records(Vec<Result<S3Record, RecordError>>),
}

#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("message body is empty")]
    Empty,
    #[error("message body is {0} bytes, more than the 1 MiB an S3 notification can be")]
    TooLarge(usize),
    #[error("message body is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("message body is JSON but not an S3 event notification")]
    UnknownShape,
    #[error("SNS envelope: {0}")]
    Sns(Box<MessageError>),
    #[error("EventBridge event: {0}")]
    EventBridge(RecordError),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record is not an S3 event record: {0}")]
    Malformed(String),
    #[error("record lacks `{0}`")]
    Missing(&'static str),
    #[error("unsupported eventVersion `{0}` (only 2.x is understood)")]
    UnsupportedVersion(String),
    #[error("eventTime `{0}` is not an RFC 3339 time")]
    BadTime(String),
    #[error("{0}")]
    Key(#[from] KeyError),
}

/// Top-level fields of every shape; which ones are present decides the shape.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "Records", borrow)]
    records: Option<Vec<&'a RawValue>>,
    #[serde(rename = "Type")]
    sns_type: Option<String>,
    #[serde(rename = "Message")]
    sns_message: Option<String>,
    #[serde(rename = "Event")]
    test_event: Option<String>,
    source: Option<String>,
    #[serde(rename = "detail-type")]
    detail_type: Option<String>,
    time: Option<String>,
    detail: Option<EventBridgeDetail>,
}

#[derive(Deserialize)]
struct RawRecord {
    #[serde(rename = "eventVersion")]
    event_version: Option<String>,
    #[serde(rename = "eventName")]
    event_name: Option<String>,
    #[serde(rename = "eventTime")]
    event_time: Option<String>,
    s3: Option<RawS3>,
}

#[derive(Deserialize)]
struct RawS3 {
    bucket: Option<RawBucket>,
    object: Option<RawObject>,
}

#[derive(Deserialize)]
struct RawBucket {
    name: Option<String>,
}

#[derive(Deserialize)]
struct RawObject {
    key: Option<String>,
    size: Option<u64>,
    sequencer: Option<String>,
}

#[derive(Deserialize)]
struct EventBridgeDetail {
    bucket: Option<RawBucket>,
    object: Option<RawObject>,
    reason: Option<String>,
}

/// Parses one SQS message body.
pub fn parse_message(body: &str) -> Result<MessageBody, MessageError> {
    parse_body(body, true)
}

fn parse_body(body: &str, allow_sns: bool) -> Result<MessageBody, MessageError> {
    if body.trim().is_empty() {
        return Err(MessageError::Empty);
    }
    if body.len() > MAX_BODY_BYTES {
        return Err(MessageError::TooLarge(body.len()));
    }
    let envelope: Envelope = serde_json::from_str(body)?;
    if let Some(records) = envelope.records {
        return Ok(MessageBody::Records(
            records
                .into_iter()
                .map(|raw| parse_record(raw.get()))
                .collect(),
        ));
    }
    if envelope.test_event.as_deref() == Some("s3:TestEvent") {
        return Ok(MessageBody::TestEvent);
    }
    if allow_sns && envelope.sns_type.as_deref() == Some("Notification") {
        let inner = envelope
            .sns_message
            .ok_or(MessageError::Sns(Box::new(MessageError::Empty)))?;
        return parse_body(&inner, false).map_err(|error| MessageError::Sns(Box::new(error)));
    }
    if envelope.source.as_deref() == Some("aws.s3") {
        if let (Some(detail_type), Some(detail)) = (envelope.detail_type, envelope.detail) {
            let record = eventbridge_record(&detail_type, envelope.time, detail)
                .map_err(MessageError::EventBridge)?;
            return Ok(MessageBody::Records(vec![Ok(record)]));
        }
    }
    Err(MessageError::UnknownShape)
}

fn parse_record(raw: &str) -> Result<S3Record, RecordError> {
    let record: RawRecord =
        serde_json::from_str(raw).map_err(|error| RecordError::Malformed(error.to_string()))?;
    let version = record
        .event_version
        .ok_or(RecordError::Missing("eventVersion"))?;
    if version.split('.').next() != Some("2") {
        return Err(RecordError::UnsupportedVersion(version));
    }
    let event_name = record.event_name.ok_or(RecordError::Missing("eventName"))?;
    let event_name = event_name
        .strip_prefix("s3:")
        .map(str::to_string)
        .unwrap_or(event_name);
    let event_time = record.event_time.ok_or(RecordError::Missing("eventTime"))?;
    let event_millis = parse_rfc3339(&event_time).ok_or(RecordError::BadTime(event_time))?;
    let s3 = record.s3.ok_or(RecordError::Missing("s3"))?;
    let bucket = s3
        .bucket
        .and_then(|bucket| bucket.name)
        .ok_or(RecordError::Missing("s3.bucket.name"))?;
    let object = s3.object.ok_or(RecordError::Missing("s3.object"))?;
    let key = decode_event_key(&object.key.ok_or(RecordError::Missing("s3.object.key"))?)?;
    Ok(S3Record {
        event_name,
        bucket,
        key,
        size: object.size,
        event_millis,
        sequencer: object.sequencer,
    })
}

/// EventBridge names events by `detail-type` and `detail.reason`, and writes keys unencoded.
fn eventbridge_record(
    detail_type: &str,
    time: Option<String>,
    detail: EventBridgeDetail,
) -> Result<S3Record, RecordError> {
    let reason = detail.reason.unwrap_or_default();
    let event_name = match detail_type {
        "Object Created" => format!("ObjectCreated:{}", eventbridge_created_suffix(&reason)),
        "Object Deleted" => format!("ObjectRemoved:{reason}"),
        other => other.replace(' ', ""),
    };
    let time = time.ok_or(RecordError::Missing("time"))?;
    let event_millis = parse_rfc3339(&time).ok_or(RecordError::BadTime(time))?;
    let bucket = detail
        .bucket
        .and_then(|bucket| bucket.name)
        .ok_or(RecordError::Missing("detail.bucket.name"))?;
    let object = detail.object.ok_or(RecordError::Missing("detail.object"))?;
    let key = check_key(
        object
            .key
            .ok_or(RecordError::Missing("detail.object.key"))?,
    )?;
    Ok(S3Record {
        event_name,
        bucket,
        key,
        size: object.size,
        event_millis,
        sequencer: object.sequencer,
    })
}

fn eventbridge_created_suffix(reason: &str) -> &str {
    match reason {
        "PutObject" => "Put",
        "PostObject" => "Post",
        "CopyObject" => "Copy",
        "CompleteMultipartUpload" => "CompleteMultipartUpload",
        other => other,
    }
}

/// Orders two `sequencer` values of the same key: right-pad the shorter with zeros and compare as
/// hexadecimal strings, ignoring case.
pub fn compare_sequencers(left: &str, right: &str) -> std::cmp::Ordering {
    let width = left.len().max(right.len());
    let pad = |value: &str| format!("{:0<width$}", value.to_ascii_uppercase());
    pad(left).cmp(&pad(right))
}

#[cfg(test)]
mod tests;
