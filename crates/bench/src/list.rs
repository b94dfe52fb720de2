//! Parsing of sweep lists given on the command line (`--clients 1,8,64`,
//! `--rows 10,100,1000`, `--compare acid,salt`).

/// The items of a comma-separated list, trimmed; an empty item is an error
/// naming the option (`what`) and an example of a good list.
fn items<'a>(s: &'a str, what: &str, example: &str) -> Result<Vec<&'a str>, String> {
    s.split(',')
        .map(|item| {
            let t = item.trim();
            if t.is_empty() {
                Err(format!(
                    "{what}: empty item in `{s}` (expected a comma-separated list like {example})"
                ))
            } else {
                Ok(t)
            }
        })
        .collect()
}

/// Parses a comma-separated list of positive integers, in the order given.
/// `what` names the option in error messages. Accepts `_` as a digit
/// separator (`1_000_000`) and surrounding whitespace; rejects empty items,
/// zero and values above `max`.
pub fn parse_counts(s: &str, what: &str, max: u64) -> Result<Vec<u64>, String> {
    items(s, what, "1,8,64")?
        .into_iter()
        .map(|t| {
            let v: u64 = t
                .replace('_', "")
                .parse()
                .map_err(|_| format!("{what}: `{t}` is not a positive integer"))?;
            if v == 0 {
                return Err(format!("{what}: values must be at least 1"));
            }
            if v > max {
                return Err(format!("{what}: {v} is above the limit of {max}"));
            }
            Ok(v)
        })
        .collect()
}

/// Parses a comma-separated list of percentages (0 to 100), in the order
/// given (`--read-only-percent 0,50,95`).
pub fn parse_percents(s: &str, what: &str) -> Result<Vec<u32>, String> {
    items(s, what, "0,50,95")?
        .into_iter()
        .map(|t| {
            let v: u32 = t
                .parse()
                .map_err(|_| format!("{what}: `{t}` is not a percentage (0 to 100)"))?;
            if v > 100 {
                return Err(format!("{what}: {v} is above 100"));
            }
            Ok(v)
        })
        .collect()
}

/// Parses a comma-separated list of ratios (0 to 1), in the order given
/// (`--read-ratio 0,0.25,0.5`).
pub fn parse_ratios(s: &str, what: &str) -> Result<Vec<f64>, String> {
    items(s, what, "0,0.5,1")?
        .into_iter()
        .map(|t| {
            let v: f64 = t
                .parse()
                .map_err(|_| format!("{what}: `{t}` is not a ratio (0 to 1)"))?;
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{what}: {v} is not between 0 and 1"));
            }
            Ok(v)
        })
        .collect()
}

/// Parses a comma-separated list of names (protocols), trimmed, non-empty.
pub fn parse_names(s: &str, what: &str) -> Result<Vec<String>, String> {
    Ok(items(s, what, "acid,salt")?
        .into_iter()
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_parse_in_order_and_stay_between_0_and_1() {
        assert_eq!(
            parse_ratios("0, 0.25,1", "--read-ratio"),
            Ok(vec![0.0, 0.25, 1.0])
        );
        assert!(parse_ratios("1.5", "--read-ratio").is_err());
        assert!(parse_ratios("-0.1", "--read-ratio").is_err());
        assert!(parse_ratios("0,,1", "--read-ratio").is_err());
        assert!(parse_ratios("half", "--read-ratio").is_err());
        assert!(parse_ratios("NaN", "--read-ratio").is_err());
    }

    #[test]
    fn counts_parse_in_order() {
        assert_eq!(parse_counts("1,8,64", "--clients", 100), Ok(vec![1, 8, 64]));
        assert_eq!(
            parse_counts(" 10 , 1_000 ", "--rows", 10_000),
            Ok(vec![10, 1000])
        );
        assert_eq!(parse_counts("5", "--rows", 10), Ok(vec![5]));
    }

    #[test]
    fn counts_reject_bad_items() {
        assert!(parse_counts("", "--clients", 10).is_err());
        assert!(parse_counts("1,,2", "--clients", 10).is_err());
        assert!(parse_counts("0", "--clients", 10).is_err());
        assert!(parse_counts("-3", "--clients", 10).is_err());
        assert!(parse_counts("abc", "--clients", 10).is_err());
        let e = parse_counts("11", "--clients", 10).unwrap_err();
        assert!(e.contains("limit"), "{e}");
    }

    #[test]
    fn percents_parse_from_zero_to_a_hundred() {
        assert_eq!(
            parse_percents("0, 50,100", "--read-only-percent"),
            Ok(vec![0, 50, 100])
        );
        assert!(parse_percents("101", "--read-only-percent").is_err());
        assert!(parse_percents("5,", "--read-only-percent").is_err());
        assert!(parse_percents("-1", "--read-only-percent").is_err());
    }

    #[test]
    fn names_parse() {
        assert_eq!(
            parse_names("acid, salt", "--compare"),
            Ok(vec!["acid".to_string(), "salt".to_string()])
        );
        assert!(parse_names("acid,", "--compare").is_err());
    }
}
