//! Secrets, recognised by one rule and hidden wherever text is shown: which settings are secret
//! (their values stay off command lines and out of logs), the secret parts of a value (a URL's
//! password, a `password=` parameter), and text made safe to show (logs, excerpts, status, alerts).

/// Parts of a setting's name that make its value a secret, wherever they appear in the name:
/// `s3.secret-access-key`, `token`, `credential`, `jdbc.password`, `adls.auth.shared-key.*`,
/// `fs.azure.account.key.*`, `fs.gs.auth.service.account.private.key`, `header.Authorization`.
const SECRET_NAME_PARTS: [&str; 9] = [
    "key",
    "secret",
    "token",
    "password",
    "passwd",
    "credential",
    "private",
    "authorization",
    "signature",
];

/// At most `max_chars` characters of `text`, the last of them `…` when it was cut: an excerpt's
/// length (of an error, of a failed run's output) whatever the text holds (a cut text keeps at
/// least its `…`).
pub fn excerpt_chars(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let mut excerpt: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    excerpt.push('…');
    excerpt
}

/// What a hidden secret is shown as.
pub const HIDDEN: &str = "***";

/// Whether a setting, property, parameter or header of this name holds a secret: its name
/// contains `key`, `secret`, `token`, `password`, `credential`, `private`, ... (any case), or it
/// is a header property (`header.NAME`, which the REST catalog sends as an HTTP header).
pub fn is_secret_name(name: &str) -> bool {
    // A catalog's settings are judged by the property, not by the catalog's name
    // (`spark.sql.catalog.private_lake.uri` is no secret).
    let name = match name.strip_prefix("spark.sql.catalog.") {
        Some(catalog) => catalog.split_once('.').map_or("", |(_, property)| property),
        None => name,
    };
    let name = name.to_ascii_lowercase();
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
        || name.starts_with("header.")
        || name.contains(".header.")
}

/// Whether a setting is secret: by its name, or because its value carries a secret (a URI with
/// a password, a `password=` parameter). Such a setting never goes on a command line.
pub fn is_secret_setting(name: &str, value: &str) -> bool {
    is_secret_name(name) || !secret_parts(value).is_empty()
}

/// What of a setting's value must never be shown: all of it for a secret name, else its secret
/// parts ([`secret_parts`]).
pub fn secret_values(name: &str, value: &str) -> Vec<String> {
    if is_secret_name(name) {
        vec![value.to_string()]
    } else {
        secret_parts(value)
    }
}

/// The secrets inside a value: the password of each `scheme://user:password@host`, the value of
/// each `name=value` parameter whose name is secret (`?password=`, `;token=`), a bearer token.
pub fn secret_parts(text: &str) -> Vec<String> {
    secret_spans(text)
        .into_iter()
        .map(|(start, end)| text[start..end].to_string())
        .filter(|part| !part.is_empty())
        .collect()
}

/// The text with every secret it visibly carries replaced by `***`: URL passwords, secret
/// parameters, bearer tokens. Secrets known by value are hidden by [`redact`].
pub fn hide_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut shown_up_to = 0;
    for (start, end) in secret_spans(text) {
        if start < shown_up_to || start == end {
            continue;
        }
        out.push_str(&text[shown_up_to..start]);
        out.push_str(HIDDEN);
        shown_up_to = end;
    }
    out.push_str(&text[shown_up_to..]);
    out
}

/// The text safe to show: every known secret value (`secrets`: the run's environment, its secret
/// settings) replaced by `***`, then what [`hide_secrets`] finds. Values shorter than 4
/// characters and booleans are not searched for (they would hide ordinary words).
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut known: Vec<&str> = secrets
        .iter()
        .map(String::as_str)
        .filter(|secret| {
            secret.len() >= 4
                && !secret.eq_ignore_ascii_case("true")
                && !secret.eq_ignore_ascii_case("false")
        })
        .collect();
    // The longest first: a secret that contains another is hidden whole.
    known.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    let mut redacted = text.to_string();
    for secret in known {
        if redacted.contains(secret) {
            redacted = redacted.replace(secret, HIDDEN);
        }
    }
    hide_secrets(&redacted)
}

/// Byte ranges of the secrets in `text`, in order and not overlapping.
fn secret_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = url_password_spans(text);
    spans.extend(parameter_spans(text));
    spans.extend(bearer_spans(text));
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The password of each `scheme://user:password@host`.
fn url_password_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut offset = 0;
    while let Some(found) = text[offset..].find("://") {
        let authority_start = offset + found + 3;
        let rest = &text[authority_start..];
        let authority_end = rest
            .find(|c: char| matches!(c, '/' | '?' | '#' | ',' | '"' | '\'') || c.is_whitespace())
            .unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let (Some(at), Some(colon)) = (authority.rfind('@'), authority.find(':')) {
            if colon < at {
                spans.push((authority_start + colon + 1, authority_start + at));
            }
        }
        offset = authority_start + authority_end;
    }
    spans
}

/// Characters of a parameter's name (`password`, `spark.sql.catalog.c.token`, `X-Amz-Signature`).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// The value of each `name=value` whose name is secret: up to `&`, `;`, a quote or whitespace.
fn parameter_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for (equals, _) in text.match_indices('=') {
        // After the last character that is not a name's: a char boundary whatever its width
        // (the text is anyone's: an error quoting a configuration's line, an engine's output).
        let name_start = text[..equals]
            .char_indices()
            .rfind(|&(_, c)| !is_name_char(c))
            .map_or(0, |(before, c)| before + c.len_utf8());
        let name = &text[name_start..equals];
        if name.is_empty() || !is_secret_name(name) {
            continue;
        }
        let value_start = equals + 1;
        let value_end = text[value_start..]
            .find(|c: char| matches!(c, '&' | ';' | '"' | '\'') || c.is_whitespace())
            .map_or(text.len(), |end| value_start + end);
        spans.push((value_start, value_end));
    }
    spans
}

/// The token after each `Bearer ` (as an `Authorization` header has it).
fn bearer_spans(text: &str) -> Vec<(usize, usize)> {
    const BEARER: &str = "Bearer ";
    text.match_indices(BEARER)
        .map(|(at, _)| {
            let start = at + BEARER.len();
            let end = text[start..]
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';'))
                .map_or(text.len(), |end| start + end);
            (start, end)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_with_wide_characters_before_a_parameter_is_redacted_without_a_panic() {
        // Found by the configuration fuzz target: a TOML error quoting `small_file_mЌ= 64`.
        assert_eq!(hide_secrets("small_file_mЌ= 64"), "small_file_mЌ= 64");
        let hidden = hide_secrets("ЌЌpassword=hunter2 and Ќtoken=abc&x=1");
        assert!(
            !hidden.contains("hunter2") && !hidden.contains("abc"),
            "{hidden}"
        );
        assert!(
            hidden.starts_with("ЌЌpassword=") && hidden.contains("Ќtoken="),
            "{hidden}"
        );
    }

    #[test]
    fn every_kind_of_secret_name_is_recognised() {
        for name in [
            "spark.sql.catalog.c.adls.auth.shared-key.account.name",
            "spark.sql.catalog.c.adls.auth.shared-key.account.key",
            "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
            "spark.hadoop.fs.gs.auth.service.account.private.key",
            "spark.hadoop.fs.gs.auth.service.account.private.key.id",
            "spark.sql.catalog.c.gcs.oauth2.token",
            "spark.sql.catalog.c.s3.secret-access-key",
            "spark.sql.catalog.c.s3.access-key-id",
            "spark.sql.catalog.c.s3.session-key",
            "spark.hadoop.fs.s3a.secret.key",
            "spark.sql.catalog.c.token",
            "spark.sql.catalog.c.credential",
            "spark.sql.catalog.c.jdbc.password",
            "spark.sql.catalog.c.header.Authorization",
            "spark.sql.catalog.c.header.X-Iceberg-Access-Delegation",
            "header.X-Api-Key",
            "spark.sql.catalog.c.rest.auth.oauth2.token",
            "spark.kubernetes.authenticate.driver.oauthToken",
            "spark.ssl.keyPassword",
            "apiKey",
            "X-Amz-Signature",
            "spark.sql.catalog.private_keys.token",
            "spark.sql.catalog.c.header.Authorization",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "spark.sql.catalog.c.uri",
            "spark.sql.catalog.c.warehouse",
            "spark.sql.catalog.c.io-impl",
            "spark.sql.cli.print.header",
            "spark.sql.session.timeZone",
            "spark.hadoop.fs.s3a.path.style.access",
            "user",
            "spark.sql.catalog.private_keys",
            "spark.sql.catalog.private_keys.uri",
            "spark.sql.catalog.tokens.warehouse",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn secrets_inside_values_are_found_and_hidden() {
        let jdbc = "jdbc:postgresql://db:5432/catalog?user=icepack&password=hunter2&ssl=true";
        assert_eq!(secret_parts(jdbc), ["hunter2"]);
        assert_eq!(
            hide_secrets(jdbc),
            "jdbc:postgresql://db:5432/catalog?user=icepack&password=***&ssl=true"
        );
        assert!(is_secret_setting("spark.sql.catalog.c.uri", jdbc));
        let sqlserver =
            "jdbc:sqlserver://db:1433;databaseName=cat;user=u;password=p4ss;encrypt=true";
        assert_eq!(
            hide_secrets(sqlserver),
            "jdbc:sqlserver://db:1433;databaseName=cat;user=u;password=***;encrypt=true"
        );
        let userinfo = "jdbc:mysql://icepack:s3cr3t@db:3306/catalog";
        assert_eq!(secret_parts(userinfo), ["s3cr3t"]);
        assert_eq!(
            hide_secrets(userinfo),
            "jdbc:mysql://icepack:***@db:3306/catalog"
        );
        assert_eq!(
            hide_secrets("sc://h:15002/;user_id=ice;token=abc123;use_ssl=true"),
            "sc://h:15002/;user_id=ice;token=***;use_ssl=true"
        );
        assert_eq!(
            hide_secrets("GET https://b.s3/k?X-Amz-Credential=AKIA%2F&X-Amz-Signature=abcdef"),
            "GET https://b.s3/k?X-Amz-Credential=***&X-Amz-Signature=***"
        );
        assert_eq!(
            hide_secrets("401: Authorization: Bearer eyJhbGci.x.y was refused"),
            "401: Authorization: Bearer *** was refused"
        );
        for plain in [
            "http://iceberg-rest:8181",
            "s3://lake/warehouse",
            "jdbc:postgresql://icepack@db/catalog?ssl=true",
            "spark://master:7077",
        ] {
            assert!(
                !is_secret_setting("spark.sql.catalog.c.uri", plain),
                "{plain}"
            );
            assert_eq!(hide_secrets(plain), plain);
        }
    }

    #[test]
    fn redaction_hides_known_values_and_visible_secrets() {
        let secrets = vec![
            "AccountKeyBase64==".to_string(),
            "AccountKey".to_string(),
            "true".to_string(),
            "ab".to_string(),
        ];
        let text = "auth failed with AccountKeyBase64== for jdbc:postgresql://db/c?password=pw; \
                    it is true: ab";
        assert_eq!(
            redact(text, &secrets),
            "auth failed with *** for jdbc:postgresql://db/c?password=***; it is true: ab"
        );
        // A private key's lines, as a GCS error might echo them.
        let key = "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBg\\n-----END PRIVATE KEY-----\\n";
        let shown = redact(&format!("cannot parse {key}"), &[key.to_string()]);
        assert!(!shown.contains("MIIEvQIBADANBg"), "{shown}");
    }

    #[test]
    fn an_excerpt_keeps_at_most_its_characters_and_marks_a_cut() {
        assert_eq!(excerpt_chars("short", 5), "short");
        assert_eq!(excerpt_chars("longer", 5), "long…");
        let wide = excerpt_chars(&"é".repeat(10), 4);
        assert_eq!((wide.chars().count(), wide.as_str()), (4, "ééé…"));
        assert_eq!(excerpt_chars("x", 0), "…");
    }
}
