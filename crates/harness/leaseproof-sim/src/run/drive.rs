//! The driver: steps the simulation and applies the drawn faults on time.
//!
//! Goal: crashes, restarts, partitions and database crashes exactly when
//! the fault plan says, nested faults counted (a second crash of a crashed
//! host does nothing until both restarts). Method: between turmoil steps,
//! apply every scheduled event whose time has come; stop when every worker
//! finished and the schedule is done, or at the run's limit (an
//! expectation failure: a worker still running). Invariant: the trace
//! records every event, with "(no effect)" when it changed nothing.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::workers::WorkerSlot;
use super::{Bounds, Finding};
use crate::db::Terminations;
use crate::faults::{FaultEvent, FaultPlan};
use crate::trace::Trace;

/// The host the store faults strike.
#[derive(Clone, Copy)]
pub(super) struct Store<'a> {
    /// The store's host name.
    pub(super) host: &'static str,
    /// Its advisory lock sessions' terminations, where it has them.
    pub(super) terminations: Option<&'a Terminations>,
}

/// Steps `sim` to the end of the run; returns the expectations that failed.
/// The database faults and partitions strike `store_host`: the simulated
/// database, or the lock's store in a lock run; terminations, the
/// database's advisory lock sessions.
pub(super) fn drive(
    sim: &mut turmoil::Sim<'_>,
    plan: &FaultPlan,
    trace: &Trace,
    slots: &Rc<RefCell<Vec<WorkerSlot>>>,
    bounds: &Bounds,
    store: Store<'_>,
) -> Vec<Finding> {
    let (duration, limit) = (bounds.duration, bounds.limit);
    let mut findings = Vec::new();
    let mut schedule = plan.schedule.iter().peekable();
    let mut db_crashed = 0u32;
    loop {
        let now = sim.elapsed();
        while let Some((at_ms, event)) = schedule.peek() {
            if Duration::from_millis(*at_ms) > now {
                break;
            }
            schedule.next();
            apply(sim, plan, trace, slots, event, &mut db_crashed, store);
        }
        let all_finished = slots
            .borrow()
            .iter()
            .all(|slot| slot.finished && slot.crashed == 0);
        if all_finished && (schedule.peek().is_none() || now >= duration) {
            break;
        }
        if now >= limit {
            let slots = slots.borrow();
            for (slot, worker) in slots.iter().zip(&plan.workers) {
                if !slot.finished && slot.crashed == 0 {
                    findings.push(Finding::StillRunning {
                        worker: worker.name.clone(),
                        incarnation: slot.incarnation,
                        over_us: (limit - duration).as_micros() as i64,
                    });
                }
            }
            break;
        }
        if let Err(error) = sim.step() {
            findings.push(Finding::Simulation(error.to_string()));
            break;
        }
    }
    findings
}

fn apply(
    sim: &mut turmoil::Sim<'_>,
    plan: &FaultPlan,
    trace: &Trace,
    slots: &Rc<RefCell<Vec<WorkerSlot>>>,
    event: &FaultEvent,
    db_crashed: &mut u32,
    store: Store<'_>,
) {
    let store_host = store.host;
    let at_us = sim.elapsed().as_micros() as i64;
    let mut applied = true;
    // The host factory borrows the slots when a worker restarts: bounce after
    // the borrow ends.
    let mut bounce_worker = None;
    let mut slots = slots.borrow_mut();
    match event {
        FaultEvent::CrashWorker(index) => {
            let slot = &mut slots[*index];
            if slot.finished && slot.crashed == 0 {
                // Nothing left to crash; its restart must not run it again.
                slot.restarts_skipped += 1;
                applied = false;
            } else {
                if slot.crashed == 0 {
                    sim.crash(plan.workers[*index].name.as_str());
                } else {
                    applied = false;
                }
                slot.crashed += 1;
            }
        }
        FaultEvent::RestartWorker(index) => {
            let slot = &mut slots[*index];
            if slot.restarts_skipped > 0 {
                slot.restarts_skipped -= 1;
                applied = false;
            } else {
                slot.crashed -= 1;
                if slot.crashed == 0 {
                    bounce_worker = Some(plan.workers[*index].name.as_str());
                } else {
                    applied = false;
                }
            }
        }
        FaultEvent::CrashDb => {
            if *db_crashed == 0 {
                sim.crash(store_host);
            } else {
                applied = false;
            }
            *db_crashed += 1;
        }
        FaultEvent::RestartDb => {
            *db_crashed -= 1;
            if *db_crashed == 0 {
                sim.bounce(store_host);
            } else {
                applied = false;
            }
        }
        FaultEvent::TerminateLockSessions => match store.terminations {
            Some(terminations) => terminations.strike(),
            None => applied = false,
        },
        FaultEvent::Partition(target) | FaultEvent::Repair(target) => {
            let cut = matches!(event, FaultEvent::Partition(_));
            let indices: Vec<usize> = match target {
                Some(index) => vec![*index],
                None => (0..plan.workers.len()).collect(),
            };
            for index in indices {
                let slot = &mut slots[index];
                let name = plan.workers[index].name.as_str();
                if cut {
                    slot.partitioned += 1;
                    if slot.partitioned == 1 {
                        sim.partition(name, store_host);
                    }
                } else {
                    slot.partitioned -= 1;
                    if slot.partitioned == 0 {
                        sim.repair(name, store_host);
                    }
                }
            }
        }
    }
    drop(slots);
    if let Some(name) = bounce_worker {
        sim.bounce(name);
    }
    let struck = match event {
        FaultEvent::CrashWorker(index) | FaultEvent::RestartWorker(index) => {
            Some(plan.workers[*index].name.as_str())
        }
        FaultEvent::Partition(Some(index)) | FaultEvent::Repair(Some(index)) => {
            Some(plan.workers[*index].name.as_str())
        }
        _ => None,
    };
    if applied && trace.enabled() {
        trace.record_fault(at_us, struck, plan.describe(event));
    }
    trace.line_at(at_us, None, || {
        format!(
            "driver: {}{}",
            plan.describe(event),
            if applied { "" } else { " (no effect)" }
        )
    });
}
