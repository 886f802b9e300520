//! Durations as `#[dead_letter]` writes them: `"250ms"`, `"30s"`, `"5m"`, `"1h30m"`, `"7d"`.

/// A duration in whole milliseconds.
pub(crate) type Millis = u64;

/// The units, longest name first so that `ms` is not read as `m`.
const UNITS: [(&str, Millis); 5] = [("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)];

/// Parses one or more `<whole number><unit>` parts, added up.
///
/// # Errors
/// Why the text is not a duration, in a few words for a compile error.
pub(crate) fn parse(text: &str) -> Result<Millis, &'static str> {
    if text.is_empty() {
        return Err("it is empty");
    }
    let mut rest = text;
    let mut total: Millis = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err("expected a number");
        }
        let number: Millis = rest[..digits].parse().map_err(|_| "the number is too large")?;
        rest = &rest[digits..];
        let Some(&(unit, scale)) = UNITS.iter().find(|(unit, _)| rest.starts_with(unit)) else {
            return Err(if rest.is_empty() { "the unit is missing" } else { "unknown unit" });
        };
        rest = &rest[unit.len()..];
        total =
            number.checked_mul(scale).and_then(|part| total.checked_add(part)).ok_or("the duration is too large")?;
    }
    Ok(total)
}

/// The duration in the largest unit that writes it whole, for messages.
pub(crate) fn display(millis: Millis) -> String {
    let (unit, scale) = UNITS.iter().rev().find(|(_, scale)| millis % scale == 0).copied().unwrap_or(UNITS[0]);
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
        assert_eq!(parse("7d"), Ok(604_800_000));
        assert_eq!(parse("0s"), Ok(0));
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(parse(""), Err("it is empty"));
        assert_eq!(parse("30"), Err("the unit is missing"));
        assert_eq!(parse("5 minutes"), Err("unknown unit"));
        assert_eq!(parse("s"), Err("expected a number"));
        assert_eq!(parse("1.5h"), Err("unknown unit"));
        assert_eq!(parse("99999999999999999999s"), Err("the number is too large"));
        assert_eq!(parse("999999999999999d"), Err("the duration is too large"));
    }

    #[test]
    fn displays_in_the_largest_whole_unit() {
        assert_eq!(display(60_000), "1m");
        assert_eq!(display(90_000), "90s");
        assert_eq!(display(1_500), "1500ms");
        assert_eq!(display(0), "0d");
    }
}
