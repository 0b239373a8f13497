//! `[tenants.NAME]`: tenants, their queues and their table defaults.

use super::*;

/// One `[tenants.<name>]`: a team's queues, alert channels, share of the run slots and defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// The tenant's own SQS queues, each polled by its own poller actors. None: its buckets'
    /// notifications arrive on the shared `[sqs]` queue.
    #[serde(default)]
    pub queues: Vec<QueueConfig>,
    /// The tenant's Slack channel (gets only this tenant's runs).
    pub slack: Option<SlackConfig>,
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
    /// Runs of this tenant at the same time; the pool size (`spark.max_concurrent`) by default.
    pub max_concurrent_runs: Option<Int<1, 256>>,
    /// Share of the run slots when tenants compete (weighted round-robin).
    #[serde(default = "default_weight")]
    pub weight: Int<1, 100>,
    /// Settings of the tenant's tables, over `[defaults]`.
    #[serde(default)]
    pub defaults: TableSettings,
}

pub(super) fn default_weight() -> Int<1, 100> {
    Int::new(1)
}

/// `[[tenants.<name>.queues]]`: receive settings other than these come from `[sqs]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    pub queue_url: String,
    /// `sqs.region` by default.
    pub region: Option<String>,
    /// `sqs.endpoint_url` by default.
    pub endpoint_url: Option<String>,
    /// `sqs.pollers` by default.
    pub pollers: Option<Pollers>,
}

/// A tenant with its settings resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    pub name: String,
    /// The tenant's own Slack channel and webhooks (deployment-wide ones are not listed here).
    pub slack: Option<SlackConfig>,
    pub webhooks: Vec<WebhookConfig>,
    pub max_concurrent_runs: usize,
    pub weight: u32,
}

/// A queue to poll, and whose it is (`None`: the shared `[sqs]` queue).
#[derive(Debug, Clone)]
pub struct QueueSpec {
    pub tenant: Option<String>,
    pub sqs: SqsConfig,
}

impl QueueConfig {
    pub(super) fn resolve(&self, shared: &SqsConfig) -> SqsConfig {
        SqsConfig {
            queue_url: self.queue_url.clone(),
            region: self.region.clone().unwrap_or_else(|| shared.region.clone()),
            endpoint_url: self
                .endpoint_url
                .clone()
                .unwrap_or_else(|| shared.endpoint_url.clone()),
            pollers: self.pollers.unwrap_or(shared.pollers),
            ..shared.clone()
        }
    }
}

/// Tenant names end up in metric labels, URLs and log fields: kept plain.
pub fn validate_tenant_name(name: &str) -> Result<(), String> {
    let valid = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a valid tenant name (1-64 letters, digits, `_` and `-`, starting with a letter or digit)",
            name.escape_debug()
        ))
    }
}

impl TenantConfig {
    pub(super) fn validate(&self, name: &str, shared: &SqsConfig) -> Result<(), ConfigError> {
        let key = format!("tenants.{name}");
        validate_tenant_name(name)
            .map_err(|reason| ConfigError::Invalid(format!("{key}: {reason}")))?;
        for (index, queue) in self.queues.iter().enumerate() {
            queue
                .resolve(shared)
                .validate_as(&format!("{key}.queues[{index}]"))?;
        }
        const URL_HINT: &str = " (the URL itself never goes in this file)";
        if let Some(slack) = &self.slack {
            check_env_name(
                &format!("{key}.slack.webhook_url_env"),
                &slack.webhook_url_env,
                URL_HINT,
            )?;
        }
        for (index, webhook) in self.webhooks.iter().enumerate() {
            check_env_name(
                &format!("{key}.webhooks[{index}].url_env"),
                &webhook.url_env,
                URL_HINT,
            )?;
        }
        self.defaults.validate(&format!("{key}.defaults"))
    }
}
