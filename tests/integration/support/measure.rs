//! What the engine benchmarks measure besides wall time (BENCHMARKS.md §5): CPU time and peak
//! resident memory of this process and of a child process, from the kernel (`/proc`, `wait4`),
//! and which of the benchmark's cases a run selects (`ICEPACK_FIGURES_CASES`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

/// Whether the benchmark case `case` (`a`, `b`, `c`) is selected: `ICEPACK_FIGURES_CASES` is a
/// comma-separated list of cases, all of them when unset.
pub fn case_selected(case: &str) -> bool {
    match std::env::var("ICEPACK_FIGURES_CASES") {
        Ok(cases) => cases.split(',').any(|selected| selected.trim() == case),
        Err(_) => true,
    }
}

/// Rounds of an alternating benchmark: `ICEPACK_BENCH_ROUNDS`, else `default`.
pub fn rounds(default: usize) -> usize {
    std::env::var("ICEPACK_BENCH_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(default)
}

/// The median (the upper one of an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// User + system CPU seconds of process `pid` so far, its own threads only (`/proc/PID/stat`).
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields after it start past the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    Some((user + system) / clock_ticks_per_second())
}

/// User + system CPU seconds of this process (every thread) so far.
pub fn cpu_seconds_self() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

fn seconds(time: libc::timeval) -> f64 {
    time.tv_sec as f64 + time.tv_usec as f64 / 1e6
}

/// A line of `/proc/self/status` in KiB (`VmHWM`, `VmRSS`).
pub fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Resets this process's peak resident set (`VmHWM`) to its current one (Linux ≥ 4.0).
pub fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5")
        .expect("reset VmHWM through /proc/self/clear_refs");
}

/// A child process measured: its wall time, the CPU time and peak RSS the kernel accounted to it
/// (`wait4`), what it wrote, and the CPU time it had used when each of its stderr lines holding
/// `marker` arrived (to split a run's phases, e.g. spark-sql's `Time taken:` per statement).
pub struct Measured {
    pub status: ExitStatus,
    pub wall_seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_kib: u64,
    pub stdout: String,
    pub stderr: String,
    /// (seconds since the start, the child's CPU seconds then) at each `marker` line.
    pub marks: Vec<(f64, f64)>,
}

/// Runs `command` to its end, measured (see [`Measured`]).
pub fn run_measured(command: &mut Command, marker: &str) -> Measured {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the measured command");
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let stderr = child.stderr.take().unwrap();
    let marker = marker.to_string();
    let lines = std::thread::spawn(move || {
        let mut text = String::new();
        let mut marks = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !marker.is_empty() && line.contains(&marker) {
                if let Some(cpu) = cpu_seconds_of(pid) {
                    marks.push((started.elapsed().as_secs_f64(), cpu));
                }
            }
            text.push_str(&line);
            text.push('\n');
        }
        (text, marks)
    });
    // wait4 rather than Child::wait: the kernel's accounting of the child comes with its exit.
    let mut raw_status = 0;
    // SAFETY: rusage is plain data wait4 fills; the pid is our own unreaped child.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let reaped = libc::wait4(pid as i32, &mut raw_status, 0, &mut usage);
        assert_eq!(reaped, pid as i32, "wait4 on the measured command");
        usage
    };
    let wall_seconds = started.elapsed().as_secs_f64();
    drop(child);
    let (stderr, marks) = lines.join().unwrap();
    Measured {
        status: ExitStatus::from_raw(raw_status),
        wall_seconds,
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        peak_rss_kib: usage.ru_maxrss as u64,
        stdout: stdout.join().unwrap(),
        stderr,
        marks,
    }
}
