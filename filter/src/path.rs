//! Key paths as fields name them: keys joined by `.`, a literal `.` in a key written `\.` and a
//! literal `\` written `\\` (`data.a\.b` is the key `a.b`, `data.a.b` the key `b` inside `a`).

/// A key as a field path writes it: `\` as `\\`, `.` as `\.` (every other character as it is).
pub fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for ch in key.chars() {
        if ch == '\\' || ch == '.' {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// Keys as a field path writes them: each escaped ([`escape_key`]), joined by `.`.
pub fn join_path<S: AsRef<str>>(keys: &[S]) -> String {
    keys.iter()
        .map(|k| escape_key(k.as_ref()))
        .collect::<Vec<_>>()
        .join(".")
}

/// The keys of a field path (what follows `data.`): split at each `.` that is not escaped, with
/// `\.` read as `.` and `\\` as `\`. The message says what is wrong: an empty key (two dots in a
/// row, a leading or trailing dot), a `\` before anything else, or a `\` at the end.
pub fn split_path(path: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut key = String::new();
    let mut chars = path.chars();
    let empty = || {
        format!(
            "`{path}` has an empty key: keys are joined by `.`; write a `.` inside a key as `\\.`"
        )
    };
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => match chars.next() {
                Some(c @ ('\\' | '.')) => key.push(c),
                Some(c) => {
                    return Err(format!(
                        "`{path}`: `\\{c}` is not an escape; in a key write `\\.` for a `.` and \
                         `\\\\` for a `\\`"
                    ));
                }
                None => {
                    return Err(format!(
                        "`{path}` ends with a lone `\\`; write a `\\` inside a key as `\\\\`"
                    ));
                }
            },
            '.' => {
                if key.is_empty() {
                    return Err(empty());
                }
                keys.push(std::mem::take(&mut key));
            }
            c => key.push(c),
        }
    }
    if key.is_empty() {
        return Err(empty());
    }
    keys.push(key);
    Ok(keys)
}

/// A SQLite JSON path (`$."a"."b"`) for `keys`, for a bound parameter (any key, whatever its
/// characters).
pub fn sqlite_json_path<S: AsRef<str>>(keys: &[S]) -> String {
    let mut path = String::from("$");
    for k in keys {
        path.push_str(".\"");
        // SQLite ends a quoted label at the first `"` and unescapes JSON escapes in it, so a
        // backslash is written `\\` and a quote `\u0022`.
        path.push_str(&k.as_ref().replace('\\', "\\\\").replace('"', "\\u0022"));
        path.push('"');
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for keys in [
            vec!["plan"],
            vec!["a.b"],
            vec!["a\\b"],
            vec!["a\\.b", "c"],
            vec!["profile", "city"],
            vec!["x.", ".y", "\\"],
            vec!["é ü \"q\" $[0]*"],
        ] {
            let written = join_path(&keys);
            assert_eq!(split_path(&written).unwrap(), keys, "{written}");
        }
        assert_eq!(join_path(&["a.b", "c\\d"]), "a\\.b.c\\\\d");
    }

    #[test]
    fn refuses_what_is_not_a_path() {
        for bad in ["", ".", "a.", ".a", "a..b", "a\\", "a\\b", "a\\\\\\"] {
            assert!(split_path(bad).is_err(), "{bad}");
        }
    }
}
