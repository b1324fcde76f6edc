//! A unified line diff, enough to show where an expected value and an
//! actual one part: the edit script is `similar`'s (Myers), the layout ours
//! (no line numbers, `@@` where unchanged lines are cut).

use similar::{ChangeTag, TextDiff};

/// Lines of context kept around each change.
const CONTEXT: usize = 3;

/// `expected` against `actual`, line by line: `-` lines only expected, `+`
/// lines only actual, unchanged runs cut to [`CONTEXT`] lines around each
/// change (`@@` marks a cut). Empty when both are equal.
pub fn unified(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let diff = TextDiff::from_slices(&a, &b);
    let groups = diff.grouped_ops(CONTEXT);
    let mut out = String::new();
    for (index, ops) in groups.iter().enumerate() {
        // Groups are apart by more than twice the context: a cut between
        // any two, and before the first unless it starts the text.
        if index > 0 || ops.first().is_some_and(|op| op.old_range().start > 0) {
            out.push_str("@@\n");
        }
        for change in ops.iter().flat_map(|op| diff.iter_changes(op)) {
            out.push(match change.tag() {
                ChangeTag::Equal => ' ',
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
            });
            out.push_str(change.value());
            out.push('\n');
        }
    }
    let shown_to = groups
        .last()
        .and_then(|ops| ops.last())
        .map_or(0, |op| op.old_range().end);
    if !groups.is_empty() && shown_to < diff.old_slices().len() {
        out.push_str("@@\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a\nb\n", "a\nb\n"), "");
    }

    #[test]
    fn a_changed_line_shows_as_removed_then_added_with_context() {
        let expected = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let actual = "1\n2\n3\n4\n5\nsix\n7\n8\n9\n";
        assert_eq!(
            unified(expected, actual),
            "@@\n 3\n 4\n 5\n-6\n+six\n 7\n 8\n 9\n"
        );
    }

    #[test]
    fn far_apart_changes_are_separate_hunks() {
        let expected: String = (0..20).map(|i| format!("line {i}\n")).collect();
        let actual = expected
            .replace("line 2\n", "two\n")
            .replace("line 17\n", "");
        let diff = unified(&expected, &actual);
        assert_eq!(diff.matches("@@").count(), 1, "one cut between: {diff}");
        assert!(diff.contains("-line 2\n+two\n"), "{diff}");
        assert!(diff.contains("-line 17\n"), "{diff}");
    }
}
