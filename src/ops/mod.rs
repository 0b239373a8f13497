//! What operators see and do: the HTTP surface ([`http`]: the API, `/metrics`, `/healthz`,
//! `/readyz`, the [`web`] page), what status shows ([`status`], paged [`listing`]s, the
//! [`readiness`] verdict), Prometheus [`metrics`], Slack and webhook notifications ([`notify`],
//! delivered by the [`notifier`] actor), and reloads ([`control`]).

#[cfg(feature = "service")]
pub mod control;
#[cfg(feature = "service")]
pub mod http;
pub mod listing;
#[cfg(feature = "service")]
pub mod metrics;
#[cfg(feature = "service")]
pub mod notifier;
pub mod notify;
#[cfg(feature = "service")]
pub mod plan;
pub mod readiness;
pub mod status;
#[cfg(feature = "service")]
pub mod web;
