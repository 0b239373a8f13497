//! spark-sql's text output cut into one result per statement by the run's own frame.
//!
//! The frame: before each statement spark-sql runs `SELECT '<nonce>:<i>' AS icepack_frame`, and
//! `SELECT '<nonce>:end' ...` after the last, `<nonce>` random per run (kept in the run's claim).
//! A statement's result is what spark-sql printed between its marker and the next; a statement
//! whose next marker never came did not run to its end. Nothing a table holds — column names,
//! property keys, comments, paths — can make a marker without the nonce, so nothing in a table
//! can open, close or imitate a result. Paths are read from JSON objects, one a row, so a path
//! holding a tab or a newline stays one path. Spark Connect's results are structured and come
//! one per statement: they never go through this text.

use super::super::sql::{Statement, StatementKind};

/// The alias of the frame's marker statements.
pub const FRAME_COLUMN: &str = "icepack_frame";

/// One statement's result: its column names and rows, every value as text (`NULL` for null).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResultSet {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl ResultSet {
    /// One statement's output as spark-sql prints it (header on): a header line, then a line a
    /// row, cells separated by tabs.
    pub fn from_text(text: &str) -> ResultSet {
        let mut set = SectionBuilder::default();
        for line in text.lines() {
            set.push(line);
        }
        set.finish()
    }
}

/// Builds one statement's result from its lines: the first is the header.
#[derive(Debug, Default)]
struct SectionBuilder {
    columns: Option<Vec<String>>,
    rows: Vec<Vec<String>>,
}

impl SectionBuilder {
    fn push(&mut self, line: &str) {
        let cells = line.split('\t').map(str::to_string);
        match &self.columns {
            None => self.columns = Some(cells.map(|cell| cell.trim().to_string()).collect()),
            Some(_) => self.rows.push(cells.collect()),
        }
    }

    fn finish(self) -> ResultSet {
        ResultSet {
            columns: self.columns.unwrap_or_default(),
            rows: self.rows,
        }
    }
}

/// What a run's statements returned, each with what the statement is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatementResults {
    /// The statements that ran to their end, in order.
    pub results: Vec<(StatementKind, ResultSet)>,
    /// The statement that had begun and did not end (it failed, or the run was cut off in it).
    pub unfinished: Option<StatementKind>,
}

/// The statements spark-sql is given for `statements`: each after its marker, and the end marker.
pub fn framed_statements(nonce: &str, statements: &[Statement]) -> Vec<String> {
    let marker = |label: &str| format!("SELECT '{nonce}:{label}' AS {FRAME_COLUMN}");
    let mut framed = Vec::with_capacity(statements.len() * 2 + 1);
    for (index, statement) in statements.iter().enumerate() {
        framed.push(marker(&index.to_string()));
        framed.push(statement.sql.clone());
    }
    framed.push(marker("end"));
    framed
}

/// A new per-run nonce: 128 bits from the operating system's generator, as hex.
pub fn new_nonce() -> String {
    crate::model::report::random_hex(16)
}

/// Reads spark-sql's stdout as it streams, cut by the run's frame ([`framed_statements`]) into
/// one result per statement. Memory is the size of the results, whatever the output's length;
/// what is printed outside the frame is not kept.
#[derive(Debug)]
pub struct FramedStdout {
    nonce: String,
    kinds: Vec<StatementKind>,
    /// The index of the marker that comes next.
    next: usize,
    /// The statement whose output is being read, and that output so far.
    current: Option<(StatementKind, SectionBuilder)>,
    /// The last line read, held back: before a marker it is the marker's own header.
    held: Option<String>,
    results: Vec<(StatementKind, ResultSet)>,
    ended: bool,
    partial_line: Vec<u8>,
}

impl FramedStdout {
    pub fn new(nonce: &str, statements: &[Statement]) -> FramedStdout {
        FramedStdout {
            nonce: nonce.to_string(),
            kinds: statements.iter().map(|statement| statement.kind).collect(),
            next: 0,
            current: None,
            held: None,
            results: Vec::new(),
            ended: false,
            partial_line: Vec::new(),
        }
    }

    /// Takes the next bytes of the stream (lines may span calls).
    pub fn push(&mut self, mut bytes: &[u8]) {
        while let Some(newline) = bytes.iter().position(|byte| *byte == b'\n') {
            let (line, rest) = bytes.split_at(newline);
            bytes = &rest[1..];
            if self.partial_line.is_empty() {
                self.push_line(&String::from_utf8_lossy(line));
            } else {
                let mut whole = std::mem::take(&mut self.partial_line);
                whole.extend_from_slice(line);
                self.push_line(&String::from_utf8_lossy(&whole));
            }
        }
        self.partial_line.extend_from_slice(bytes);
    }

    /// Whether `line` is the marker that comes next: `<nonce>:<next>`, or `<nonce>:end` after
    /// the last statement.
    fn is_next_marker(&self, line: &str) -> bool {
        let Some(label) = line
            .strip_prefix(self.nonce.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
        else {
            return false;
        };
        !self.ended
            && !self.nonce.is_empty()
            && if self.next == self.kinds.len() {
                label == "end"
            } else {
                label == self.next.to_string()
            }
    }

    fn push_line(&mut self, line: &str) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if self.is_next_marker(line) {
            let held = self.held.take();
            if let Some((kind, mut section)) = self.current.take() {
                // The line before a marker is the marker statement's header.
                if let Some(held) = held.filter(|held| held.trim() != FRAME_COLUMN) {
                    section.push(&held);
                }
                self.results.push((kind, section.finish()));
            }
            match self.kinds.get(self.next) {
                Some(kind) => self.current = Some((*kind, SectionBuilder::default())),
                None => self.ended = true,
            }
            self.next += 1;
            return;
        }
        if let Some((_, section)) = self.current.as_mut() {
            if let Some(held) = self.held.take() {
                section.push(&held);
            }
            self.held = Some(line.to_string());
        }
    }

    /// The results of the statements that ran to their end, and the one cut off, if any.
    pub fn finish(mut self) -> StatementResults {
        if !self.partial_line.is_empty() {
            let last = std::mem::take(&mut self.partial_line);
            self.push_line(&String::from_utf8_lossy(&last));
        }
        let unfinished = match (&self.current, self.ended) {
            (_, true) => None,
            (Some((kind, _)), false) => Some(*kind),
            // Not even the first marker: the run ended before its first statement.
            (None, false) => self.kinds.first().copied(),
        };
        StatementResults {
            results: self.results,
            unfinished,
        }
    }
}

/// The results of the whole framed stdout of a run of `statements` (see [`FramedStdout`]).
pub fn framed_results(nonce: &str, statements: &[Statement], stdout: &str) -> StatementResults {
    let mut reader = FramedStdout::new(nonce, statements);
    reader.push(stdout.as_bytes());
    reader.finish()
}
