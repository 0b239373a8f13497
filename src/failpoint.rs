//! Fault points for fault-injection tests. `ICEPACK_FAILPOINTS=intake.after_commit` makes the
//! process kill itself with SIGKILL when it reaches that point, exactly as an OOM killer or a
//! power cut would; `store.write_error@/some/file` makes state writes fail (as on a full or
//! read-only disk) while that file exists. Unset in production; reading it costs one branch after
//! the first call.

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

/// Whether the named error point is active: armed as `name` (always) or as `name@path` (while
/// `path` exists, so a test can switch it on and off from outside).
pub fn active(name: &str) -> bool {
    armed().iter().any(|entry| match entry.split_once('@') {
        None => entry == name,
        Some((armed_name, path)) => armed_name == name && std::path::Path::new(path).exists(),
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
