//! A throwaway Redis served to a human or a parent process until stdin closes.
//!
//! Goal: `leaseproof redis`, the twin of `leaseproof pg`: one call that starts
//! a dedicated server, says where it is and keeps it exactly as long as whoever
//! started us wants it (the Python package's pytest fixture runs it).
//! Method: print `REDIS_URL=…`, `PID=…` and `DIR=…`, one per line, flush, then
//! block until EOF on stdin and drop the server.
//! Invariant: however the process ends (EOF, Ctrl-C, SIGKILL), the server
//! stops and the dir goes away; on a kill it is the server's watchdog that
//! does it.

use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;

use crate::RedisServer;

/// Starts a throwaway [`RedisServer`], prints where it is and keeps it until
/// stdin reaches end-of-file (or fails), then stops it.
///
/// Prints three lines to stdout, in this order and then nothing else:
/// `REDIS_URL=<url with its password>`, `PID=<server pid>`, `DIR=<temp dir>`.
/// Returns [`ExitCode::FAILURE`] after saying why on stderr when no server
/// can be started (`REDIS_URL` is ignored: a server we do not own is not
/// throwaway).
pub fn serve_throwaway_until_stdin_closes() -> ExitCode {
    let server = match RedisServer::start_throwaway() {
        Ok(server) => server,
        Err(reason) => {
            eprintln!("leaseproof redis: no throwaway Redis: {reason} (Debian: redis-server)");
            return ExitCode::FAILURE;
        }
    };
    {
        // Written and flushed in one go: a parent reads these lines from a pipe.
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "REDIS_URL={}", server.url);
        let _ = writeln!(stdout, "PID={}", server.pid().unwrap_or(0));
        let dir = server.dir().map(|dir| dir.display().to_string());
        let _ = writeln!(stdout, "DIR={}", dir.unwrap_or_default());
        let _ = stdout.flush();
    }
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
    drop(server);
    ExitCode::SUCCESS
}
