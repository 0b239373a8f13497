//! A real browser for the operator page: Debian's headless Chromium (`make deps` installs it),
//! driven from its command line — the DOM as a person's browser renders it after the page's
//! script ran (`--dump-dom`), and screenshots.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn binary() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .map(|name| Path::new("/usr/bin").join(name))
        .find(|path| path.exists())
}

/// Whether Chromium is here (missing fails the test in CI, as every part of the stack does).
pub fn available(test: &str) -> bool {
    super::needed_here(
        test,
        binary().is_some(),
        "Chromium",
        " (apt-get install chromium; `make deps` does)",
    )
}

fn chromium(args: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary().expect("Chromium is installed"));
    command
        .args([
            "--headless",
            // Root in a container has no user namespace for the sandbox.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            // Virtual time stops while fetches are pending: the page's API calls all finish.
            "--virtual-time-budget=6000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args);
    command.output().expect("Chromium runs")
}

/// The page's DOM once its script has rendered (`<body data-loaded="true">`), tried a few times
/// on a loaded machine.
pub fn rendered(url: &str) -> String {
    let mut last = String::new();
    for _ in 0..3 {
        let output = chromium(&["--dump-dom".to_string(), url.to_string()]);
        last = String::from_utf8_lossy(&output.stdout).into_owned();
        if last.contains(r#"data-loaded="true""#) {
            return last;
        }
        eprintln!(
            "the page at {url} did not finish rendering:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    panic!("the page at {url} never rendered:\n{last}");
}

/// A PNG of the page as rendered at `width` × `height`.
pub fn screenshot(url: &str, path: &Path, width: u32, height: u32) {
    let output = chromium(&[
        format!("--screenshot={}", path.display()),
        format!("--window-size={width},{height}"),
        url.to_string(),
    ]);
    let png = std::fs::read(path).unwrap_or_else(|error| {
        panic!(
            "no screenshot at {} ({error}):\n{}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(png.starts_with(b"\x89PNG"), "{} is a PNG", path.display());
}

/// The markup of the first element whose opening tag contains `marker`, up to its closing
/// `</tag>` (the page nests no element of the same tag inside the ones tests look at).
pub fn element<'a>(dom: &'a str, tag: &str, marker: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(start) = dom[from..].find(&format!("<{tag}")).map(|at| at + from) {
        let open_end = dom[start..].find('>')? + start;
        if dom[start..open_end].contains(marker) {
            let close = format!("</{tag}>");
            let end = dom[open_end..].find(&close)? + open_end + close.len();
            return Some(&dom[start..end]);
        }
        from = open_end;
    }
    None
}

/// How many opening tags of `tag` contain `marker`.
pub fn count(dom: &str, tag: &str, marker: &str) -> usize {
    dom.match_indices(&format!("<{tag}"))
        .filter(|(at, _)| {
            let end = dom[*at..].find('>').map_or(dom.len(), |end| end + at);
            dom[*at..end].contains(marker)
        })
        .count()
}
