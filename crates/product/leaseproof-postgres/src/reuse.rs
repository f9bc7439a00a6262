//! Connections the lease's statements finished with, kept for its next
//! statement instead of going back through the pool.
//!
//! Why: sqlx 0.8 pings every connection it takes back (`return_to_pool` sends
//! `/* SQLx ping */` from a spawned task, unconditionally), so through a pool
//! every statement costs the server a second round trip and keeps its
//! connection busy until that returns — `leaseproof bench` measures `SELECT 1`
//! through a pool at 0.3–0.6× the same statement on a dedicated connection
//! under 8-way contention, and the lease's acquisition paid exactly that.
//!
//! Method: a stack of parked connections shared by the clones of one
//! [`PostgresLeases`](crate::PostgresLeases). A statement takes the most
//! recently parked connection (else asks the pool) and parks it again only when
//! the statement *completed* with `Ok` — then no transaction is open and
//! nothing unread is left that the next command does not drain. A statement
//! that failed, or whose future was dropped mid-flight, drops its connection,
//! which goes back through sqlx's ping as before (it may be in any state).
//!
//! Parked connections are checked out as far as sqlx knows, and sqlx
//! queues its other callers fairly only among connections it gets back. So a
//! connection goes back to the pool at most `keep_for` ([`KEEP_FOR_DEFAULT`]
//! unless set) after it *left* the pool, however busy the lease keeps it — a
//! lease renewing in a loop must not starve another user of its pool, and
//! costs one ping per `keep_for` instead of one per statement. It also goes
//! back at once when the pool is closed, one when `PostgresLeases::begin`
//! finds the pool with nothing to give, and all when the last clone is dropped.
//!
//! Invariants: a parked connection is not inside a transaction and has been
//! out of the pool for less than `keep_for`.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::time::Instant;

/// How long a connection may stay out of the pool serving the lease's
/// statements, by default: long enough for thousands of statements in a
/// burst or a polling loop, short enough that another user of the same pool
/// waits at most this for it.
pub const KEEP_FOR_DEFAULT: Duration = Duration::from_millis(250);

/// The parked connections of one `PostgresLeases` and its clones.
pub(crate) struct Parked {
    keep_for: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Most recently parked last.
    connections: Vec<Checkout>,
    /// Whether a reaper task is running (it stops when the stack empties).
    reaper_running: bool,
}

/// A connection out of the pool for the lease's statements, and since when.
pub(crate) struct Checkout {
    connection: PoolConnection<Postgres>,
    taken_at: Instant,
}

impl Checkout {
    /// `connection`, just handed out by the pool.
    pub(crate) fn from_pool(connection: PoolConnection<Postgres>) -> Checkout {
        Checkout {
            connection,
            taken_at: Instant::now(),
        }
    }
}

impl Checkout {
    /// Closes the connection when it is dropped instead of returning it to
    /// the pool: for a connection left inside a transaction that sqlx does
    /// not know is open (the server rolls back with the session).
    pub(crate) fn close_on_drop(&mut self) {
        self.connection.close_on_drop();
    }
}

impl std::ops::Deref for Checkout {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

impl std::ops::DerefMut for Checkout {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}

impl Parked {
    /// Parks connections for `keep_for` (more than zero).
    pub(crate) fn new(keep_for: Duration) -> Parked {
        assert!(!keep_for.is_zero());
        Parked {
            keep_for,
            state: Mutex::default(),
        }
    }

    /// How long a connection may serve statements out of the pool.
    pub(crate) fn keep_for(&self) -> Duration {
        self.keep_for
    }

    /// The most recently parked connection, if any.
    pub(crate) fn take(&self) -> Option<Checkout> {
        let mut state = self
            .state
            .lock()
            .expect("parked connections: lock poisoned");
        state.connections.pop()
    }

    /// Keeps `checkout`, whose statement completed, for the next statement.
    /// The pool gets it back instead when it has been out for `keep_for`
    /// (others may be queued for it), when the pool is closed (so `close`
    /// does not wait for the reaper), and when it is inside a transaction,
    /// which no statement of the lease may inherit.
    pub(crate) fn park(self: &Arc<Self>, checkout: Checkout, pool: &PgPool) {
        let overdue = checkout.taken_at.elapsed() >= self.keep_for;
        if overdue || pool.is_closed() || checkout.connection.is_in_transaction() {
            return;
        }
        let mut state = self
            .state
            .lock()
            .expect("parked connections: lock poisoned");
        state.connections.push(checkout);
        if !state.reaper_running {
            state.reaper_running = true;
            tokio::spawn(reap(Arc::downgrade(self)));
        }
    }

    /// Hands the longest-parked connection back to the pool (through sqlx's
    /// ping, so a waiter gets it one round trip later). Whether there was one.
    pub(crate) fn release_one(&self) -> bool {
        let checkout = {
            let mut state = self
                .state
                .lock()
                .expect("parked connections: lock poisoned");
            if state.connections.is_empty() {
                return false;
            }
            state.connections.remove(0)
        };
        // Dropped outside the lock: the drop spawns sqlx's return task.
        drop(checkout);
        true
    }

    /// Hands every parked connection back to the pool.
    pub(crate) fn release_all(&self) {
        let entries = {
            let mut state = self
                .state
                .lock()
                .expect("parked connections: lock poisoned");
            std::mem::take(&mut state.connections)
        };
        drop(entries);
    }

    /// How many connections are parked now.
    pub(crate) fn count(&self) -> usize {
        self.state
            .lock()
            .expect("parked connections: lock poisoned")
            .connections
            .len()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let state = self
            .state
            .get_mut()
            .expect("parked connections: lock poisoned");
        let checkouts = std::mem::take(&mut state.connections);
        if tokio::runtime::Handle::try_current().is_ok() {
            // Back to the pool through sqlx's own return path.
            drop(checkouts);
        } else {
            // Outside a runtime sqlx cannot spawn its return task (it would
            // panic): detach each connection, which frees its pool slot, and
            // close its socket by dropping it.
            for checkout in checkouts {
                drop(checkout.connection.detach());
            }
        }
    }
}

/// Returns parked connections to the pool once they have been out for
/// `keep_for`, sleeping until the next one is due; ends when none is parked
/// or the `PostgresLeases` is gone.
async fn reap(parked: Weak<Parked>) {
    loop {
        let due = {
            let Some(parked) = parked.upgrade() else {
                return;
            };
            let mut state = parked
                .state
                .lock()
                .expect("parked connections: lock poisoned");
            let now = Instant::now();
            // One due time per connection, for both the hand-back and the sleep.
            let due_of = |checkout: &Checkout| checkout.taken_at + parked.keep_for;
            let (overdue, kept): (Vec<Checkout>, Vec<Checkout>) =
                std::mem::take(&mut state.connections)
                    .into_iter()
                    .partition(|checkout| due_of(checkout) <= now);
            state.connections = kept;
            let due = state.connections.iter().map(due_of).min();
            if due.is_none() {
                state.reaper_running = false;
            }
            drop(state);
            // Dropped outside the lock: each drop spawns sqlx's return task.
            drop(overdue);
            due
        };
        let Some(due) = due else {
            return;
        };
        tokio::time::sleep_until(due).await;
    }
}
