//! `leaseproof redis`: a throwaway Redis kept exactly as long as its caller
//! holds standard input open (what the Python package's fixture runs).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};

#[test]
fn leaseproof_redis_serves_a_throwaway_server_until_stdin_closes() {
    if leaseproof_redis_server::test_redis_url().is_none() {
        return; // the skip line is printed; a failure under LEASEPROOF_REQUIRE_REDIS=1
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_leaseproof"))
        .arg("redis")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run leaseproof redis");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut said = |prefix: &str| {
        let line = lines.next().expect("a line").expect("utf-8");
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{line:?} starts with {prefix}"))
            .to_string()
    };
    let url = said("REDIS_URL=");
    let pid: u32 = said("PID=").parse().unwrap();
    let dir = std::path::PathBuf::from(said("DIR="));
    assert!(dir.is_dir(), "{}", dir.display());
    // redis://:password@127.0.0.1:port/ — the server answers its password.
    let (password, address) = url
        .trim_start_matches("redis://:")
        .trim_end_matches('/')
        .split_once('@')
        .unwrap();
    let mut connection = std::net::TcpStream::connect(address).unwrap();
    write!(connection, "AUTH {password}\r\nPING\r\n").unwrap();
    let mut answer = [0_u8; 12];
    connection.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"+OK\r\n+PONG\r\n");
    drop(child.stdin.take()); // closing stdin stops the server
    assert!(child.wait().unwrap().success());
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "redis-server {pid} still runs"
    );
}
