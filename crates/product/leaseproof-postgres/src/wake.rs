//! Waking a waiter when the lease it waits for is released.
//!
//! Goal: a job that waits for a lease ([`PostgresLeases::acquire_wait`])
//! takes it over moments after the holder releases, not at its next poll.
//! Method: the release statement notifies [`sql::RELEASED_CHANNEL`] with the
//! scope (delivered at its commit); a waiter LISTENs on a connection of its
//! own — not one of the pool's, which the acquisitions need — from its first
//! refusal until it is granted or gives up. A notification is a hint: the
//! waiter still acquires through the one statement that decides, and its
//! poll stays the floor (an expiry notifies nobody; a lost listener
//! connection falls back to polling).
//! Invariant: a wake-up never grants anything; it only moves a retry earlier.
//!
//! [`PostgresLeases::acquire_wait`]: crate::PostgresLeases::acquire_wait

use leaseproof_protocol::Scope;
use sqlx::postgres::{PgListener, PgPoolOptions};

use crate::{sql, PostgresLeases, Statements};

/// A waiter's subscription to releases.
pub(crate) struct Releases {
    listener: PgListener,
}

impl Releases {
    /// Listens for releases on a new connection to the leases' server, or
    /// `None` (the waiter polls) when that connection cannot be made — or
    /// the leases go through a transaction pooler, where a `LISTEN` stays
    /// with a server connection the client does not keep.
    pub(crate) async fn listen(leases: &PostgresLeases) -> Option<Releases> {
        if leases.statements() == Statements::Inline {
            return None;
        }
        let listening = async {
            // A pool of one connection of the listener's own: PgListener
            // needs a pool, and borrowing the leases' would take a slot from
            // the acquisitions for the whole wait.
            let own = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .idle_timeout(None)
                .max_lifetime(None)
                .connect_with((*leases.pool().connect_options()).clone())
                .await?;
            let mut listener = PgListener::connect_with(&own).await?;
            listener.listen(sql::RELEASED_CHANNEL).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let listener = listening
            .await
            .map_err(|error| tracing::debug!(%error, "no release wake-ups: polling only"))
            .ok()?;
        Some(Releases { listener })
    }

    /// Returns when `scope` is released; never, if the listener fails (the
    /// caller's poll is the floor).
    pub(crate) async fn released(&mut self, scope: &Scope) {
        loop {
            match self.listener.try_recv().await {
                Ok(Some(notification)) if notification.payload() == scope.as_str() => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%error, "release wake-ups lost: polling only");
                    return std::future::pending().await;
                }
            }
        }
    }
}
