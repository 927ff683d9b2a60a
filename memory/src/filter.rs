//! Checking scopes and tags, and turning a filter into SQL over `memories m`.

use rusqlite::types::Value;

use crate::error::InputError;
use crate::limits::Limits;
use crate::model::Scope;

/// A key, tag or session id: not empty, not too long, no control characters (so `char(31)`
/// can separate tags in one column and nothing invisible hides in a key).
pub(crate) fn is_valid_label(label: &str, bytes_max: usize) -> bool {
    !label.is_empty() && label.len() <= bytes_max && !label.chars().any(char::is_control)
}

/// The scope, checked.
pub(crate) fn check_scope(scope: &Scope, limits: &Limits) -> Result<(), InputError> {
    match scope {
        Scope::Global => Ok(()),
        Scope::Project { key: label } | Scope::Session { id: label } => {
            if is_valid_label(label, limits.scope_key_bytes_max) {
                Ok(())
            } else {
                Err(InputError::ScopeInvalid {
                    key: label.chars().take(64).collect(),
                    max: limits.scope_key_bytes_max,
                })
            }
        }
    }
}

/// The tags, checked, sorted and without repeats.
pub(crate) fn check_tags(tags: &[String], limits: &Limits) -> Result<Vec<String>, InputError> {
    if tags.len() > limits.tags_max {
        return Err(InputError::TagsTooMany {
            count: tags.len(),
            max: limits.tags_max,
        });
    }
    for tag in tags {
        if !is_valid_label(tag, limits.tag_bytes_max) {
            return Err(InputError::TagInvalid {
                tag: tag.chars().take(64).collect(),
                max: limits.tag_bytes_max,
            });
        }
    }
    let mut tags = tags.to_vec();
    tags.sort_unstable();
    tags.dedup();
    Ok(tags)
}

/// A value for SQLite's signed integers.
pub(crate) fn to_sql(value: u64) -> Result<i64, InputError> {
    i64::try_from(value).map_err(|_| InputError::OutOfRange { value })
}

/// Which memories an operation looks at: checked, in a canonical order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// One of these scopes; empty means any.
    pub(crate) scopes: Vec<Scope>,
    /// Every one of these tags.
    pub(crate) tags: Vec<String>,
    /// Remembered by this session.
    pub(crate) session: Option<String>,
    /// Remembered at this seq or later.
    pub(crate) seq_min: Option<i64>,
}

impl Filter {
    /// The filter of `scopes` and `tags`, checked.
    pub(crate) fn new(
        scopes: &[Scope],
        tags: &[String],
        limits: &Limits,
    ) -> Result<Self, InputError> {
        if scopes.len() > limits.filter_scopes_max {
            return Err(InputError::ScopesTooMany {
                count: scopes.len(),
                max: limits.filter_scopes_max,
            });
        }
        for scope in scopes {
            check_scope(scope, limits)?;
        }
        let mut scopes = scopes.to_vec();
        scopes.sort_unstable();
        scopes.dedup();
        Ok(Self {
            scopes,
            tags: check_tags(tags, limits)?,
            session: None,
            seq_min: None,
        })
    }

    /// Whether it matches every memory.
    pub(crate) fn is_empty(&self) -> bool {
        self.scopes.is_empty()
            && self.tags.is_empty()
            && self.session.is_none()
            && self.seq_min.is_none()
    }

    /// The parts a cursor's fingerprint covers.
    pub(crate) fn parts(&self) -> Vec<String> {
        let mut parts = Vec::new();
        for scope in &self.scopes {
            parts.push(format!("scope:{}:{}", scope.kind(), scope.key()));
        }
        for tag in &self.tags {
            parts.push(format!("tag:{tag}"));
        }
        parts
    }

    /// `AND ...` conditions over `memories m`, with their values in order.
    pub(crate) fn sql(&self, values: &mut Vec<Value>) -> String {
        let mut sql = String::new();
        if !self.scopes.is_empty() {
            let alternatives: Vec<&str> = self
                .scopes
                .iter()
                .map(|scope| {
                    values.push(Value::Text(scope.kind().to_string()));
                    values.push(Value::Text(scope.key().to_string()));
                    "(m.scope_kind = ? AND m.scope_key = ?)"
                })
                .collect();
            sql.push_str(" AND (");
            sql.push_str(&alternatives.join(" OR "));
            sql.push(')');
        }
        if !self.tags.is_empty() {
            let marks = vec!["?"; self.tags.len()].join(", ");
            sql.push_str(&format!(
                " AND m.id IN (SELECT memory_id FROM memory_tags WHERE tag IN ({marks}) \
                 GROUP BY memory_id HAVING count(*) = ?)"
            ));
            values.extend(self.tags.iter().map(|tag| Value::Text(tag.clone())));
            values.push(Value::Integer(self.tags.len() as i64));
        }
        if let Some(session) = &self.session {
            sql.push_str(" AND m.session = ?");
            values.push(Value::Text(session.clone()));
        }
        if let Some(seq_min) = self.seq_min {
            sql.push_str(" AND m.seq >= ?");
            values.push(Value::Integer(seq_min));
        }
        sql
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        let limits = Limits::default();
        let long = "x".repeat(limits.tag_bytes_max + 1);
        let table: [(&str, bool); 5] = [
            ("rust", true),
            ("", false),
            ("a\u{1f}b", false),
            ("line\nbreak", false),
            (&long, false),
        ];
        for (tag, valid) in table {
            let checked = check_tags(&[tag.to_string()], &limits);
            assert_eq!(checked.is_ok(), valid, "tag {tag:?}");
            if let Err(refused) = checked {
                assert_eq!(refused.code(), "memory_tag_invalid");
            }
        }
        let many = vec!["t".to_string(); limits.tags_max + 1];
        assert_eq!(
            check_tags(&many, &limits).unwrap_err().code(),
            "memory_tags_too_many"
        );
        let empty_key = Scope::Project { key: String::new() };
        assert_eq!(
            check_scope(&empty_key, &limits).unwrap_err().code(),
            "memory_scope_invalid"
        );
        assert!(check_scope(&Scope::Global, &limits).is_ok());
    }

    #[test]
    fn filters_are_canonical() {
        let limits = Limits::default();
        let session = Scope::Session { id: "s".into() };
        let scopes = [session.clone(), Scope::Global, session];
        let tags = ["b".to_string(), "a".to_string(), "b".to_string()];
        let filter = Filter::new(&scopes, &tags, &limits).unwrap();
        assert_eq!(
            filter.scopes,
            [Scope::Global, Scope::Session { id: "s".into() }]
        );
        assert_eq!(filter.tags, ["a", "b"]);
        let mut values = Vec::new();
        let sql = filter.sql(&mut values);
        assert_eq!(sql.matches('?').count(), values.len());
        assert_eq!(values.len(), 4 + 2 + 1);
        assert!(Filter::default().is_empty());
        assert!(!filter.is_empty());
        let too_many = vec![Scope::Global; limits.filter_scopes_max + 1];
        let refused = Filter::new(&too_many, &[], &limits).unwrap_err();
        assert_eq!(refused.code(), "memory_filter_scopes_too_many");
        assert_eq!(
            to_sql(u64::MAX).unwrap_err().code(),
            "memory_value_out_of_range"
        );
    }
}
