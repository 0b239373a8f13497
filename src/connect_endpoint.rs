//! Where a Spark Connect server is: the URL of `spark.connect_url`, parsed and checked. A leaf
//! beside the engines: the configuration checks the URL with it, the `connect` runner connects
//! with it.

use spark_connect_core::channel::ChannelBuilder;

/// A validated Spark Connect endpoint: `sc://host:port[/;param=value...]`, TLS and token applied.
#[derive(Debug, Clone)]
pub struct ConnectEndpoint {
    builder: ChannelBuilder,
}

impl ConnectEndpoint {
    /// Parses the URL; `tls` forces `use_ssl=true`.
    pub fn parse(url: &str, tls: bool) -> Result<ConnectEndpoint, String> {
        if url.is_empty() {
            return Err(
                "is empty: the Spark Connect endpoint, e.g. sc://spark-connect:15002".into(),
            );
        }
        if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err("must be one URL without spaces".into());
        }
        let mut builder = ChannelBuilder::parse(url).map_err(|error| {
            crate::redact::hide_secrets(&error.message())
                .replace(url, "the URL")
                .to_string()
        })?;
        if tls {
            builder.set("use_ssl", "true");
        }
        if builder.user_id().is_none() {
            builder.set("user_id", "icepack");
        }
        Ok(ConnectEndpoint { builder })
    }

    /// What the Spark Connect client connects with.
    pub fn channel(&self) -> &ChannelBuilder {
        &self.builder
    }

    /// The bearer token sent with every request (TLS required except to the loopback).
    pub fn with_token(mut self, token: Option<String>) -> ConnectEndpoint {
        if let Some(token) = token.filter(|token| !token.is_empty()) {
            self.builder.set("token", &token);
        }
        self
    }

    /// What logs and status may show: scheme, host and port, TLS, whether a token is used.
    pub fn shown(&self) -> String {
        format!(
            "sc://{}{}{}",
            self.builder.endpoint(),
            if self.builder.use_ssl() { " (TLS)" } else { "" },
            if self.builder.token().is_some() {
                " (token)"
            } else {
                ""
            }
        )
    }
}
