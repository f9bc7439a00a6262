//! Connection-URL surgery: swap the database name of a `postgres://` URL.
//!
//! Goal: derive the URL of a fresh database from the server's admin URL without
//! losing user, password, host, port or query parameters.
//! Method: split the URL at the end of the authority and before the query; only
//! the path between them is replaced.
//! Invariant: everything but the path is returned byte for byte.

/// Returns `url` with its database (the path) replaced by `database_name`.
///
/// The name must be a plain identifier (`[a-z0-9_]`), which the crate's own
/// generated names always are, so no percent-encoding is needed.
pub(crate) fn with_database(url: &str, database_name: &str) -> String {
    assert!(!database_name.is_empty());
    assert!(database_name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
    let authority_start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[authority_start..];
    // The authority ends at the first '/', '?' or '#' (a password containing one
    // of these must be percent-encoded in a valid URL, so this split is safe).
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let path_start = authority_start + authority_len;
    let after_path = &url[path_start..];
    let path_len = after_path.find(['?', '#']).unwrap_or(after_path.len());
    format!(
        "{}/{}{}",
        &url[..path_start],
        database_name,
        &url[path_start + path_len..]
    )
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_is_replaced_and_the_rest_is_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres", "lp_1_2"),
            "postgres://u:p@h:5432/lp_1_2"
        );
        assert_eq!(
            with_database("postgres://u@h:1/db?sslmode=disable&x=1", "lp_1_2"),
            "postgres://u@h:1/lp_1_2?sslmode=disable&x=1"
        );
    }

    #[test]
    fn database_is_added_when_the_url_has_none() {
        assert_eq!(
            with_database("postgresql://h", "lp_3"),
            "postgresql://h/lp_3"
        );
        assert_eq!(
            with_database("postgres://h:5/?sslmode=require", "lp_3"),
            "postgres://h:5/lp_3?sslmode=require"
        );
    }
}
