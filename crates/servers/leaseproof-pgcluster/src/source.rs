//! Where a PostgreSQL server comes from: `DATABASE_URL`, system binaries, Docker.
//!
//! Goal: pick the first available source in the order docs/protocol.md fixes
//! ("PostgreSQL and Redis in tests"), and explain precisely why none was available.
//! Method: the probing (environment, file system, `docker info`) is separated from
//! the decision ([`choose`]), which is a pure function so its order is unit-tested.
//! Invariant: a set `DATABASE_URL` always wins; a Docker engine is used (through
//! testcontainers) only when the `testcontainers` feature is built and there are
//! neither a URL nor binaries — the throwaway cluster starts in a second, an
//! image pull can take minutes.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The three programs a throwaway cluster needs, all from one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binaries {
    /// Directory holding `initdb`, `pg_ctl` and `postgres`.
    pub(crate) bin_dir: PathBuf,
}

impl Binaries {
    /// Path of the program `name` in [`Self::bin_dir`].
    pub(crate) fn program(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }
}

/// What [`choose`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Use the server behind this URL.
    DatabaseUrl(String),
    /// Start a throwaway cluster from these binaries.
    Throwaway(Binaries),
    /// Start a PostgreSQL container through testcontainers.
    Container,
    /// Nothing usable; the reason for the skip line.
    Unavailable(String),
}

/// The order of sources, as a pure function of what was probed.
///
/// `docker_answers` is only called when it matters (no URL, no binaries), since
/// `docker info` can take seconds.
pub(crate) fn choose(
    database_url: Option<String>,
    binaries: Option<Binaries>,
    docker_answers: impl FnOnce() -> bool,
    containers_built: bool,
) -> Plan {
    if let Some(url) = database_url.filter(|url| !url.trim().is_empty()) {
        return Plan::DatabaseUrl(url);
    }
    if let Some(binaries) = binaries {
        return Plan::Throwaway(binaries);
    }
    let searched = "DATABASE_URL unset; no initdb/pg_ctl/postgres on PATH or in \
                    /usr/lib/postgresql/*/bin";
    let docker = docker_answers();
    if docker && containers_built {
        Plan::Container
    } else if docker {
        Plan::Unavailable(format!(
            "{searched}; a Docker engine answers, but Docker-based provisioning \
             (testcontainers) is not built into leaseproof-pgcluster (its \
             `testcontainers` feature is off)"
        ))
    } else {
        Plan::Unavailable(format!(
            "{searched}; no Docker engine answers{}",
            if containers_built {
                ""
            } else {
                " (and Docker-based provisioning is not built: feature `testcontainers`)"
            }
        ))
    }
}

/// Probes the real environment and decides.
pub(crate) fn plan_from_environment() -> Plan {
    choose(
        std::env::var("DATABASE_URL").ok(),
        find_binaries(),
        docker_answers,
        cfg!(feature = "testcontainers"),
    )
}

/// Finds a directory with `initdb`, `pg_ctl` and `postgres`: `PATH` first, then
/// `/usr/lib/postgresql/<version>/bin`, highest version first.
pub(crate) fn find_binaries() -> Option<Binaries> {
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(versioned_bin_dirs(Path::new("/usr/lib/postgresql")))
        .find(|dir| has_all_programs(dir))
        .map(|bin_dir| Binaries { bin_dir })
}

/// `<root>/<version>/bin` for every numeric version, highest version first.
pub(crate) fn versioned_bin_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut versions: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version: Vec<u32> = name
                .split('.')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

fn has_all_programs(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"].iter().all(|name| {
        std::fs::metadata(dir.join(name))
            .map(|meta| meta.is_file() && meta.mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

/// True when `docker info` exits 0 within five seconds.
pub(crate) fn docker_answers() -> bool {
    let Ok(mut child) = Command::new("docker")
        .arg("info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// The effective uid of this process (owner of `/proc/self`), `id -u` as fallback.
pub(crate) fn effective_uid() -> Option<u32> {
    if let Ok(meta) = std::fs::metadata("/proc/self") {
        return Some(meta.uid());
    }
    id_number(&["-u"]).ok()
}

/// Uid and gid of a user, via `id`; the error says which of the two is
/// missing — the `id` program or the user — so neither is mistaken for the other.
pub(crate) fn user_ids(user: &str) -> Result<(u32, u32), String> {
    Ok((id_number(&["-u", user])?, id_number(&["-g", user])?))
}

fn id_number(args: &[&str]) -> Result<u32, String> {
    let output = Command::new("id")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => {
                "the `id` program (coreutils) is not on PATH".to_string()
            }
            _ => format!("`id` could not run: {error}"),
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    match (output.status.success(), text.trim().parse()) {
        (true, Ok(number)) => Ok(number),
        _ => Err(format!("`id {}` knows no such user", args.join(" "))),
    }
}

/// True when a program that switches to the server user exists: `runuser`
/// (util-linux, tried first) or `su`.
pub(crate) fn user_switch_available() -> bool {
    program_on_path("runuser", &["/usr/sbin", "/sbin"]).is_some()
        || program_on_path("su", &["/bin", "/usr/bin"]).is_some()
}

/// `name` in a directory of `PATH` or of `extra_dirs`, if it is a file there.
pub(crate) fn program_on_path(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binaries() -> Binaries {
        Binaries {
            bin_dir: PathBuf::from("/opt/pg/bin"),
        }
    }

    #[test]
    fn database_url_wins_over_binaries_and_docker_is_not_probed() {
        let plan = choose(
            Some("postgres://h/db".into()),
            Some(binaries()),
            || panic!("docker must not be probed when DATABASE_URL is set"),
            true,
        );
        assert_eq!(plan, Plan::DatabaseUrl("postgres://h/db".into()));
    }

    #[test]
    fn empty_database_url_counts_as_unset() {
        let plan = choose(
            Some("  ".into()),
            Some(binaries()),
            || panic!("docker must not be probed when binaries exist"),
            true,
        );
        assert_eq!(plan, Plan::Throwaway(binaries()));
    }

    #[test]
    fn without_url_or_binaries_the_reason_mentions_docker_honestly() {
        let Plan::Unavailable(with_docker) = choose(None, None, || true, false) else {
            panic!("expected Unavailable");
        };
        assert!(with_docker.contains("Docker engine answers"));
        assert!(with_docker.contains("not built"));
        let Plan::Unavailable(without_docker) = choose(None, None, || false, true) else {
            panic!("expected Unavailable");
        };
        assert!(without_docker.contains("no Docker engine answers"));
        assert!(without_docker.contains("DATABASE_URL unset"));
    }

    #[test]
    fn a_container_comes_last_and_only_when_built_and_docker_answers() {
        assert_eq!(choose(None, None, || true, true), Plan::Container);
        assert_eq!(
            choose(None, Some(binaries()), || panic!("not probed"), true),
            Plan::Throwaway(binaries()),
            "the throwaway cluster comes before a container"
        );
        assert!(matches!(
            choose(None, None, || false, true),
            Plan::Unavailable(_)
        ));
    }

    #[test]
    fn versioned_dirs_are_sorted_highest_version_first() {
        let root = std::env::temp_dir().join(format!("lp-versions-{}", std::process::id()));
        for version in ["9.6", "15", "13", "not-a-version", "16"] {
            std::fs::create_dir_all(root.join(version)).unwrap();
        }
        let dirs = versioned_bin_dirs(&root);
        std::fs::remove_dir_all(&root).unwrap();
        let names: Vec<String> = dirs
            .iter()
            .map(|d| {
                d.parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["16", "15", "13", "9.6"]);
        assert!(dirs.iter().all(|d| d.ends_with("bin")));
    }
}
