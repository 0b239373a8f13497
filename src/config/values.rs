//! Whole-number settings checked as they are read. A key's type carries its range: a value
//! outside it is refused while the file (or an `ICEPACK_*` variable) is parsed, with the range
//! and what was given; figment adds the key and where it came from. Past parsing a value is an
//! unsigned number in range, so the code that uses it needs no range check and no sign cast.

use std::fmt;
use std::time::Duration;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A whole number from `LO` to `HI`, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Int<const LO: u64, const HI: u64>(u64);

/// Sizes in MiB (a file, a table's pending bytes), from 1 MiB; a threshold set out of reach
/// (10⁹ MiB, about an exbibyte) turns it off.
pub type Mebibytes = Int<1, 1_000_000_000>;
/// A number of files that makes a table due or a run worth it (10⁹: out of reach).
pub type FileCount = Int<1, 1_000_000_000>;
/// Minutes a table or a partition may wait (0: off), up to a year.
pub type WaitMinutes = Int<0, 525_600>;
/// Engine seconds and settle windows (0: off), up to a day.
pub type DaySeconds = Int<0, 86_400>;
/// A share in percent (0: off), up to a thousandfold.
pub type Percent = Int<0, 100_000>;
/// Hours between maintenance runs or of a file's age (0: off), up to ten years.
pub type Hours = Int<0, 87_600>;
/// Hours that must be set when the key is (snapshot age, reconcile period).
pub type PositiveHours = Int<1, 87_600>;
/// A count past which maintenance runs (manifests, delete files; 0: off).
pub type Threshold = Int<0, 1_000_000_000>;

impl<const LO: u64, const HI: u64> Int<LO, HI> {
    /// A value known to be in range (the defaults); one outside is a bug and panics (at compile
    /// time in a `const`).
    pub const fn new(value: u64) -> Self {
        assert!(
            value >= LO && value <= HI,
            "a setting's value out of its range"
        );
        Int(value)
    }

    pub const fn get(self) -> u64 {
        self.0
    }

    /// `None` at 0: the keys where 0 turns a feature off.
    pub fn nonzero(self) -> Option<u64> {
        (self.0 > 0).then_some(self.0)
    }

    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    pub fn as_u32(self) -> u32 {
        u32::try_from(self.0).unwrap_or(u32::MAX)
    }

    /// For the SQS API's `i32` parameters (every SQS key's range fits).
    pub fn as_i32(self) -> i32 {
        i32::try_from(self.0).unwrap_or(i32::MAX)
    }

    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// The value as a number of seconds.
    pub fn seconds(self) -> Duration {
        Duration::from_secs(self.0)
    }

    /// The value in `unit_millis` units as milliseconds (the durable state counts in `i64`
    /// milliseconds); every range here keeps it far below overflow.
    pub fn millis(self, unit_millis: u64) -> i64 {
        i64::try_from(self.0.saturating_mul(unit_millis)).unwrap_or(i64::MAX)
    }
}

/// Compared with a plain number (tests, and code that reads a value once).
impl<const LO: u64, const HI: u64> PartialEq<u64> for Int<LO, HI> {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

/// The lowest value: 0 (off) for the keys that `#[serde(default)]` leaves out.
impl<const LO: u64, const HI: u64> Default for Int<LO, HI> {
    fn default() -> Self {
        Int(LO)
    }
}

impl<const LO: u64, const HI: u64> fmt::Display for Int<LO, HI> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<const LO: u64, const HI: u64> Serialize for Int<LO, HI> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.0)
    }
}

impl<'de, const LO: u64, const HI: u64> Deserialize<'de> for Int<LO, HI> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_i64(IntVisitor::<LO, HI>)
    }
}

struct IntVisitor<const LO: u64, const HI: u64>;

impl<const LO: u64, const HI: u64> de::Visitor<'_> for IntVisitor<LO, HI> {
    type Value = Int<LO, HI>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "a whole number from {LO} to {HI}")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
        if (LO..=HI).contains(&value) {
            Ok(Int(value))
        } else {
            Err(E::custom(out_of_range(LO, HI, value)))
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
        match u64::try_from(value) {
            Ok(unsigned) => self.visit_u64(unsigned),
            Err(_) => Err(E::custom(out_of_range(LO, HI, value))),
        }
    }
}

fn out_of_range(low: u64, high: u64, value: impl fmt::Display) -> String {
    match low {
        0 => format!("must be 0 to {high}, got {value}"),
        1 => format!("must be greater than 0 and at most {high}, got {value}"),
        _ => format!("must be between {low} and {high}, got {value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct Keys {
        count: Int<1, 10>,
        off: Option<Int<0, 5>>,
    }

    /// As the configuration is read: through figment, which names the key.
    fn parse(text: &str) -> Result<Keys, String> {
        use figment::providers::{Format, Toml};
        figment::Figment::from(Toml::string(text))
            .extract::<Keys>()
            .map_err(|error| format!("{}: {}", error.path.join("."), error.kind))
    }

    #[test]
    fn values_in_range_are_read_and_written_as_numbers() {
        let keys = parse("count = 10\noff = 0\n").unwrap();
        assert_eq!(keys.count.get(), 10);
        assert_eq!(keys.off.and_then(Int::nonzero), None);
        assert_eq!(
            serde_json::to_string(&keys).unwrap(),
            r#"{"count":10,"off":0}"#
        );
    }

    #[test]
    fn values_out_of_range_are_refused_with_the_range() {
        assert_eq!(
            parse("count = 0\n").unwrap_err(),
            "count: must be greater than 0 and at most 10, got 0"
        );
        assert_eq!(
            parse("count = 11\n").unwrap_err(),
            "count: must be greater than 0 and at most 10, got 11"
        );
        assert_eq!(
            parse("count = 1\noff = -1\n").unwrap_err(),
            "off: must be 0 to 5, got -1"
        );
        let typed = parse("count = \"3\"\n").unwrap_err();
        assert!(
            typed.contains("expected a whole number from 1 to 10"),
            "{typed}"
        );
        assert!(parse("count = 2.5\n").unwrap_err().contains("invalid type"));
    }

    #[test]
    fn conversions_saturate_instead_of_wrapping() {
        let big = Int::<0, { u64::MAX }>::new(u64::MAX);
        assert_eq!(big.as_i64(), i64::MAX);
        assert_eq!(big.as_i32(), i32::MAX);
        assert_eq!(big.millis(1_000), i64::MAX);
        assert_eq!(Int::<0, 100>::new(90).millis(60_000), 5_400_000);
        assert_eq!(Int::<0, 100>::new(90).seconds(), Duration::from_secs(90));
    }
}
