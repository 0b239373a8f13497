//! The standard `process_*` metrics of a Prometheus client (CPU, memory, file descriptors,
//! threads, start time), read from `/proc/self` at scrape time. Elsewhere than on Linux there is
//! no `/proc` and the collector reports nothing.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self` says about this process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSample {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    pub start_time_seconds: f64,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

/// Parses `/proc/self/stat`: fields after the command name (which may hold spaces and
/// parentheses, so it ends at the last `)`), numbered as in proc(5).
pub fn parse_stat(
    stat: &str,
    ticks_per_second: f64,
    page_size: u64,
    boot_time_seconds: f64,
) -> Option<ProcessSample> {
    let after = &stat[stat.rfind(')')? + 1..];
    // `after` starts at field 3 (state): field n is at index n - 3.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let user = field(14)?;
    let system = field(15)?;
    let threads = field(20)?;
    let start_ticks = field(22)?;
    let virtual_bytes = field(23)?;
    let resident_pages = field(24)?;
    Some(ProcessSample {
        cpu_seconds: (user + system) / ticks_per_second,
        resident_bytes: resident_pages as u64 * page_size,
        virtual_bytes: virtual_bytes as u64,
        threads: threads as u64,
        start_time_seconds: boot_time_seconds + start_ticks / ticks_per_second,
        open_fds: None,
        max_fds: None,
    })
}

/// The soft limit of open files from `/proc/self/limits` (`None`: unlimited or absent).
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `btime` of `/proc/stat`: when the machine booted, in Unix seconds.
pub fn parse_boot_time(stat: &str) -> Option<f64> {
    stat.lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// Reads this process's sample (`None` without `/proc`).
pub fn sample() -> Option<ProcessSample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    // SAFETY: sysconf only reads a configuration value.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    let mut sample = parse_stat(&stat, ticks as f64, page as u64, boot)?;
    sample.open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64);
    sample.max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| parse_max_fds(&limits));
    Some(sample)
}

/// Registered once; reads `/proc/self` on every scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(sample) = sample() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(sample.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let mut gauge = |name: &str, help: &str, value: f64| -> Result<(), std::fmt::Error> {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)
        };
        gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            sample.resident_bytes as f64,
        )?;
        gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            sample.virtual_bytes as f64,
        )?;
        gauge(
            "process_threads",
            "Number of OS threads in the process.",
            sample.threads as f64,
        )?;
        gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            sample.start_time_seconds,
        )?;
        if let Some(open) = sample.open_fds {
            gauge(
                "process_open_fds",
                "Number of open file descriptors.",
                open as f64,
            )?;
        }
        if let Some(max) = sample.max_fds {
            gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max as f64,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis_of_the_name() {
        // A command name with a space and a parenthesis, as a thread may rename itself.
        let stat = "4242 (tokio (rt) 1) S 1 4242 4242 0 -1 4194560 3200 0 0 0 250 50 0 0 20 0 \
                    7 0 1000 123456789 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 \
                    0 0 0 0 0";
        let sample = parse_stat(stat, 100.0, 4096, 1_700_000_000.0).unwrap();
        assert_eq!(sample.cpu_seconds, 3.0);
        assert_eq!(sample.threads, 7);
        assert_eq!(sample.start_time_seconds, 1_700_000_010.0);
        assert_eq!(sample.virtual_bytes, 123_456_789);
        assert_eq!(sample.resident_bytes, 300 * 4096);
        assert_eq!(parse_stat("4242 (cut", 100.0, 4096, 0.0), None);
    }

    #[test]
    fn limits_and_boot_time_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        assert_eq!(
            parse_max_fds(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000.0)
        );
    }

    #[test]
    fn this_process_reads_its_own_sample() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            return;
        }
        let sample = sample().expect("a sample on Linux");
        assert!(sample.threads >= 1);
        assert!(sample.resident_bytes > 0);
        assert!(
            sample.open_fds.unwrap() >= 3,
            "stdin, stdout, stderr at least"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            sample.start_time_seconds <= now + 1.0
                && sample.start_time_seconds > now - 86_400.0 * 365.0
        );
    }
}
