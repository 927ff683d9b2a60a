//! Page cursors: opaque to the agent, checked on the way back in.
//!
//! A cursor names its operation, a position and a fingerprint of the request that made it,
//! so a cursor from another query or filter is `memory_cursor_invalid`, not a wrong page.
//! List cursors are keyset positions (the last id shown), stable under concurrent writes.
//! Recall cursors are offsets into the ranking, since bm25 scores move whenever the corpus
//! does and no keyset over them would be stable either.

use crate::error::InputError;

/// Which operation a cursor belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An offset into a recall's ranking.
    Recall,
    /// The id below which a list page continues.
    List,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Self::Recall => "r1",
            Self::List => "l1",
        }
    }
}

/// FNV-1a over the request's parts, separated so that `["ab"]` and `["a", "b"]` differ.
pub(crate) fn fingerprint<'a>(parts: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0x1f]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// The cursor for `position` of a request with this fingerprint.
pub(crate) fn encode(kind: Kind, position: u64, fingerprint: u64) -> String {
    format!("{}.{position}.{fingerprint:016x}", kind.tag())
}

/// The position a cursor names, if this kind of request with this fingerprint made it.
pub(crate) fn decode(kind: Kind, cursor: &str, fingerprint: u64) -> Result<u64, InputError> {
    let invalid = || InputError::CursorInvalid {
        cursor: cursor.chars().take(64).collect(),
    };
    let mut parts = cursor.split('.');
    let (Some(tag), Some(position), Some(print), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid());
    };
    if tag != kind.tag() || print != format!("{fingerprint:016x}") {
        return Err(invalid());
    }
    // Only the canonical decimal form, so one position has one cursor.
    let position: u64 = position.parse().map_err(|_| invalid())?;
    if encode(kind, position, fingerprint) != cursor {
        return Err(invalid());
    }
    Ok(position)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_strangers() {
        let print = fingerprint(["cargo", "build"]);
        let cursor = encode(Kind::Recall, 20, print);
        assert_eq!(decode(Kind::Recall, &cursor, print), Ok(20));
        let other = fingerprint(["cargo", "test"]);
        for (kind, cursor, print) in [
            (Kind::List, cursor.clone(), print),
            (Kind::Recall, cursor.clone(), other),
            (
                Kind::Recall,
                "r1.+20.".to_string() + &format!("{print:016x}"),
                print,
            ),
            (Kind::Recall, "r1.20".to_string(), print),
            (Kind::Recall, format!("{cursor}.1"), print),
            (Kind::Recall, String::new(), print),
            (Kind::Recall, "r1.-1.x".to_string(), print),
        ] {
            let refused = decode(kind, &cursor, print).unwrap_err();
            assert_eq!(refused.code(), "memory_cursor_invalid", "{cursor:?}");
        }
    }

    #[test]
    fn fingerprint_separates_parts() {
        assert_ne!(fingerprint(["ab"]), fingerprint(["a", "b"]));
        assert_eq!(fingerprint(["a", "b"]), fingerprint(["a", "b"]));
    }
}
