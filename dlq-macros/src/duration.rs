//! Durations as `#[dead_letter]` writes them, read by `humantime::parse_duration`: `"250ms"`,
//! `"30s"`, `"5m"`, `"1h 30m"`, `"1h30m"`, `"7d"`.

use humantime::DurationError;

/// A duration in whole milliseconds.
pub(crate) type Millis = u64;

/// The units [`display`] writes, smallest first.
const UNITS: [(&str, Millis); 5] = [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)];

/// Parses a duration as `humantime` does (one or more numbers with units, added up), in whole
/// milliseconds.
///
/// # Errors
/// Why the text is not a duration, in a few words for a compile error.
pub(crate) fn parse(text: &str) -> Result<Millis, String> {
    let duration = humantime::parse_duration(text).map_err(|err| why(text, &err))?;
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err("it is not a whole number of milliseconds".to_owned());
    }
    Millis::try_from(duration.as_millis()).map_err(|_| "the duration is too large".to_owned())
}

/// `humantime`'s error in the words of the attribute's other messages.
fn why(text: &str, err: &DurationError) -> String {
    // The offsets are byte offsets into `text`, on character boundaries.
    let at = |offset: usize| text.get(offset..).unwrap_or_default();
    match err {
        DurationError::Empty => "it is empty".to_owned(),
        DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!("the unit is missing, like \"{value}s\" or \"{value}ms\"")
        }
        DurationError::UnknownUnit { unit, .. } => format!("unknown unit {unit:?}"),
        DurationError::NumberExpected(offset) => format!("expected a number at {:?}", at(*offset)),
        DurationError::InvalidCharacter(offset) => {
            let c = at(*offset).chars().next().unwrap_or('?');
            format!("unexpected {c:?}")
        }
        DurationError::NumberOverflow => "the number is too large".to_owned(),
    }
}

/// The duration in the largest unit that writes it whole, for messages.
pub(crate) fn display(millis: Millis) -> String {
    let (unit, scale) =
        UNITS.iter().rev().find(|(_, scale)| millis.is_multiple_of(*scale)).copied().unwrap_or(UNITS[0]);
    format!("{}{unit}", millis / scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse("250ms"), Ok(250));
        assert_eq!(parse("30s"), Ok(30_000));
        assert_eq!(parse("5m"), Ok(300_000));
        assert_eq!(parse("1h30m"), Ok(5_400_000));
        assert_eq!(parse("1h 30m"), Ok(5_400_000));
        assert_eq!(parse("1.5h"), Ok(5_400_000));
        assert_eq!(parse("5 minutes"), Ok(300_000));
        assert_eq!(parse("7d"), Ok(604_800_000));
        assert_eq!(parse("2000us"), Ok(2));
        assert_eq!(parse("0s"), Ok(0));
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(parse(""), Err("it is empty".to_owned()));
        assert_eq!(parse("30"), Err("the unit is missing, like \"30s\" or \"30ms\"".to_owned()));
        assert_eq!(parse("5 minutos"), Err("unknown unit \"minutos\"".to_owned()));
        assert_eq!(parse("s"), Err("expected a number at \"s\"".to_owned()));
        assert_eq!(parse("-5s"), Err("expected a number at \"-5s\"".to_owned()));
        assert_eq!(parse("1h, 30m"), Err("unexpected ','".to_owned()));
        assert_eq!(parse("1500us"), Err("it is not a whole number of milliseconds".to_owned()));
        assert_eq!(parse("99999999999999999999s"), Err("the number is too large".to_owned()));
    }

    #[test]
    fn displays_in_the_largest_whole_unit() {
        assert_eq!(display(60_000), "1m");
        assert_eq!(display(90_000), "90s");
        assert_eq!(display(1_500), "1500ms");
        assert_eq!(display(0), "0d");
    }
}
