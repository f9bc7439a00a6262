//! Grants: acquire (the one statement, reading first after a refusal),
//! waiting, renewal, release and the reads.

use leaseproof_protocol::semantics::LeaseRow;
use leaseproof_protocol::{FencingToken, Holder, Lease, LeaseError, Owner, Scope, ServerTime, Ttl};
use sqlx::{Connection, PgConnection};

use crate::errors::{after_send, without_effect};
use crate::statements::{Arg, Statements};
use crate::wake::Releases;
use crate::LeaseGuard;
use crate::{observe, sql};

use super::PostgresLeases;

impl PostgresLeases {
    /// Tries to take `scope` for `owner` for `ttl` (server time): one statement,
    /// one round trip ([`sql::ACQUIRE`]). `Err(Held)` when another owner holds a
    /// live grant — a read, with no row lock and no WAL. On a scope this
    /// client saw refused, a read-only check goes first and a loser costs
    /// only that read ([`Self::with_read_first`]); the statement still decides
    /// every grant.
    ///
    /// The [`LeaseGuard`] owns the lease: keep it alive
    /// ([`LeaseGuard::with_keep_alive`]), race the work against
    /// [`LeaseGuard::lost`], commit through [`LeaseGuard::commit_cycle`],
    /// [`LeaseGuard::release`] it. Dropped, it stops renewing and the lease
    /// ends at its TTL.
    ///
    /// Idempotent for the same owner: after a lost reply (`OutcomeUnknown`),
    /// retrying with the same `owner` returns the grant the lost reply carried —
    /// same token, same `granted_at`, `expires_at` extended to `now + ttl` (never
    /// shortened: a stale retry landing late keeps the later end) — or,
    /// if it expired meanwhile, a new grant with the next token.
    ///
    /// Cancel-safe: a future dropped mid-statement returns no guard and leaks
    /// no connection; the grant may have landed, and then expires at its TTL.
    pub async fn acquire(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<LeaseGuard, LeaseError> {
        // Before the statement is sent, so `sent + ttl` bounds the grant's end
        // from below on this process's clock.
        let sent = tokio::time::Instant::now();
        let lease = self.acquire_lease(scope, owner, ttl).await?;
        Ok(LeaseGuard::new(self.clone(), lease, ttl, sent))
    }

    /// Waits up to `timeout` for the lease of `scope`, then holds it as
    /// [`Self::acquire`] does: for a job that must run, not skip its tick.
    ///
    /// It tries at once; refused, it listens for releases of the scope (one
    /// `LISTEN` connection shared by these leases' waiters, outside the
    /// pool, kept until [`Self::close`]: [`sql::RELEASE`] notifies) and
    /// tries again the moment one is released, or after a jittered pause of
    /// about an eighth of the TTL (10 ms to 500 ms, ±50 %, so waiters do not
    /// march in step), until granted or the deadline. A waiter that was
    /// refused reads first ([`crate::ReadFirst::AfterRefusal`]): polling costs a
    /// primary-key read, never a write or a row lock. A holder that releases
    /// is followed at once; one that dies, within one pause of its expiry
    /// (an expiry notifies nobody). Without the listener (it could not
    /// connect) the pauses alone pace the wait. An
    /// acquisition whose outcome is unknown (a lost reply) is retried too:
    /// acquiring is idempotent for one owner, so the retry finds the grant
    /// if the first attempt made it. At the deadline it returns the last
    /// refusal (`Held`, with the holder when the read named it) or error.
    /// Cancel-safe as [`Self::acquire`] is: a dropped wait holds nothing.
    ///
    /// It is not a queue: a holder that asks again the moment it released
    /// can win before a waiter's pause ends (measured: four clients that did
    /// so got 87, 1, 1 and 3 grants in two seconds; with 40 ms of other work
    /// between a release and the next wait, 7 to 21 each).
    pub async fn acquire_wait(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
        timeout: std::time::Duration,
    ) -> Result<LeaseGuard, LeaseError> {
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
        let pause = wait_pause(ttl);
        // Listening starts after the first refusal (most acquisitions are
        // granted at once), then the scope is asked again at once: a release
        // between the refusal and the LISTEN notified nobody.
        let mut releases: Option<Option<Releases>> = None;
        loop {
            // In line before the attempt: a release between a refusal and
            // the wait still wakes this waiter.
            let mut place = match &releases {
                Some(Some(listening)) => Some(listening.line_up(scope)),
                _ => None,
            };
            let error = match self.acquire(scope, owner, ttl).await {
                Ok(guard) => {
                    observe::waited(scope, true, started.elapsed());
                    return Ok(guard);
                }
                Err(
                    error @ (LeaseError::Held { .. }
                    | LeaseError::OutcomeUnknown { .. }
                    | LeaseError::Unavailable { .. }),
                ) => error,
                Err(error) => return Err(error),
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                observe::waited(scope, false, started.elapsed());
                return Err(error);
            }
            let pause = jittered(pause).min(deadline - now);
            match (&releases, &mut place) {
                (None, _) => releases = Some(Releases::listen(self).await),
                (_, Some(place)) => {
                    tokio::select! {
                        () = place.woken() => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                (_, None) => tokio::time::sleep(pause).await,
            }
        }
    }

    /// [`Self::acquire`] returning the lease as a value, with no guard: for
    /// callers that renew and release by hand (the harness's port, the worker
    /// loop, which record every statement themselves).
    pub async fn acquire_lease(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        let started = std::time::Instant::now();
        let result = self.acquire_lease_unobserved(scope, owner, ttl).await;
        observe::acquired(scope, owner, &result, started.elapsed());
        result
    }

    async fn acquire_lease_unobserved(
        &self,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        let read_first = self.refused.reads_first(self.read_first, scope);
        let mut connection = self.connection().await?;
        let decision = acquire_decision(
            &mut connection,
            self.statements,
            read_first,
            scope,
            owner,
            ttl,
        )
        .await?;
        // Parked before the refusal's holder read, which then reuses it.
        self.park(connection);
        self.concluded(scope, owner, decision).await
    }

    /// What an acquisition's decision means for the caller, and for which
    /// scopes this client reads first from now on.
    async fn concluded(
        &self,
        scope: &Scope,
        owner: &Owner,
        decision: Decision,
    ) -> Result<Lease, LeaseError> {
        match decision {
            Decision::Granted(row) => {
                self.refused.granted(scope);
                Ok(granted(scope, owner, row))
            }
            Decision::Refused(holder) => {
                self.refused.refused(scope);
                match holder {
                    Some(holder) => {
                        assert!(&holder.owner != owner, "a read refuses only another owner");
                        Err(LeaseError::Held {
                            scope: scope.clone(),
                            holder: Some(holder),
                        })
                    }
                    None => Err(self.held(scope).await?),
                }
            }
        }
    }

    // Hidden from the API docs: the benchmarks' entry point for comparing
    // statement forms, public only because they live in another crate.
    #[doc(hidden)]
    /// Acquisition through another statement of the same shape (the seed's bare
    /// upsert, [`sql::ACQUIRE_UNGUARDED`]); for tests and benchmarks that compare forms.
    pub async fn acquire_with(
        &self,
        statement: &'static str,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        let mut connection = self.connection().await?;
        let row = acquire_row(
            &mut connection,
            self.statements,
            statement,
            scope,
            owner,
            ttl,
        )
        .await
        .map_err(|error| after_send("acquire", error))?;
        // Parked before the refusal's holder read, which then reuses it.
        self.park(connection);
        match row {
            Some(row) => Ok(granted(scope, owner, row)),
            None => Err(self.held(scope).await?),
        }
    }

    /// [`Self::acquire_lease`] on the caller's own connection — a dedicated
    /// one in a polling loop, say. The same statement, and no pool at all
    /// (the pooled path keeps its connections between statements, see
    /// [`Self::new`], so the two measure alike in `leaseproof bench`). Refuses (`TransactionDomain`) a connection inside a
    /// transaction: the grant would be stamped with the transaction's start
    /// and its row lock held to the caller's commit.
    pub async fn acquire_on(
        &self,
        connection: &mut PgConnection,
        scope: &Scope,
        owner: &Owner,
        ttl: Ttl,
    ) -> Result<Lease, LeaseError> {
        if connection.is_in_transaction() {
            return Err(LeaseError::TransactionDomain {
                reason: "acquire runs as its own transaction; this connection is inside one",
            });
        }
        let started = std::time::Instant::now();
        let read_first = self.refused.reads_first(self.read_first, scope);
        let result = match acquire_decision(
            connection,
            self.statements,
            read_first,
            scope,
            owner,
            ttl,
        )
        .await
        {
            Ok(decision) => self.concluded(scope, owner, decision).await,
            Err(error) => Err(error),
        };
        observe::acquired(scope, owner, &result, started.elapsed());
        result
    }

    /// The refusal of `scope`, naming the holder when asked to
    /// ([`Self::with_holder_reports`]). The read may find nobody: the grant
    /// can have ended in between.
    async fn held(&self, scope: &Scope) -> Result<LeaseError, LeaseError> {
        // The refusal is certain; the report is a courtesy: a report that
        // fails (a dropped connection, an owner that does not decode) leaves
        // the holder unnamed, never turns the refusal into an error.
        let holder = if self.holder_reports {
            self.holder(scope).await.ok().flatten()
        } else {
            None
        };
        Ok(LeaseError::Held {
            scope: scope.clone(),
            holder,
        })
    }

    /// Extends a live lease to `now + ttl` (never shortens it: a renewal that
    /// landed late keeps the end a newer one set), keeping its token. `Err(Lost)` when
    /// the lease expired, was released, or was taken over.
    pub async fn renew(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        let started = std::time::Instant::now();
        let result = self.renew_unobserved(lease, ttl).await;
        observe::renewed(lease, &result, started.elapsed());
        result
    }

    async fn renew_unobserved(&self, lease: &Lease, ttl: Ttl) -> Result<Lease, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
            Arg::Int8(ttl.as_micros()),
        ];
        let row: Option<(i64, i64)> = self
            .statements
            .fetch_optional(&mut connection, sql::RENEW, &args)
            .await
            .map_err(|error| after_send("renew", error))?;
        self.park(connection);
        let Some((granted_at_us, expires_at_us)) = row else {
            return Err(LeaseError::lost(lease));
        };
        let renewed = Lease::from_server_reply(
            lease.scope().clone(),
            lease.owner().clone(),
            lease.token(),
            ServerTime::from_micros(granted_at_us),
            ServerTime::from_micros(expires_at_us),
        );
        lease.assert_renewed_as(&renewed);
        Ok(renewed)
    }

    /// Expires the lease now (server time). The row stays so the token never
    /// restarts. Returns the server time the grant ended; `Ok(None)` when it was
    /// no longer held (released before, expired, or taken over).
    pub async fn release(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        let started = std::time::Instant::now();
        let result = self.release_unobserved(lease).await;
        let seen = result.as_ref().map(Option::is_some);
        observe::released(lease, &seen, started.elapsed());
        result
    }

    async fn release_unobserved(&self, lease: &Lease) -> Result<Option<ServerTime>, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
        ];
        let row: Option<(i64,)> = self
            .statements
            .fetch_optional(&mut connection, sql::RELEASE, &args)
            .await
            .map_err(|error| after_send("release", error))?;
        self.park(connection);
        Ok(row.map(|(released_at_us,)| ServerTime::from_micros(released_at_us)))
    }

    /// Whether the lease was current when the server read it. Past tense: to
    /// act on the answer, use the fence inside the transaction that acts.
    pub async fn holds(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [
            Arg::Text(lease.scope().as_str()),
            Arg::Text(lease.owner().as_str()),
            Arg::Int8(lease.token().0),
        ];
        let (held,): (bool,) = self
            .statements
            .fetch_one(&mut connection, sql::HOLDS, &args)
            .await
            .map_err(without_effect)?;
        self.park(connection);
        Ok(held)
    }

    /// The scope's row as it is now, if the scope was ever granted.
    pub async fn row(&self, scope: &Scope) -> Result<Option<LeaseRow>, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(scope.as_str())];
        let row: Option<(String, i64, i64, i64)> = self
            .statements
            .fetch_optional(&mut connection, sql::SELECT_ROW, &args)
            .await
            .map_err(without_effect)?;
        self.park(connection);
        row.map(|(owner, token, granted_at_us, expires_at_us)| {
            Ok(LeaseRow {
                owner: Owner::new(owner)?,
                token: FencingToken(token),
                granted_at: ServerTime::from_micros(granted_at_us),
                expires_at: ServerTime::from_micros(expires_at_us),
            })
        })
        .transpose()
    }

    /// Expires a scope's live grant now, as if its TTL had run out: an
    /// operator's tool for a stuck lease, and the tests' way to skip waiting.
    /// The token is untouched, so the next grant still gets a greater one.
    pub async fn force_expire(&self, scope: &Scope) -> Result<bool, LeaseError> {
        let mut connection = self.connection().await?;
        let args = [Arg::Text(scope.as_str())];
        let result = self
            .statements
            .execute(&mut connection, sql::FORCE_EXPIRE, &args)
            .await
            .map_err(|error| after_send("force_expire", error))?;
        self.park(connection);
        Ok(result == 1)
    }
}

pub(crate) type GrantRow = (i64, i64, i64);

/// How one acquisition ended on the server.
enum Decision {
    /// The statement granted: (token, granted_at, expires_at) in µs.
    Granted(GrantRow),
    /// Refused: by the read-first check, which names the holder, or by the
    /// statement (`None`).
    Refused(Option<Holder>),
}

/// One acquisition on `connection`: the read-only check first when
/// `read_first` (a live grant of another owner refuses at once), then the
/// statement, which decides.
async fn acquire_decision(
    connection: &mut PgConnection,
    statements: Statements,
    read_first: bool,
    scope: &Scope,
    owner: &Owner,
    ttl: Ttl,
) -> Result<Decision, LeaseError> {
    if read_first {
        // Read-only: a connection lost under it changed nothing.
        let rival = rival_row(connection, statements, scope, owner)
            .await
            .map_err(without_effect)?;
        if let Some((holder, token, expires_at_us)) = rival {
            return Ok(Decision::Refused(Some(Holder {
                owner: Owner::new(holder)?,
                token: FencingToken(token),
                expires_at: ServerTime::from_micros(expires_at_us),
            })));
        }
    }
    let row = acquire_row(connection, statements, sql::ACQUIRE, scope, owner, ttl)
        .await
        .map_err(|error| after_send("acquire", error))?;
    Ok(match row {
        Some(row) => Decision::Granted(row),
        None => Decision::Refused(None),
    })
}

/// The read-first check ([`sql::SELECT_RIVAL`]): another owner's live grant
/// of `scope` as (owner, token, expires_at in µs). Also the conformance
/// differential's, so the read it holds to the semantics is the library's.
pub(crate) async fn rival_row(
    connection: &mut PgConnection,
    statements: Statements,
    scope: &Scope,
    owner: &Owner,
) -> Result<Option<(String, i64, i64)>, sqlx::Error> {
    let args = [Arg::Text(scope.as_str()), Arg::Text(owner.as_str())];
    statements
        .fetch_optional(connection, sql::SELECT_RIVAL, &args)
        .await
}

/// One acquisition statement: the grant's (token, granted_at, expires_at) in
/// µs when it won. Also the conformance differential's, so both forms it
/// compares run exactly as the library sends them.
pub(crate) async fn acquire_row(
    connection: &mut PgConnection,
    statements: Statements,
    statement: &'static str,
    scope: &Scope,
    owner: &Owner,
    ttl: Ttl,
) -> Result<Option<GrantRow>, sqlx::Error> {
    let args = [
        Arg::Text(scope.as_str()),
        Arg::Text(owner.as_str()),
        Arg::Int8(ttl.as_micros()),
    ];
    statements
        .fetch_optional(connection, statement, &args)
        .await
}

fn granted(scope: &Scope, owner: &Owner, (token, granted_at_us, expires_at_us): GrantRow) -> Lease {
    let lease = Lease::from_server_reply(
        scope.clone(),
        owner.clone(),
        FencingToken(token),
        ServerTime::from_micros(granted_at_us),
        ServerTime::from_micros(expires_at_us),
    );
    assert!(lease.token() >= FencingToken::FIRST);
    assert!(lease.expires_at() > lease.granted_at());
    lease
}

/// How long a waiter pauses between attempts: an eighth of the TTL, at least
/// 10 ms (a busy loop costs the server), at most 500 ms (a released lease is
/// taken within half a second).
fn wait_pause(ttl: Ttl) -> std::time::Duration {
    (ttl.as_duration() / 8).clamp(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_millis(500),
    )
}

/// `pause` ±50 %, so waiters that were refused together do not retry together.
fn jittered(pause: std::time::Duration) -> std::time::Duration {
    use rand::Rng as _;
    pause.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
}
