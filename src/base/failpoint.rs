//! Fault points for the fault-injection tests, compiled only with the `failpoints` cargo feature
//! (`cargo test --features failpoints`, as `make test` runs it). Without it, as in `cargo build
//! --release`, `make build` and the image, every point compiles to nothing, the `fail` crate is
//! not even built, and `ICEPACK_FAILPOINTS` is ignored: no environment variable can make a
//! production process kill itself or fail its writes.
//!
//! With the feature the points are the `fail` crate's, armed at start-up from
//! `ICEPACK_FAILPOINTS` in its syntax, `NAME=ACTIONS;NAME=ACTIONS` (see `fail::cfg`):
//! - crash points `intake.before_commit`, `intake.after_commit` and `poller.before_delete`:
//!   `return` makes the process kill itself there with SIGKILL, exactly as an OOM killer or a power
//!   cut would (`3*off->return`: at the fourth pass);
//! - `store.write_error`: `return(PATH)` makes state writes fail (as on a full or read-only disk)
//!   while PATH exists, so a test switches it on and off from outside; plain `return`, always;
//! - `accumulator.stage_panic`: `return(TABLE@PATH)` makes that table's accumulator panic when it
//!   stages records, while PATH exists (`return(TABLE)`: always);
//! - `executor.prepare_panic` and `executor.finish_panic`: `return(TABLE)` makes preparing that
//!   table's run (its job from its claim) or reading its outcome panic, as a bug would there;
//! - the native engine's crash points `native.before_commit` (outputs and manifests written, the
//!   commit not sent) and `native.after_commit` (the catalog accepted the commit, the run has not
//!   reported it), and `native.commit_gate` (`return(RUN_ID@PATH)`: that run waits before its
//!   commit while PATH exists).

/// The variable [`setup`] reads.
pub const ENV: &str = "ICEPACK_FAILPOINTS";

#[derive(Debug, thiserror::Error)]
pub enum FailpointError {
    #[error("ICEPACK_FAILPOINTS: `{entry}` is not NAME=ACTIONS")]
    Malformed { entry: String },
    #[error("ICEPACK_FAILPOINTS: fault point {name}: {message}")]
    Actions { name: String, message: String },
}

/// Arms the fault points `ICEPACK_FAILPOINTS` names; called once at start-up.
#[cfg(feature = "failpoints")]
pub fn setup() -> Result<(), FailpointError> {
    let spec = std::env::var(ENV).unwrap_or_default();
    for (name, actions) in parse(&spec)? {
        fail::cfg(name, actions).map_err(|message| FailpointError::Actions {
            name: name.to_string(),
            message,
        })?;
    }
    Ok(())
}

/// This build has no fault points: a set `ICEPACK_FAILPOINTS` is only reported.
#[cfg(not(feature = "failpoints"))]
pub fn setup() -> Result<(), FailpointError> {
    if std::env::var_os(ENV).is_some_and(|spec| !spec.is_empty()) {
        tracing::warn!(
            "ICEPACK_FAILPOINTS is ignored: this build has no fault points (built without the \
             `failpoints` feature)"
        );
    }
    Ok(())
}

/// `NAME=ACTIONS` entries separated by `;`; blank entries are skipped.
pub fn parse(spec: &str) -> Result<Vec<(&str, &str)>, FailpointError> {
    spec.split(';')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            entry
                .split_once('=')
                .map(|(name, actions)| (name.trim(), actions.trim()))
                .filter(|(name, actions)| !name.is_empty() && !actions.is_empty())
                .ok_or_else(|| FailpointError::Malformed {
                    entry: entry.to_string(),
                })
        })
        .collect()
}

/// A crash point: armed as `NAME=return`, the process kills itself here with SIGKILL.
#[cfg(feature = "failpoints")]
macro_rules! crash_point {
    ($name:literal) => {
        fail::fail_point!($name, |_| $crate::base::failpoint::kill($name))
    };
}

/// This build has no fault points: a crash point is nothing.
#[cfg(not(feature = "failpoints"))]
#[cfg_attr(not(feature = "service"), allow(unused_macros))]
macro_rules! crash_point {
    ($name:literal) => {};
}
// The actors are the only users of crash points: the pure core has none.
#[cfg_attr(not(feature = "service"), allow(unused_imports))]
pub(crate) use crash_point;

/// Kills the process with SIGKILL: no destructor runs, nothing is flushed.
#[cfg(feature = "failpoints")]
pub fn kill(name: &str) -> ! {
    eprintln!("failpoint {name}: killing the process with SIGKILL");
    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // A signal a process sends itself is delivered before kill(2) returns; wait for it regardless.
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Whether a state write fails now, as on a full or read-only disk (`store.write_error`). Always
/// false without the `failpoints` feature.
pub fn store_write_error() -> bool {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("store.write_error", |path: Option<String>| {
        path.is_none_or(|path| std::path::Path::new(&path).exists())
    });
    false
}

/// Whether staging records for `table` panics now, as an invariant the accumulator asserts would
/// (`accumulator.stage_panic=return(TABLE@PATH)`: while PATH exists; `return(TABLE)`: always).
/// Always false without the `failpoints` feature.
pub fn accumulator_panics(table: &str) -> bool {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("accumulator.stage_panic", |armed: Option<String>| {
        let armed = armed.unwrap_or_default();
        let (armed_table, path) = match armed.split_once('@') {
            Some((armed_table, path)) => (armed_table, Some(path)),
            None => (armed.as_str(), None),
        };
        armed_table == table && path.is_none_or(|path| std::path::Path::new(path).exists())
    });
    let _ = table;
    false
}

/// Whether preparing a run of `table` panics now (`executor.prepare_panic=return(TABLE)`).
/// Always false without the `failpoints` feature.
pub fn prepare_panics(table: &str) -> bool {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("executor.prepare_panic", |armed: Option<String>| {
        armed.as_deref() == Some(table)
    });
    let _ = table;
    false
}

/// Whether reading the outcome of a run of `table` panics now
/// (`executor.finish_panic=return(TABLE)`). Always false without the `failpoints` feature.
pub fn finish_panics(table: &str) -> bool {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("executor.finish_panic", |armed: Option<String>| {
        armed.as_deref() == Some(table)
    });
    let _ = table;
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_name_equals_actions_separated_by_semicolons() {
        assert_eq!(parse("").unwrap(), Vec::<(&str, &str)>::new());
        assert_eq!(
            parse(" intake.after_commit=3*off->return ; store.write_error=return(/tmp/full);")
                .unwrap(),
            vec![
                ("intake.after_commit", "3*off->return"),
                ("store.write_error", "return(/tmp/full)")
            ]
        );
        for malformed in ["intake.after_commit", "=return", "intake.after_commit="] {
            let error = parse(malformed).unwrap_err().to_string();
            assert!(error.contains(malformed), "{error}");
        }
    }
}
