//! A small unified line diff (longest common subsequence), enough to show
//! where an expected value and an actual one part. Values of a case are a
//! few hundred lines at most, so the quadratic table is cheap.

/// Lines of context kept around each change.
const CONTEXT: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// `expected` against `actual`, line by line: `-` lines only expected, `+`
/// lines only actual, unchanged runs cut to [`CONTEXT`] lines around each
/// change (`@@` marks a cut). Empty when both are equal.
pub fn unified(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let ops = script(&a, &b);
    if ops.iter().all(|(op, _)| *op == Op::Same) {
        return String::new();
    }
    // Keep a line when a change is within CONTEXT lines of it.
    let changed: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| *op != Op::Same)
        .map(|(i, _)| i)
        .collect();
    let near = |i: usize| changed.iter().any(|&c| c.abs_diff(i) <= CONTEXT);
    let mut out = String::new();
    let mut skipped = false;
    for (i, (op, line)) in ops.iter().enumerate() {
        if !near(i) {
            skipped = true;
            continue;
        }
        if skipped {
            out.push_str("@@\n");
        }
        skipped = false;
        let sign = match op {
            Op::Same => ' ',
            Op::Removed => '-',
            Op::Added => '+',
        };
        out.push(sign);
        out.push_str(line);
        out.push('\n');
    }
    if skipped {
        out.push_str("@@\n");
    }
    out
}

/// The edit script from `a` to `b` through their longest common
/// subsequence.
fn script<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: length of the LCS of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::with_capacity(n + m);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((Op::Same, a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push((Op::Removed, a[i]));
            i += 1;
        } else {
            ops.push((Op::Added, b[j]));
            j += 1;
        }
    }
    ops
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
