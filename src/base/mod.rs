//! What every layer uses and none owns: time as a dependency, one back-off for every retry,
//! fault points for the fault-injection tests, secrets hidden in text, safe SQL names and values.

pub mod backoff;
pub mod clock;
pub mod failpoint;
pub mod redact;
pub mod sql_text;
