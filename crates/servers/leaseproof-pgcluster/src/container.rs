//! A PostgreSQL container through testcontainers (feature `testcontainers`):
//! the third source, after `DATABASE_URL` and the throwaway cluster.
//!
//! The image is PostgreSQL 15 (what the throwaway cluster runs here) with
//! `track_commit_timestamp = on`, which the checker's I3 evidence reads. The
//! shared server lives in a static, which is never dropped, so — as for the
//! throwaway cluster — a detached watchdog removes the container once this
//! process is gone (`docker rm -f`).

use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::testcontainers::runners::AsyncRunner as _;
use testcontainers_modules::testcontainers::{ContainerAsync, ImageExt as _};

use crate::PgUnavailable;

/// A running container and its admin URL.
pub(crate) struct PgContainer {
    url: String,
    _container: ContainerAsync<Postgres>,
}

impl std::fmt::Debug for PgContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgContainer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn unavailable(
    what: &str,
) -> impl FnOnce(testcontainers_modules::testcontainers::TestcontainersError) -> PgUnavailable + '_
{
    move |error| PgUnavailable {
        reason: format!(
            "a Docker engine answers, but the PostgreSQL container failed ({what}): {error}"
        ),
    }
}

impl PgContainer {
    pub(crate) async fn start() -> Result<PgContainer, PgUnavailable> {
        let container = Postgres::default()
            .with_tag("15-alpine")
            .with_cmd([
                "postgres",
                "-c",
                "track_commit_timestamp=on",
                "-c",
                "fsync=off",
            ])
            .start()
            .await
            .map_err(unavailable("start"))?;
        let host = container.get_host().await.map_err(unavailable("host"))?;
        let port = container
            .get_host_port_ipv4(5432)
            .await
            .map_err(unavailable("port"))?;
        arm_watchdog(container.id());
        Ok(PgContainer {
            url: format!("postgres://postgres:postgres@{host}:{port}/postgres"),
            _container: container,
        })
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

/// Removes the container once this process has exited, however it exits.
fn arm_watchdog(id: &str) {
    if let Err(error) = leaseproof_watchdog::remove_container_after_this_process(id) {
        eprintln!("leaseproof-pgcluster: no watchdog for container {id}: {error}");
    }
}
