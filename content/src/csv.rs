//! Reading a contacts CSV file: the header rules, typed cells and one contact per row. No I/O;
//! the import job streams records through [`row`] and writes them in chunks.
//!
//! Rows: a header row is required and matched case-insensitively; `email` is required;
//! `subscribed` takes true/false/1/0/yes/no; every other column becomes a `data` key whose value
//! is typed by the custom data rules (canonical numbers become numbers, true/false booleans,
//! empty cells are ignored). At most [`MAX_KEYS`] data columns.

use serde_json::{Map, Number, Value};

use crate::custom_data::{DataPatch, MAX_KEYS};
use crate::email::EmailAddress;

/// Why a file is not an importable CSV; shown to the caller at upload time.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsvError {
    /// Not UTF-8 text.
    #[error("the file is not a UTF-8 CSV text file")]
    NotText,
    /// No header row.
    #[error("the file is empty; it needs a header row with an `email` column")]
    Empty,
    /// No email column.
    #[error("the header row has no `email` column (found: {0})")]
    NoEmailColumn(String),
    /// The header could not be parsed.
    #[error("the header row is not valid CSV: {0}")]
    Malformed(String),
    /// More data columns than a contact may have keys.
    #[error("the header row has {0} data columns; at most {max} are accepted", max = MAX_KEYS)]
    TooManyColumns(usize),
}

/// The columns of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Columns {
    email: usize,
    subscribed: Option<usize>,
    data: Vec<(usize, String)>,
}

/// The file without its UTF-8 byte-order mark.
pub fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

/// Checks a file and reads its header; used at upload time and by the job.
pub fn columns(bytes: &[u8]) -> Result<Columns, CsvError> {
    let bytes = strip_bom(bytes);
    let text = std::str::from_utf8(bytes).map_err(|_| CsvError::NotText)?;
    if text.contains('\0') {
        return Err(CsvError::NotText);
    }
    if text.trim().is_empty() {
        return Err(CsvError::Empty);
    }
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| CsvError::Malformed(e.to_string()))?
        .clone();
    let mut email = None;
    let mut subscribed = None;
    let mut data = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        let name = h.trim();
        match name.to_ascii_lowercase().as_str() {
            "" => {}
            "email" => email = Some(i),
            "subscribed" => subscribed = Some(i),
            _ => data.push((i, name.to_string())),
        }
    }
    let email = email.ok_or_else(|| {
        CsvError::NoEmailColumn(headers.iter().map(str::trim).collect::<Vec<_>>().join(", "))
    })?;
    if data.len() > MAX_KEYS {
        return Err(CsvError::TooManyColumns(data.len()));
    }
    Ok(Columns {
        email,
        subscribed,
        data,
    })
}

/// A cell typed by the custom data rules.
fn typed(cell: &str) -> Value {
    let t = cell.trim();
    match t.to_ascii_lowercase().as_str() {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let canonical_int = t.parse::<i64>().ok().filter(|n| n.to_string() == t);
    if let Some(n) = canonical_int {
        return Value::Number(n.into());
    }
    let leading_zero = |s: &str| s.starts_with('0') && s.len() > 1 && !s.starts_with("0.");
    let unsigned = t.strip_prefix('-').unwrap_or(t);
    let looks_decimal = !unsigned.starts_with(['+', '.'])
        && !unsigned.ends_with('.')
        && !leading_zero(unsigned)
        && unsigned.contains('.')
        && unsigned.chars().all(|c| c.is_ascii_digit() || c == '.');
    if looks_decimal && let Some(n) = t.parse::<f64>().ok().and_then(Number::from_f64) {
        return Value::Number(n);
    }
    Value::String(cell.to_string())
}

fn parse_subscribed(cell: &str) -> Result<Option<bool>, String> {
    match cell.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "true" | "1" | "yes" => Ok(Some(true)),
        "false" | "0" | "no" => Ok(Some(false)),
        other => Err(format!(
            "`subscribed` must be true/false/1/0/yes/no, not `{other}`"
        )),
    }
}

/// One row, read.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The contact's address.
    pub email: EmailAddress,
    /// The subscription state the row asks for, if any.
    pub subscribed: Option<bool>,
    /// The row's data cells, by the custom data rules.
    pub data: DataPatch,
}

/// Reads one record; a bad row is `(its email cell when there is one, what is wrong)`.
pub fn row(cols: &Columns, rec: &csv::StringRecord) -> Result<Row, (Option<String>, String)> {
    let raw_email = rec.get(cols.email).unwrap_or("").trim().to_string();
    if raw_email.is_empty() {
        return Err((None, "the email cell is empty".into()));
    }
    let email =
        EmailAddress::parse(&raw_email).map_err(|e| (Some(raw_email.clone()), e.to_string()))?;
    let subscribed = match cols.subscribed {
        Some(i) => {
            parse_subscribed(rec.get(i).unwrap_or("")).map_err(|e| (Some(raw_email.clone()), e))?
        }
        None => None,
    };
    let mut data = Map::new();
    for (i, key) in &cols.data {
        if let Some(cell) = rec.get(*i) {
            data.insert(
                key.clone(),
                if cell.is_empty() {
                    Value::String(String::new())
                } else {
                    typed(cell)
                },
            );
        }
    }
    let data = DataPatch::parse(data).map_err(|e| (Some(raw_email.clone()), e.to_string()))?;
    Ok(Row {
        email,
        subscribed,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_rules() {
        assert!(matches!(
            columns(b"name,plan\nann,pro"),
            Err(CsvError::NoEmailColumn(_))
        ));
        assert_eq!(columns(b""), Err(CsvError::Empty));
        assert_eq!(
            columns(b"\x89PNG\r\n\x1a\n\x00\x00"),
            Err(CsvError::NotText)
        );
        let c = columns(b"\xEF\xBB\xBFName, EMAIL ,Subscribed,plan\n").unwrap();
        assert_eq!(c.email, 1);
        assert_eq!(c.subscribed, Some(2));
        assert_eq!(
            c.data,
            vec![(0, "Name".to_string()), (3, "plan".to_string())]
        );
    }

    #[test]
    fn cells_are_typed() {
        assert_eq!(typed("42"), json!(42));
        assert_eq!(typed("-3"), json!(-3));
        assert_eq!(typed("1.5"), json!(1.5));
        assert_eq!(typed("007"), json!("007"));
        assert_eq!(typed("+1"), json!("+1"));
        assert_eq!(typed("TRUE"), json!(true));
        assert_eq!(typed("2024-05-01"), json!("2024-05-01"));
        assert_eq!(typed("1e5"), json!("1e5"));
        assert_eq!(parse_subscribed("Yes"), Ok(Some(true)));
        assert_eq!(parse_subscribed("0"), Ok(Some(false)));
        assert!(parse_subscribed("maybe").is_err());
    }
}
