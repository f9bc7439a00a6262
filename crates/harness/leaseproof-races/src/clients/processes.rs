//! The client processes of a run: started with the run's environment (and
//! libfaketime for a skewed clock), replaced when one dies, and cleaned up
//! by a watchdog should leaseproof itself die.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leaseproof_history::EventKind;

use super::child::{ClientProcess, StartError};
use super::effects::loads_libfaketime;
use super::state::{end_incarnation, lock, Run};

/// Set to the run's temp dir in every client's environment: the mark by
/// which the watchdog finds this run's processes and no one else's.
pub(super) const RUN_MARKER_ENV: &str = "LEASEPROOF_CLIENT_RUN";

/// Aborts the run's tasks when the run is dropped before they finish.
pub(super) struct AbortOnDrop(pub(super) Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Once this process is gone, kills every process whose environment carries
/// this run's mark (continued first: a paused one must not outlive the run)
/// and removes `dir` — three passes a second apart, for a client that was
/// being restarted as we died. Detached, in its own process group.
pub(super) fn spawn_watchdog(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    let dir = dir.display().to_string().replace('\'', "'\\''");
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; \
         for attempt in 1 2 3; do \
           for environ in /proc/[0-9]*/environ; do \
             if tr '\\0' '\\n' < \"$environ\" 2>/dev/null | grep -qxF '{RUN_MARKER_ENV}={dir}'; then \
               pid=${{environ#/proc/}}; pid=${{pid%/environ}}; \
               kill -CONT $pid 2>/dev/null; kill -KILL $pid 2>/dev/null; \
             fi; \
           done; \
           rm -rf '{dir}'; sleep 1; \
         done",
        me = std::process::id(),
    );
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|error| format!("cleanup watchdog: {error}"))
}

/// libfaketime's library, where Debian puts it.
pub fn libfaketime() -> Option<std::path::PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .find(|path| path.exists())
}

/// Starts incarnation `incarnation` of worker `index`.
pub(super) async fn start_client(
    run: &Arc<Run>,
    index: usize,
    incarnation: u64,
    plan_clock: Option<super::plan::ClockSkew>,
) -> Result<ClientProcess, StartError> {
    let worker = format!("w{index}");
    let mut env = run.client_env(index, incarnation);
    let mut skewed = false;
    if let (Some(clock), Some(library)) = (plan_clock, libfaketime()) {
        skewed = true;
        env.push(("LD_PRELOAD".to_string(), library.display().to_string()));
        env.push(("FAKETIME".to_string(), clock.faketime()));
        // Each process start reads FAKETIME afresh; no cache between reads.
        env.push(("FAKETIME_NO_CACHE".to_string(), "1".to_string()));
    }
    let belief = Arc::clone(&run.slots[index].belief);
    let lost_run = Arc::clone(run);
    let lost_worker = worker.clone();
    let on_lost = Box::new(move |table: &str, text: Option<&str>| {
        // Stamped and recorded under the worker's belief lock, so the
        // worker's events stay in time order.
        let mut belief = lock(&belief);
        belief.lost_notices += 1;
        if let Some((scope, token)) = belief.held.take() {
            if scope == table {
                lost_run.record(
                    &lost_worker,
                    belief.incarnation,
                    EventKind::BeliefEnd {
                        scope,
                        token,
                        reason: format!("lost: {}", text.unwrap_or("the lock said so")),
                    },
                );
            } else {
                belief.held = Some((scope, token));
            }
        }
    });
    let exit_run = Arc::clone(run);
    // Only this incarnation's belief: a successor may hold by then.
    let on_exit =
        Box::new(move || end_incarnation(&exit_run, index, Some(incarnation), "the process ended"));
    let process = ClientProcess::start(
        format!("{worker} (incarnation {incarnation})"),
        &run.config.command,
        &env,
        run.dir
            .path()
            .join(format!("{worker}.{incarnation}.stderr")),
        run.config.hello_timeout,
        on_lost,
        on_exit,
    )
    .await?;
    run.slots[index]
        .pgid
        .store(u64::from(process.pgid()), Ordering::SeqCst);
    if skewed && loads_libfaketime(process.pgid()) {
        lock(&run.process_effects).clients_skewed += 1;
    }
    let mut hello = lock(&run.hello);
    if hello.is_none() {
        *hello = Some(process.hello.clone());
    }
    Ok(process)
}

/// Kills the worker's current process: its successor is a new incarnation.
pub(super) async fn replace(run: &Arc<Run>, index: usize) {
    end_incarnation(run, index, None, "replaced");
    let slot = &run.slots[index];
    if let Some(mut process) = slot.process.lock().await.take() {
        process.kill().await;
    }
}
