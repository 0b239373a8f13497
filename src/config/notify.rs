//! `[slack]` and `[[webhooks]]`: where run outcomes are told.

use super::*;

/// Slack incoming webhook; enabled when the variable named by `webhook_url_env` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// Name of the environment variable holding the webhook URL (a secret: never in this file).
    #[serde(default = "default_slack_url_env")]
    pub webhook_url_env: String,
    #[serde(default = "default_slack_channel")]
    pub channel: String,
    #[serde(default = "default_notify_on")]
    pub notify_on: Vec<EventKind>,
}

pub(super) fn default_slack_url_env() -> String {
    "SLACK_WEBHOOK_URL".to_string()
}

pub(super) fn default_slack_channel() -> String {
    "#lakehouse-alerts".to_string()
}

pub(super) fn default_notify_on() -> Vec<EventKind> {
    vec![EventKind::Success, EventKind::Failure]
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            webhook_url_env: default_slack_url_env(),
            channel: default_slack_channel(),
            notify_on: default_notify_on(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Name of the environment variable holding the URL.
    pub url_env: String,
    #[serde(default = "default_notify_on")]
    pub notify_on: Vec<EventKind>,
}

pub(super) fn check_env_name(key: &str, name: &str, hint: &str) -> Result<(), ConfigError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(())
    } else {
        invalid(format!(
            "{key}: `{}` is not an environment variable name{hint}",
            name.escape_debug()
        ))
    }
}

/// Which outcomes a sink wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Success,
    Failure,
}
