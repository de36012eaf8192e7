//! Cursor pagination as the spec's conventions say: `limit` 1..=100 (default 20), an opaque
//! `cursor` from the previous page, `hasMore`, and `total` only on the first page.
//!
//! A cursor is the URL-safe base64 of the last id of the previous page; lists are ordered newest
//! first by id (ids are time-ordered), so the next page is "ids below the cursor".

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Default page size.
pub const DEFAULT_LIMIT: u32 = 20;
/// Largest page size.
pub const MAX_LIMIT: u32 = 100;

/// A validated page request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRequest {
    /// How many items to return.
    pub limit: u32,
    /// Return items with ids below this one (decoded cursor).
    pub after: Option<String>,
}

/// A malformed cursor.
#[derive(Debug, thiserror::Error)]
#[error(
    "the cursor is not one this API returned; pass the `cursor` of the previous page unchanged"
)]
pub struct CursorError;

impl PageRequest {
    /// Builds a page request; `decode` checks that the cursor names an id of the right kind.
    pub fn new(
        limit: Option<u32>,
        cursor: Option<&str>,
        valid_id: impl Fn(&str) -> bool,
    ) -> Result<PageRequest, CursorError> {
        let after = match cursor.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => {
                let bytes = URL_SAFE_NO_PAD.decode(c).map_err(|_| CursorError)?;
                let id = String::from_utf8(bytes).map_err(|_| CursorError)?;
                if !valid_id(&id) {
                    return Err(CursorError);
                }
                Some(id)
            }
        };
        Ok(PageRequest {
            limit: limit.unwrap_or(DEFAULT_LIMIT),
            after,
        })
    }

    /// True on the first page, where `total` is computed.
    pub fn is_first(&self) -> bool {
        self.after.is_none()
    }
}

/// Encodes the cursor that follows `last_id`.
pub fn encode_cursor(last_id: &str) -> String {
    URL_SAFE_NO_PAD.encode(last_id.as_bytes())
}

/// One page of results.
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Cursor of the next page, when there is one.
    pub next_cursor: Option<String>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Total matching items (first page only; 0 otherwise).
    pub total: i64,
}

impl<T> Page<T> {
    /// Builds a page from up to `limit + 1` fetched rows (the extra one only tells that more
    /// follow).
    pub fn from_rows(
        mut items: Vec<T>,
        request: &PageRequest,
        total: i64,
        id_of: impl Fn(&T) -> &str,
    ) -> Page<T> {
        let has_more = items.len() > request.limit as usize;
        items.truncate(request.limit as usize);
        let next_cursor = if has_more {
            items.last().map(|i| encode_cursor(id_of(i)))
        } else {
            None
        };
        Page {
            items,
            next_cursor,
            has_more,
            total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trip_and_rejects() {
        let c = encode_cursor("cnt_abc");
        let p = PageRequest::new(Some(5), Some(&c), |s| s.starts_with("cnt_")).unwrap();
        assert_eq!(p.after.as_deref(), Some("cnt_abc"));
        assert!(PageRequest::new(None, Some("!!!"), |_| true).is_err());
        assert!(
            PageRequest::new(None, Some(&encode_cursor("evt_1")), |s| s
                .starts_with("cnt_"))
            .is_err()
        );
        assert!(PageRequest::new(None, None, |_| true).unwrap().is_first());
    }
}
