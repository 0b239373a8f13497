//! S3 object keys in event notifications are URL-encoded: `+` is a space, `%XX` a byte.

use percent_encoding::percent_decode_str;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("object key is empty")]
    Empty,
    #[error("object key is not valid UTF-8 once decoded")]
    NotUtf8,
    #[error("object key is longer than 1024 bytes")]
    TooLong,
}

/// S3 object keys are at most 1024 bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;

/// Decodes a key as S3 writes it into notifications: `+` becomes a space first, then `%XX`
/// sequences are decoded (`%2B` → `+`, `%3D` → `=`, `%2F` → `/`).
pub fn decode_event_key(encoded: &str) -> Result<String, KeyError> {
    if encoded.is_empty() {
        return Err(KeyError::Empty);
    }
    let spaced = encoded.replace('+', " ");
    let decoded = percent_decode_str(&spaced)
        .decode_utf8()
        .map_err(|_| KeyError::NotUtf8)?
        .into_owned();
    check_key(decoded)
}

/// Checks a key that arrives unencoded (EventBridge writes keys as they are).
pub fn check_key(key: String) -> Result<String, KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLong);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plus_is_a_space_and_percent_sequences_decode() {
        assert_eq!(
            decode_event_key("dt%3D2024/a+b%2Bc.parquet").unwrap(),
            "dt=2024/a b+c.parquet"
        );
        assert_eq!(decode_event_key("a%2Fb%2Fc").unwrap(), "a/b/c");
        assert_eq!(
            decode_event_key("plain/key.parquet").unwrap(),
            "plain/key.parquet"
        );
    }

    #[test]
    fn bad_keys_are_errors() {
        assert_eq!(decode_event_key(""), Err(KeyError::Empty));
        assert_eq!(decode_event_key("%FF%FE"), Err(KeyError::NotUtf8));
        assert_eq!(decode_event_key(&"a".repeat(1025)), Err(KeyError::TooLong));
    }

    #[test]
    fn a_lone_percent_is_kept() {
        assert_eq!(decode_event_key("100%").unwrap(), "100%");
    }

    proptest! {
        #[test]
        fn decoding_never_panics(encoded in "\\PC*") {
            let _ = decode_event_key(&encoded);
        }

        #[test]
        fn encoding_then_decoding_is_identity(key in "[a-zA-Z0-9 =+/%._-]{1,200}") {
            let encoded = percent_encoding::utf8_percent_encode(&key, percent_encoding::NON_ALPHANUMERIC).to_string();
            prop_assert_eq!(decode_event_key(&encoded).unwrap(), key);
        }
    }
}
