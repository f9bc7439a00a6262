//! A Redis container through testcontainers (feature `testcontainers`): the
//! third source, after `REDIS_URL` and a throwaway `redis-server`.
//!
//! The shared server lives in a static, never dropped, so a detached watchdog
//! removes the container once this process is gone (`docker rm -f`), as the
//! throwaway server's watchdog removes its directory.

use testcontainers_modules::redis::Redis;
use testcontainers_modules::testcontainers::runners::SyncRunner as _;
use testcontainers_modules::testcontainers::{Container, ImageExt as _};

/// A running container and its URL.
pub(crate) struct RedisContainer {
    url: String,
    _container: Container<Redis>,
}

impl std::fmt::Debug for RedisContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisContainer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RedisContainer {
    /// Needs a Docker engine; the error says what failed.
    pub(crate) fn start() -> Result<RedisContainer, String> {
        let failed =
            |what: &str, error: testcontainers_modules::testcontainers::TestcontainersError| {
                format!("no Redis container ({what}: {error})")
            };
        let container = Redis::default()
            .with_tag("7-alpine")
            .start()
            .map_err(|error| failed("start", error))?;
        let host = container
            .get_host()
            .map_err(|error| failed("host", error))?;
        let port = container
            .get_host_port_ipv4(6379)
            .map_err(|error| failed("port", error))?;
        let _ = leaseproof_watchdog::remove_container_after_this_process(container.id());
        Ok(RedisContainer {
            url: format!("redis://{host}:{port}"),
            _container: container,
        })
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}
