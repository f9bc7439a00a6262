//! The name of the thing a lease protects.

use std::fmt;

use crate::InvalidInput;

/// What a lease excludes: one row of the lease table per scope.
///
/// Non-empty, at most [`Scope::LENGTH_BYTES_MAX`] bytes of UTF-8, and free of NUL
/// bytes — PostgreSQL's `text` cannot hold NUL, so such a scope would fail inside
/// the database instead of here. Any other content (quotes, semicolons, SQL
/// keywords) is stored verbatim: scopes only ever travel as bind parameters.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Scope(String);

impl Scope {
    /// Longest scope accepted, in bytes of UTF-8. It fits a btree index entry
    /// comfortably and is far above any real job or table name.
    pub const LENGTH_BYTES_MAX: usize = 255;

    /// Validates `name` as a scope.
    pub fn new(name: impl Into<String>) -> Result<Scope, InvalidInput> {
        let name = name.into();
        if name.is_empty() {
            return Err(InvalidInput::ScopeEmpty);
        }
        if name.len() > Self::LENGTH_BYTES_MAX {
            return Err(InvalidInput::ScopeTooLong {
                length_bytes: name.len(),
                length_bytes_max: Self::LENGTH_BYTES_MAX,
            });
        }
        if let Some(position) = name.bytes().position(|byte| byte == 0) {
            return Err(InvalidInput::ScopeContainsNul { position });
        }
        Ok(Scope(name))
    }

    /// The `{prefix}:{schema}.{table}` form used to lock maintenance of one table,
    /// so that different tables are maintained in parallel.
    pub fn for_table(prefix: &str, schema: &str, table: &str) -> Result<Scope, InvalidInput> {
        for part in [prefix, schema, table] {
            if part.is_empty() {
                return Err(InvalidInput::ScopeEmpty);
            }
        }
        Scope::new(format!("{prefix}:{schema}.{table}"))
    }

    /// The scope as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Scope {
    type Error = InvalidInput;
    fn try_from(name: String) -> Result<Scope, InvalidInput> {
        Scope::new(name)
    }
}

impl From<Scope> for String {
    fn from(scope: Scope) -> String {
        scope.0
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scope({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_rejects_empty_oversized_and_nul() {
        assert_eq!(Scope::new(""), Err(InvalidInput::ScopeEmpty));
        assert_eq!(
            Scope::new("x".repeat(256)),
            Err(InvalidInput::ScopeTooLong {
                length_bytes: 256,
                length_bytes_max: 255
            })
        );
        assert_eq!(
            Scope::new("a\0b"),
            Err(InvalidInput::ScopeContainsNul { position: 1 })
        );
        assert!(Scope::new("x".repeat(255)).is_ok());
    }

    #[test]
    fn scope_length_counts_bytes_not_chars() {
        // 'é' is two bytes: 128 of them are 256 bytes, one too many.
        assert!(Scope::new("é".repeat(127)).is_ok());
        assert!(matches!(
            Scope::new("é".repeat(128)),
            Err(InvalidInput::ScopeTooLong { .. })
        ));
    }

    #[test]
    fn scope_for_table_has_the_documented_shape() {
        let scope = Scope::for_table("myapp", "public", "events").unwrap();
        assert_eq!(scope.as_str(), "myapp:public.events");
        assert_eq!(
            Scope::for_table("", "public", "events"),
            Err(InvalidInput::ScopeEmpty)
        );
    }
}
