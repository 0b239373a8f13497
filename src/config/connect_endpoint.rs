//! Where a Spark Connect server is: the URL of `spark.connect_url`, parsed and checked. A leaf
//! beside the engines: the configuration checks the URL with it, the `connect` runner connects
//! with it.

#[cfg(feature = "service")]
use spark_connect_core::channel::ChannelBuilder;

/// Checks `spark.connect_url` as the configuration does: with the Spark Connect client's own
/// parser in the service; in the pure core (no Spark Connect client compiled: the fuzz targets),
/// by its shape — `sc://HOST:PORT`, then at most `/;key=value;...`.
pub fn check_url(url: &str, tls: bool) -> Result<(), String> {
    #[cfg(feature = "service")]
    ConnectEndpoint::parse(url, tls)?;
    #[cfg(not(feature = "service"))]
    check_shape(url)?;
    #[cfg(not(feature = "service"))]
    let _ = tls;
    Ok(())
}

/// `sc://HOST:PORT[/;key=value...]`, one line without spaces.
fn check_shape(url: &str) -> Result<(), String> {
    if url.is_empty() {
        return Err("is empty: the Spark Connect endpoint, e.g. sc://spark-connect:15002".into());
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must be one URL without spaces".into());
    }
    let rest = url
        .strip_prefix("sc://")
        .ok_or("must start with sc:// (e.g. sc://spark-connect:15002)")?;
    let (authority, parameters) = match rest.split_once('/') {
        Some((authority, parameters)) => (authority, Some(parameters)),
        None => (rest, None),
    };
    let (host, port) = authority
        .rsplit_once(':')
        .ok_or("must name a port: sc://HOST:PORT")?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |port| port == 0) {
        return Err("must be sc://HOST:PORT with a port from 1 to 65535".into());
    }
    if let Some(parameters) = parameters.filter(|parameters| !parameters.is_empty()) {
        let parameters = parameters
            .strip_prefix(';')
            .ok_or("takes no path: parameters follow as /;key=value")?;
        for parameter in parameters.split(';').filter(|part| !part.is_empty()) {
            if !parameter.contains('=') {
                return Err("parameters are key=value pairs".into());
            }
        }
    }
    Ok(())
}

/// A validated Spark Connect endpoint: `sc://host:port[/;param=value...]`, TLS and token applied.
#[cfg(feature = "service")]
#[derive(Debug, Clone)]
pub struct ConnectEndpoint {
    builder: ChannelBuilder,
}

#[cfg(feature = "service")]
impl ConnectEndpoint {
    /// Parses the URL; `tls` forces `use_ssl=true`.
    pub fn parse(url: &str, tls: bool) -> Result<ConnectEndpoint, String> {
        check_shape(url)?;
        let mut builder = ChannelBuilder::parse(url).map_err(|error| {
            crate::base::redact::hide_secrets(&error.message())
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
