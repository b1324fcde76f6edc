//! YAML text of fixture values that every SDK's parser reads back the same:
//! serde_yaml's output with date-like strings quoted, since YAML 1.1
//! parsers (PyYAML, js-yaml) would read `2026-11-29T18:00:00Z` as a date.

/// `value` as YAML, date-like plain strings single-quoted.
pub fn to_string(value: &serde_yaml::Value) -> String {
    let plain = serde_yaml::to_string(value).expect("YAML values serialize");
    let mut quoted = String::with_capacity(plain.len());
    // Lines of a block scalar (`|`, `>`) are text, never quoted.
    let mut block: Option<usize> = None;
    for line in plain.lines() {
        let indent = line.len() - line.trim_start().len();
        if block.is_some_and(|b| line.trim().is_empty() || indent > b) {
            quoted.push_str(line);
        } else {
            block = None;
            let line = quote_date(line);
            let value = line
                .rsplit_once(": ")
                .map_or(line.trim_start_matches([' ', '-']), |(_, v)| v);
            if value.starts_with(['|', '>']) {
                block = Some(indent);
            }
            quoted.push_str(&line);
        }
        quoted.push('\n');
    }
    // Should anything still read back otherwise, keep serde_yaml's text.
    match serde_yaml::from_str::<serde_yaml::Value>(&quoted) {
        Ok(back) if back == *value => quoted,
        _ => plain,
    }
}

fn quote_date(line: &str) -> String {
    let value_at = if let Some(i) = line.find(": ") {
        i + 2
    } else {
        let indent = line.len() - line.trim_start_matches([' ', '-']).len();
        if indent == 0 || !line.trim_start().starts_with("- ") {
            return line.to_string();
        }
        indent
    };
    let (head, value) = line.split_at(value_at);
    if date_like(value) {
        format!("{head}'{value}'")
    } else {
        line.to_string()
    }
}

fn date_like(value: &str) -> bool {
    let b = value.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() >= 10
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b.len() == 10 || matches!(b[10], b'T' | b't' | b' '))
        && !value.contains(['\'', '"', '#'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_quoted_other_strings_are_not() {
        let value: serde_yaml::Value = serde_yaml::from_str(
            "{at: '2026-11-29T18:00:00Z', list: ['2026-01-01', plain], name: web, text: \"a\\nb: 2026-01-01\\n\"}",
        )
        .unwrap();
        let text = to_string(&value);
        assert!(text.contains("at: '2026-11-29T18:00:00Z'\n"), "{text}");
        assert!(text.contains("- '2026-01-01'\n"), "{text}");
        assert!(text.contains("name: web\n"), "{text}");
        assert_eq!(
            serde_yaml::from_str::<serde_yaml::Value>(&text).unwrap(),
            value
        );
    }
}
