//! A failed run's class — from spark-sql's stderr, or from a Spark Connect server's structured
//! error — and a short excerpt of it with no secrets in it.

use super::FailureClass;

/// Classifies a finished engine run that did not succeed. `oom_killed` alone is unreliable: only
/// with exit code 137 does it mean the kernel killed the container for memory.
pub fn classify_failure(
    exit_code: i64,
    oom_killed: bool,
    timed_out: bool,
    stderr: &str,
) -> FailureClass {
    if timed_out {
        return FailureClass::Timeout;
    }
    if (exit_code == 137 && oom_killed) || stderr.contains("java.lang.OutOfMemoryError") {
        return FailureClass::OutOfMemory;
    }
    if stderr.contains("CommitStateUnknownException") {
        return FailureClass::CommitStateUnknown;
    }
    if stderr.contains("ValidationException")
        || stderr.contains("CommitFailedException")
        || stderr.contains("found new delete for replaced data file")
    {
        return FailureClass::CommitConflict;
    }
    FailureClass::Other
}

/// A failure as a Spark Connect server reports it: the error class (condition), the SQLSTATE,
/// and the JVM exception classes (most specific first), from the gRPC status' `ErrorInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerError {
    /// `OPERATION_CANCELED`, `TABLE_OR_VIEW_NOT_FOUND` ...; the exception's class when the error
    /// has no condition (Iceberg's exceptions).
    pub error_class: String,
    pub sql_state: Option<String>,
    /// `org.apache.iceberg.exceptions.ValidationException`, its superclasses ...
    pub exception_classes: Vec<String>,
    pub message: String,
    /// Whether the server could not be reached or the connection broke (gRPC `UNAVAILABLE`,
    /// `DEADLINE_EXCEEDED`, `UNKNOWN` transport errors), rather than a statement failing.
    pub transport: bool,
}

impl ServerError {
    /// One line for excerpts: `[CLASS] (SQLSTATE) message`, at most `max_chars`.
    pub fn describe(&self, max_chars: usize) -> String {
        let mut text = String::new();
        if !self.error_class.is_empty() && !self.message.contains(&self.error_class) {
            text.push_str(&format!("[{}] ", self.error_class));
        }
        if let Some(state) = &self.sql_state {
            text.push_str(&format!("(SQLSTATE {state}) "));
        }
        text.push_str(self.message.lines().next().unwrap_or(""));
        crate::base::redact::excerpt_chars(&text, max_chars)
    }

    fn is_a(&self, class_name: &str) -> bool {
        let matches = |name: &str| name == class_name || name.ends_with(&format!(".{class_name}"));
        matches(&self.error_class) || self.exception_classes.iter().any(|name| matches(name))
    }
}

/// Classifies a server-reported failure from its structure: exception classes, error class and
/// SQLSTATE (class `53`: insufficient resources), never from log text.
pub fn classify_server_error(error: &ServerError) -> FailureClass {
    if error.transport {
        return FailureClass::EngineUnavailable;
    }
    if error.error_class == "OPERATION_CANCELED" || error.sql_state.as_deref() == Some("HY008") {
        return FailureClass::Timeout;
    }
    if error.is_a("OutOfMemoryError")
        || error.is_a("SparkOutOfMemoryError")
        || error.error_class.starts_with("UNABLE_TO_ACQUIRE_MEMORY")
        || error
            .sql_state
            .as_deref()
            .is_some_and(|state| state.starts_with("53"))
    {
        return FailureClass::OutOfMemory;
    }
    if error.is_a("CommitStateUnknownException") {
        return FailureClass::CommitStateUnknown;
    }
    if error.is_a("ValidationException") || error.is_a("CommitFailedException") {
        return FailureClass::CommitConflict;
    }
    FailureClass::Other
}

/// The most telling lines of a failed run's stderr (error and exception lines, else the tail),
/// at most `max_chars`, with every secret replaced by `***`.
pub fn failure_excerpt(stderr: &str, secrets: &[String], max_chars: usize) -> String {
    let telling: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            (line.contains("Exception") || line.contains("Error") || line.starts_with("ERROR"))
                && !line.starts_with("at ")
        })
        .collect();
    let chosen: Vec<&str> = if telling.is_empty() {
        stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect()
    } else {
        let mut unique: Vec<&str> = Vec::new();
        for line in telling.into_iter().rev() {
            if !unique.contains(&line) {
                unique.push(line);
            }
            if unique.len() == 4 {
                break;
            }
        }
        unique.into_iter().rev().collect()
    };
    crate::base::redact::excerpt_chars(&redact(&chosen.join("\n"), secrets), max_chars)
}

/// The one redaction rule ([`crate::base::redact::redact`]): known secrets and visible ones hidden.
pub use crate::base::redact::redact;
