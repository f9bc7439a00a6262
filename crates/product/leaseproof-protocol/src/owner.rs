//! Who holds a lease: one process incarnation, never reused.

use std::fmt;

use rand::Rng;

use crate::InvalidInput;

/// The holder of a lease: an id unique to one *incarnation* of a worker.
///
/// [`Owner::generate`] builds `host:pid:suffix` with a random 64-bit suffix, so a
/// restarted process — even one that gets its old pid back — never inherits its
/// predecessor's lease, and two workers inside one process never share an id.
/// Keep the value for retries: re-acquiring with the *same* owner after a lost
/// reply is idempotent (see `semantics::LeaseTable::acquire`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Owner(String);

impl Owner {
    /// Longest owner id accepted, in bytes.
    pub const LENGTH_BYTES_MAX: usize = 255;

    /// A fresh owner id for this process: `host:pid:suffix`, suffix from OS entropy.
    pub fn generate() -> Owner {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let host: String = host.chars().filter(|c| *c != '\0').take(64).collect();
        let suffix: u64 = rand::thread_rng().gen();
        Owner::new(format!(
            "{host}:{pid}:{suffix:016x}",
            pid = std::process::id()
        ))
        .expect("a generated owner id is short and free of NUL")
    }

    /// An owner id chosen by the caller (simulations derive theirs from the seed).
    /// Non-empty, at most [`Owner::LENGTH_BYTES_MAX`] bytes, no NUL.
    pub fn new(id: impl Into<String>) -> Result<Owner, InvalidInput> {
        let id = id.into();
        if id.is_empty() {
            return Err(InvalidInput::OwnerEmpty);
        }
        if id.len() > Self::LENGTH_BYTES_MAX {
            return Err(InvalidInput::OwnerTooLong {
                length_bytes: id.len(),
                length_bytes_max: Self::LENGTH_BYTES_MAX,
            });
        }
        if let Some(position) = id.bytes().position(|byte| byte == 0) {
            return Err(InvalidInput::OwnerContainsNul { position });
        }
        Ok(Owner(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Owner {
    type Error = InvalidInput;
    fn try_from(id: String) -> Result<Owner, InvalidInput> {
        Owner::new(id)
    }
}

impl From<Owner> for String {
    fn from(owner: Owner) -> String {
        owner.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_owners_are_unique_and_name_host_and_pid() {
        let a = Owner::generate();
        let b = Owner::generate();
        assert_ne!(a, b);
        let pid = std::process::id().to_string();
        assert!(a.as_str().split(':').any(|part| part == pid), "{a}");
        assert_eq!(a.as_str().split(':').count(), 3, "{a}");
    }

    #[test]
    fn generated_owner_suffix_is_64_random_bits() {
        // 10,000 ids collide almost surely with a weak suffix (8 bits: always;
        // 32 bits: ~1%), essentially never with 64 bits (~2^-37).
        let ids: std::collections::BTreeSet<String> = (0..10_000)
            .map(|_| Owner::generate().as_str().to_owned())
            .collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(100) {
            let suffix = id.rsplit(':').next().unwrap();
            assert_eq!(suffix.len(), 16, "{id}");
            assert!(
                suffix
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{id}"
            );
        }
    }

    #[test]
    fn owner_rejects_empty_long_and_nul() {
        assert_eq!(Owner::new(""), Err(InvalidInput::OwnerEmpty));
        assert!(matches!(
            Owner::new("o".repeat(256)),
            Err(InvalidInput::OwnerTooLong { .. })
        ));
        assert_eq!(
            Owner::new("a\0"),
            Err(InvalidInput::OwnerContainsNul { position: 1 })
        );
    }
}
