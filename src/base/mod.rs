//! What every layer uses and none owns: time as a dependency, one back-off for every retry,
//! fault points for the fault-injection tests, secrets hidden in text, safe SQL names and values,
//! the hardening every HTTP listener shares.

pub mod backoff;
pub mod clock;
pub mod failpoint;
#[cfg(feature = "service")]
pub mod http;
pub mod redact;
pub mod sql_text;
