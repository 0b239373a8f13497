//! SQL text that names and values become: what icepack lets into a statement (safe names) and
//! how a value is quoted. A leaf: the configuration checks names with it, the engines build
//! statements with it.

/// A Spark SQL string literal: single quotes, with `\` and `'` backslash-escaped (Spark unescapes
/// string literals C-style). Control characters are escaped too, so a literal is always one line.
pub fn quote_string(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('\'');
    for c in value.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04x}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// A catalog name or `--conf` key: letters, digits, `_`, `-` and `.` only.
pub fn is_safe_conf_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A Spark catalog name: an identifier.
pub fn is_safe_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}
