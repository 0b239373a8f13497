//! Crash points for fault-injection tests: `ICEPACK_FAILPOINTS=intake.after_commit` makes the
//! process kill itself with SIGKILL when it reaches that point, exactly as an OOM killer or a
//! power cut would. Unset in production; reading it costs one branch after the first call.

use std::collections::HashSet;
use std::sync::OnceLock;

fn armed() -> &'static HashSet<String> {
    static ARMED: OnceLock<HashSet<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var("ICEPACK_FAILPOINTS")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .collect()
    })
}

/// Kills the process with SIGKILL if the named point is armed.
pub fn hit(name: &str) {
    if armed().contains(name) {
        eprintln!("failpoint {name}: killing the process with SIGKILL");
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
