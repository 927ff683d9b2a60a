//! Long strings leave records for the blob store. A string longer than
//! [`INLINE_STRING_BYTES_MAX`] becomes `{"$blob": "<blake3 hex>"}`; object keys that start with
//! `$` get one more `$` so that no value of the agent's can pass for a blob reference.

use serde_json::{Map, Value};

/// Strings up to this many bytes stay inline in records.
pub(crate) const INLINE_STRING_BYTES_MAX: usize = 1024;

const BLOB_KEY: &str = "$blob";

/// The blake3 of some bytes, as 64 hex digits.
pub(crate) fn hash_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Move long strings out of `value` into `out` (hash, bytes).
pub(crate) fn externalize(value: Value, out: &mut Vec<(String, Vec<u8>)>) -> Value {
    match value {
        Value::String(s) if s.len() > INLINE_STRING_BYTES_MAX => {
            let hash = hash_hex(s.as_bytes());
            out.push((hash.clone(), s.into_bytes()));
            let mut reference = Map::new();
            reference.insert(BLOB_KEY.to_owned(), Value::String(hash));
            Value::Object(reference)
        }
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| externalize(v, out)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = if k.starts_with('$') {
                        format!("${k}")
                    } else {
                        k
                    };
                    (key, externalize(v, out))
                })
                .collect(),
        ),
        other => other,
    }
}

/// Put blobs back. `fetch` returns a blob's bytes by hash; a missing or non-UTF-8 blob is an
/// error naming the hash.
pub(crate) fn internalize(
    value: Value,
    fetch: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<Value, String> {
    match value {
        Value::Array(items) => items
            .into_iter()
            .map(|v| internalize(v, fetch))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(hash)) = map.get(BLOB_KEY)
            {
                let bytes = fetch(hash).ok_or_else(|| format!("blob {hash} is missing"))?;
                return String::from_utf8(bytes)
                    .map(Value::String)
                    .map_err(|_| format!("blob {hash} is not UTF-8"));
            }
            map.into_iter()
                .map(|(k, v)| {
                    let key = match k.strip_prefix('$') {
                        Some(rest) => rest.to_owned(),
                        None => k,
                    };
                    internalize(v, fetch).map(|v| (key, v))
                })
                .collect::<Result<Map<_, _>, _>>()
                .map(Value::Object)
        }
        other => Ok(other),
    }
}

/// Every blob hash a stored value refers to.
pub(crate) fn references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| references(v, out)),
        Value::Object(map) => {
            if map.len() == 1
                && let Some(Value::String(hash)) = map.get(BLOB_KEY)
            {
                out.push(hash.clone());
                return;
            }
            map.values().for_each(|v| references(v, out));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    #[test]
    fn long_strings_round_trip_and_dollar_keys_cannot_forge_a_blob() {
        let long = "x".repeat(INLINE_STRING_BYTES_MAX + 1);
        let original =
            json!({"a": long, "b": ["short", long], "$blob": "forged", "c": {"$blob": "also"}});
        let mut blobs = Vec::new();
        let stored = externalize(original.clone(), &mut blobs);
        assert_eq!(
            blobs.len(),
            2,
            "both copies are pushed; the store keeps one"
        );
        assert_eq!(blobs[0].0, blobs[1].0);
        let mut refs = Vec::new();
        references(&stored, &mut refs);
        assert_eq!(refs.len(), 2, "the forged keys are escaped, not references");
        let store: HashMap<_, _> = blobs.into_iter().collect();
        let back = internalize(stored, &|h| store.get(h).cloned()).unwrap();
        assert_eq!(back, original);
    }
}
