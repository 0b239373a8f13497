//! Telling people what icepack did: run outcomes rendered for Slack incoming webhooks and for a
//! generic JSON webhook, delivered with rate limits and retries, never holding anything else up.

#[cfg(feature = "service")]
pub mod delivery;
pub mod payload;

use crate::base::clock::UnixMillis;
use crate::model::report::RunOutcome;

pub use crate::config::EventKind;

/// The end of a compaction run, as it is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEvent {
    pub table: String,
    /// The table's tenant (`default` without `[tenants]`).
    pub tenant: String,
    pub run_id: String,
    pub catalog: String,
    pub catalog_impl: String,
    pub trigger: crate::model::task::Trigger,
    /// `binpack`, `sort` or `zorder`.
    pub strategy: String,
    /// Maintenance the run did instead of a data rewrite.
    pub maintenance: Option<crate::model::state::Maintenance>,
    pub started_millis: UnixMillis,
    pub finished_millis: UnixMillis,
    pub target_file_bytes: u64,
    /// The files the run took; on failure they are pending again.
    pub claimed_files: u64,
    pub claimed_bytes: u64,
    pub outcome: RunOutcome,
    /// Which engine ran it, and why that one.
    pub ran_on: Option<crate::model::report::RanOn>,
}

impl RunEvent {
    pub fn kind(&self) -> EventKind {
        match self.outcome {
            RunOutcome::Success { .. } => EventKind::Success,
            RunOutcome::Failure { .. } => EventKind::Failure,
        }
    }
}
