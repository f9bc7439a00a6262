//! A history as a picture: one self-contained HTML file with an inline SVG
//! timeline (Jepsen's `timeline.html` is the anchor).
//!
//! Goal: see a failure instead of reading 2,700 trace lines. One lane per
//! worker incarnation: each operation a bar from its invocation to its
//! outcome (ok, refused, stale, failed, unknown, never completed — distinct
//! marks), the worker's belief intervals under it, and the faults injected
//! into it; below, per scope, every grant's server-time interval with its
//! token and every guarded row at its commit time. The checker's violations
//! are outlined in red on the events and rows that prove them and listed
//! with links to them; hovering any mark shows its full record.
//! Method: plain string building — no template engine, no script from the
//! network; inline JavaScript (`timeline.js`) highlights the evidence and
//! zooms and pans the time axis, the view kept in the address. Worker events
//! sit on the common true-time axis; server times are placed on it with one
//! offset, the median of `invoke/complete midpoint − granted_at` over the ok
//! acquisitions (said in the picture: server and worker clocks differ).
//! Invariant: the output depends only on its inputs (same history, same
//! bytes); every event and row the report names has an element with its id.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::check::{CheckReport, Violation};
use crate::event::{EventKind, FailReason, GuardedRow, Op, OpResult, Outcome};
use crate::history::History;

/// Something that happened to a worker (or the whole run) that the history
/// does not record: an injected pause, a crash, a partition, a lost reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Annotation {
    /// When, on the history's true-time axis (µs).
    pub true_time_us: i64,
    /// The worker it struck (its lanes), or `None` for the whole run.
    pub worker: Option<String>,
    /// What happened, one line.
    pub text: String,
}

/// Width of the time axis, px.
/// With the labels and the page's margins, the page fits a 1,400 px window.
const AXIS_WIDTH: f64 = 1_120.0;
/// Width of the lane labels, px.
const LABEL_WIDTH: f64 = 190.0;
/// Height of one worker lane, px.
const LANE_HEIGHT: f64 = 46.0;
/// Height of one scope's grant lane, px.
const GRANT_LANE_HEIGHT: f64 = 58.0;
/// Space for the time ticks at the top, px.
const AXIS_HEIGHT: f64 = 30.0;

/// The whole HTML document for `history` as judged in `report`.
pub fn timeline_html(
    title: &str,
    history: &History,
    report: &CheckReport,
    annotations: &[Annotation],
) -> String {
    let picture = Picture::new(history, report, annotations);
    let mut html = String::new();
    let verdict = if report.violations.is_empty() {
        "PASS".to_string()
    } else {
        format!("FAIL: {} violation(s)", report.violations.len())
    };
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title} — leaseproof timeline</title>\n<style>{STYLE}</style></head>\n<body>\n\
         <h1>{title}</h1>\n<p class=\"verdict {class}\">{verdict}</p>\n",
        title = escape(title),
        class = if report.violations.is_empty() {
            "pass"
        } else {
            "fail"
        },
        verdict = escape(&verdict),
    );
    html.push_str(LEGEND);
    let _ = writeln!(
        html,
        "<p class=\"note\">Worker events on the common true-time axis, from the first event \
         (at {} on the history's clock) over {}. Server times (grants, commits) placed with one \
         offset: server − true ≈ {} (the median, over the ok acquisitions and writes, of their \
         invoke/complete midpoint − the server time they reported). A grant reaching past the \
         last event is cut there.</p>",
        format_us(picture.start_us),
        format_us(picture.end_us - picture.start_us),
        format_signed_us(-picture.server_to_true_us),
    );
    html.push_str(ZOOM_CONTROLS);
    html.push_str(&picture.svg());
    html.push_str(&violations_list(report));
    html.push_str("<script>");
    html.push_str(SCRIPT);
    html.push_str("</script>\n</body></html>\n");
    html
}

/// One operation: invocation, completion (if any), and what it was.
struct OpBar<'h> {
    op_id: u64,
    op: &'h Op,
    invoke_event: u64,
    invoke_us: i64,
    complete: Option<(u64, i64, &'h Outcome)>,
    record: String,
}

/// One grant, from the ok outcomes that report it.
#[derive(Default)]
struct GrantBar {
    owner: String,
    granted_at_us: i64,
    end_us: i64,
    events: Vec<u64>,
}

struct Lane<'h> {
    worker: &'h str,
    incarnation: u64,
    ops: Vec<OpBar<'h>>,
    beliefs: Vec<BeliefBar>,
}

/// One belief interval: from its start event to its end event, if any.
struct BeliefBar {
    start_us: i64,
    end_us: Option<i64>,
    token: u64,
    start_event: u64,
    end_event: Option<u64>,
    record: String,
}

/// What a scope's lane shows: its grants (server time), the guarded rows and
/// the work rows of unfenced writes (at their commit times).
#[derive(Default)]
struct ScopeMarks<'h> {
    grants: BTreeMap<u64, GrantBar>,
    rows: Vec<&'h GuardedRow>,
    work_rows: Vec<&'h crate::event::WorkRow>,
}

struct Picture<'h> {
    lanes: Vec<Lane<'h>>,
    scopes: BTreeMap<&'h str, ScopeMarks<'h>>,
    annotations: &'h [Annotation],
    start_us: i64,
    end_us: i64,
    /// Added to a server time to place it on the true-time axis.
    server_to_true_us: i64,
    flagged_events: BTreeSet<u64>,
    flagged_rows: BTreeSet<u64>,
}

impl<'h> Picture<'h> {
    fn new(history: &'h History, report: &CheckReport, annotations: &'h [Annotation]) -> Self {
        let mut lanes: Vec<Lane<'h>> = Vec::new();
        let mut lane_of: BTreeMap<(&str, u64), usize> = BTreeMap::new();
        let mut op_at: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        let mut open_beliefs: BTreeMap<(usize, &str), usize> = BTreeMap::new();
        let mut scopes: BTreeMap<&str, ScopeMarks<'h>> = BTreeMap::new();
        // Estimates of (true time − server time): an acquisition's midpoint
        // against its grant, a write's against its rows' commit time.
        let mut midpoint_minus_granted: Vec<i64> = Vec::new();
        let mut write_span: BTreeMap<(&str, u64), i64> = BTreeMap::new();
        for event in &history.events {
            let key = (event.worker.as_str(), event.incarnation);
            let lane = *lane_of.entry(key).or_insert_with(|| {
                lanes.push(Lane {
                    worker: &event.worker,
                    incarnation: event.incarnation,
                    ops: Vec::new(),
                    beliefs: Vec::new(),
                });
                lanes.len() - 1
            });
            let record = serde_json::to_string(event).unwrap_or_default();
            match &event.kind {
                EventKind::Invoke { op_id, op } => {
                    op_at.insert(*op_id, (lane, lanes[lane].ops.len()));
                    lanes[lane].ops.push(OpBar {
                        op_id: *op_id,
                        op,
                        invoke_event: event.index,
                        invoke_us: event.true_time_us,
                        complete: None,
                        record,
                    });
                }
                EventKind::Complete { op_id, outcome } => {
                    let Some(&(lane, index)) = op_at.get(op_id) else {
                        continue;
                    };
                    let bar = &mut lanes[lane].ops[index];
                    bar.complete = Some((event.index, event.true_time_us, outcome));
                    bar.record.push('\n');
                    bar.record.push_str(&record);
                    if let Outcome::Ok { result } = outcome {
                        let scope = bar.op.scope();
                        let entry = scopes.entry(scope).or_default();
                        match result {
                            OpResult::Lease {
                                token,
                                owner,
                                granted_at_us,
                                expires_at_us,
                            } => {
                                if matches!(bar.op, Op::Acquire { .. }) {
                                    midpoint_minus_granted.push(
                                        bar.invoke_us + (event.true_time_us - bar.invoke_us) / 2
                                            - granted_at_us,
                                    );
                                }
                                let grant =
                                    entry.grants.entry(*token).or_insert_with(|| GrantBar {
                                        owner: owner.clone(),
                                        granted_at_us: *granted_at_us,
                                        end_us: *expires_at_us,
                                        events: Vec::new(),
                                    });
                                grant.end_us = grant.end_us.max(*expires_at_us);
                                grant.events.push(event.index);
                            }
                            OpResult::Released { released_at_us } => {
                                if let Op::Release { token, .. } = bar.op {
                                    if let Some(grant) = entry.grants.get_mut(token) {
                                        grant.end_us = grant.end_us.min(*released_at_us);
                                        grant.events.push(event.index);
                                    }
                                }
                            }
                            OpResult::Written {} => {
                                if let Op::Write {
                                    owner, cycle_id, ..
                                } = bar.op
                                {
                                    write_span.insert(
                                        (owner.as_str(), *cycle_id),
                                        bar.invoke_us + (event.true_time_us - bar.invoke_us) / 2,
                                    );
                                }
                            }
                            _ => {}
                        }
                    }
                }
                EventKind::BeliefStart { scope, token } => {
                    open_beliefs.insert((lane, scope), lanes[lane].beliefs.len());
                    lanes[lane].beliefs.push(BeliefBar {
                        start_us: event.true_time_us,
                        end_us: None,
                        token: *token,
                        start_event: event.index,
                        end_event: None,
                        record: format!("believes it holds {scope} under token {token}\n{record}"),
                    });
                }
                EventKind::BeliefEnd { scope, reason, .. } => {
                    if let Some(index) = open_beliefs.remove(&(lane, scope.as_str())) {
                        let belief = &mut lanes[lane].beliefs[index];
                        belief.end_us = Some(event.true_time_us);
                        belief.end_event = Some(event.index);
                        let _ = write!(belief.record, "\nends: {reason}");
                    }
                }
            }
        }
        for row in &history.guarded_rows {
            scopes.entry(&row.scope).or_default().rows.push(row);
        }
        for row in &history.work_rows {
            scopes.entry(&row.scope).or_default().work_rows.push(row);
            if let (Some(committed_at_us), Some(midpoint)) = (
                row.committed_at_us,
                write_span.get(&(row.owner.as_str(), row.cycle_id)),
            ) {
                midpoint_minus_granted.push(midpoint - committed_at_us);
            }
        }
        midpoint_minus_granted.sort_unstable();
        let server_to_true_us = midpoint_minus_granted
            .get(midpoint_minus_granted.len() / 2)
            .copied()
            .unwrap_or(0);
        let mut times: Vec<i64> = history
            .events
            .iter()
            .map(|event| event.true_time_us)
            .chain(annotations.iter().map(|note| note.true_time_us))
            .collect();
        // The axis fits the activity: events, faults and rows. A grant that
        // outlives the last event (never released, a long TTL) is cut there.
        for marks in scopes.values() {
            for row in &marks.rows {
                times.push(row.committed_at_us.unwrap_or(row.written_at_us) + server_to_true_us);
            }
            for row in &marks.work_rows {
                if let Some(committed_at_us) = row.committed_at_us {
                    times.push(committed_at_us + server_to_true_us);
                }
            }
        }
        // Lanes in natural order of their names (w2 before w10), then
        // incarnation.
        lanes.sort_by(|a, b| {
            natural_key(a.worker)
                .cmp(&natural_key(b.worker))
                .then(a.incarnation.cmp(&b.incarnation))
        });
        let start_us = times.iter().copied().min().unwrap_or(0);
        let end_us = times
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(start_us.saturating_add(1));
        let flagged = |violations: &[Violation]| {
            let events: BTreeSet<u64> = violations
                .iter()
                .flat_map(|violation| violation.events.iter().copied())
                .collect();
            let rows: BTreeSet<u64> = violations
                .iter()
                .flat_map(|violation| violation.rows.iter().copied())
                .collect();
            (events, rows)
        };
        let (flagged_events, flagged_rows) = flagged(&report.violations);
        Picture {
            lanes,
            scopes,
            annotations,
            start_us,
            end_us,
            server_to_true_us,
            flagged_events,
            flagged_rows,
        }
    }

    /// The x of `true_us`, clamped to the axis (a grant reaching beyond the
    /// activity is cut at its edge).
    fn x(&self, true_us: i64) -> f64 {
        let span = self.end_us.saturating_sub(self.start_us).max(1) as f64;
        let at = true_us.clamp(self.start_us, self.end_us);
        LABEL_WIDTH + (at - self.start_us) as f64 / span * AXIS_WIDTH
    }

    fn svg(&self) -> String {
        let height = AXIS_HEIGHT
            + self.lanes.len() as f64 * LANE_HEIGHT
            + self.scopes.len() as f64 * GRANT_LANE_HEIGHT
            + 10.0;
        let width = LABEL_WIDTH + AXIS_WIDTH + 20.0;
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             viewBox=\"0 0 {width:.0} {height:.0}\" id=\"timeline\" data-axis-x=\"{LABEL_WIDTH:.0}\" \
             data-axis-width=\"{AXIS_WIDTH:.0}\" data-span-us=\"{span_us}\">\n<defs><pattern id=\"hatch\" \
             width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
             patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#e1bee7\"/>\
             <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#6a1b9a\" stroke-width=\"3\"/>\
             </pattern><clipPath id=\"plot-clip\"><rect x=\"{LABEL_WIDTH:.0}\" y=\"0\" \
             width=\"{clip_width:.0}\" height=\"{height:.0}\"/></clipPath></defs>",
            span_us = self.end_us.saturating_sub(self.start_us).max(1),
            // The bars' minimum widths may reach a little past the axis.
            clip_width = AXIS_WIDTH + 20.0,
        );
        self.axis(&mut svg, height);
        let mut y = AXIS_HEIGHT;
        for lane in &self.lanes {
            self.worker_lane(&mut svg, lane, y);
            y += LANE_HEIGHT;
        }
        for (scope, marks) in &self.scopes {
            self.grant_lane(&mut svg, scope, marks, y);
            y += GRANT_LANE_HEIGHT;
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn axis(&self, svg: &mut String, height: f64) {
        let span_us = self.end_us.saturating_sub(self.start_us).max(1);
        // About ten ticks at a round step.
        let step_us = [
            1,
            2,
            5,
            10,
            20,
            50,
            100,
            200,
            500,
            1_000,
            2_000,
            5_000,
            10_000,
            20_000,
            50_000,
            100_000,
            200_000,
            500_000,
            1_000_000,
            2_000_000,
            5_000_000,
            10_000_000,
            30_000_000,
            60_000_000,
            300_000_000,
            600_000_000,
            3_600_000_000,
        ]
        .into_iter()
        .find(|step| span_us / step <= 12)
        // Longer than half a day: a power of ten of hours, still about ten
        // ticks (a file's times may span centuries; its ticks may not).
        .unwrap_or_else(|| {
            let mut step_us: i64 = 3_600_000_000;
            while span_us / step_us > 12 {
                step_us = step_us.saturating_mul(10);
            }
            step_us
        });
        // Round steps from the first event: the labels read +0.5 s, +1 s, …
        // The page's script redraws them in this group when zoomed.
        svg.push_str("<g id=\"ticks\">");
        let mut tick = self.start_us + step_us;
        while tick <= self.end_us {
            let x = self.x(tick);
            let _ = writeln!(
                svg,
                "<line class=\"tick\" x1=\"{x:.1}\" y1=\"{top:.0}\" x2=\"{x:.1}\" y2=\"{height:.0}\"/>\
                 <text class=\"tick-label\" x=\"{x:.1}\" y=\"{label:.0}\">{text}</text>",
                top = AXIS_HEIGHT - 6.0,
                label = AXIS_HEIGHT - 10.0,
                // Relative to the first event: a history's clock may count
                // from anywhere (a process's monotonic clock).
                text = escape(&format_signed_us(tick - self.start_us)),
            );
            let Some(next) = tick.checked_add(step_us) else {
                break;
            };
            tick = next;
        }
        svg.push_str("</g>\n");
    }

    fn worker_lane(&self, svg: &mut String, lane: &Lane<'_>, y: f64) {
        let _ = writeln!(
            svg,
            "<rect class=\"lane\" x=\"0\" y=\"{y:.0}\" width=\"{width:.0}\" height=\"{LANE_HEIGHT:.0}\"/>\
             <text class=\"lane-label\" x=\"6\" y=\"{label_y:.0}\">{worker} #{incarnation}</text>",
            width = LABEL_WIDTH + AXIS_WIDTH + 20.0,
            label_y = y + 20.0,
            worker = escape(lane.worker),
            incarnation = lane.incarnation,
        );
        svg.push_str(PLOT_OPEN);
        for bar in &lane.ops {
            self.op_bar(svg, bar, y + 4.0);
        }
        for belief in &lane.beliefs {
            let x1 = self.x(belief.start_us);
            let x2 = self.x(belief.end_us.unwrap_or(self.end_us)).max(x1 + 1.0);
            let flagged = self.flagged_events.contains(&belief.start_event)
                || belief
                    .end_event
                    .is_some_and(|event| self.flagged_events.contains(&event));
            let end_anchor = belief
                .end_event
                .map(|event| format!("<g id=\"ev-{event}\">"))
                .unwrap_or_default();
            let _ = writeln!(
                svg,
                "<g class=\"belief-mark{flag}\" id=\"ev-{start}\">{end_anchor}<rect class=\"belief{open}\" \
                 x=\"{x1:.1}\" y=\"{by:.1}\" width=\"{w:.1}\" height=\"6\" fill=\"{color}\">\
                 <title>{title}</title></rect>{end_close}</g>",
                flag = if flagged { " violation" } else { "" },
                start = belief.start_event,
                open = if belief.end_us.is_none() { " open" } else { "" },
                by = y + 25.0,
                w = x2 - x1,
                color = token_color(belief.token),
                title = escape(&belief.record),
                end_close = if belief.end_event.is_some() { "</g>" } else { "" },
            );
        }
        for note in self.annotations {
            let strikes = match &note.worker {
                Some(worker) => worker == lane.worker,
                None => true,
            };
            if !strikes {
                continue;
            }
            let x = self.x(note.true_time_us);
            let my = y + 34.0;
            let _ = writeln!(
                svg,
                "<path class=\"fault\" d=\"M{x:.1},{my:.1} l-5,9 l10,0 z\"><title>{title}</title></path>",
                title = escape(&format!("{} {}", format_us(note.true_time_us), note.text)),
            );
        }
        svg.push_str("</g>\n");
    }

    fn op_bar(&self, svg: &mut String, bar: &OpBar<'_>, y: f64) {
        let x1 = self.x(bar.invoke_us);
        let (x2, class, end_event) = match bar.complete {
            Some((event, complete_us, outcome)) => {
                let class = match outcome {
                    Outcome::Ok { .. } => "ok",
                    Outcome::Fail {
                        reason: FailReason::Held,
                    } => "held",
                    Outcome::Fail {
                        reason: FailReason::Stale,
                    } => "stale",
                    Outcome::Fail {
                        reason: FailReason::Error(_),
                    } => "error",
                    Outcome::Unknown { .. } => "unknown",
                };
                (self.x(complete_us), class, Some(event))
            }
            None => (self.x(self.end_us), "open", None),
        };
        let x2 = x2.max(x1 + 2.0);
        let flagged = self.flagged_events.contains(&bar.invoke_event)
            || end_event.is_some_and(|event| self.flagged_events.contains(&event));
        let (letter, token) = match bar.op {
            Op::Acquire { .. } => ("A", None),
            Op::Renew { token, .. } => ("R", Some(*token)),
            Op::Release { token, .. } => ("X", Some(*token)),
            Op::Commit { token, .. } => ("C", Some(*token)),
            Op::Write { .. } => ("W", None),
        };
        let label = match token {
            Some(token) => format!("{letter} t{token}"),
            None => letter.to_string(),
        };
        // Both events of the operation are anchors: the report may name either.
        let _ = write!(
            svg,
            "<g class=\"op {class}{flag}\" id=\"ev-{invoke}\" data-op=\"{op_id}\">",
            flag = if flagged { " violation" } else { "" },
            invoke = bar.invoke_event,
            op_id = bar.op_id,
        );
        if let Some(event) = end_event {
            let _ = write!(svg, "<g id=\"ev-{event}\">");
        }
        let _ = write!(
            svg,
            "<rect x=\"{x1:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"16\"/>",
            w = x2 - x1
        );
        if x2 - x1 > 34.0 {
            let _ = write!(
                svg,
                "<text x=\"{tx:.1}\" y=\"{ty:.1}\">{label}</text>",
                tx = x1 + 3.0,
                ty = y + 12.0,
                label = escape(&label)
            );
        }
        let _ = write!(svg, "<title>{}</title>", escape(&bar.record));
        if end_event.is_some() {
            svg.push_str("</g>");
        }
        svg.push_str("</g>\n");
    }

    fn grant_lane(&self, svg: &mut String, scope: &str, marks: &ScopeMarks<'_>, y: f64) {
        let (grants, rows) = (&marks.grants, &marks.rows);
        let _ = writeln!(
            svg,
            "<rect class=\"lane grants\" x=\"0\" y=\"{y:.0}\" width=\"{width:.0}\" height=\"{GRANT_LANE_HEIGHT:.0}\"/>\
             <text class=\"lane-label\" x=\"6\" y=\"{ly1:.0}\">grants of {scope}</text>\
             <text class=\"lane-label small\" x=\"6\" y=\"{ly2:.0}\">server clock; commits below</text>",
            width = LABEL_WIDTH + AXIS_WIDTH + 20.0,
            ly1 = y + 20.0,
            ly2 = y + 36.0,
            scope = escape(scope),
        );
        svg.push_str(PLOT_OPEN);
        for (token, grant) in grants {
            let x1 = self.x(grant.granted_at_us + self.server_to_true_us);
            let x2 = self.x(grant.end_us + self.server_to_true_us).max(x1 + 2.0);
            let flagged = grant
                .events
                .iter()
                .any(|event| self.flagged_events.contains(event));
            // Alternate rows so adjacent grants stay apart.
            let gy = y + 4.0 + (token % 2) as f64 * 14.0;
            let _ = writeln!(
                svg,
                "<g class=\"grant{flag}\"><rect x=\"{x1:.1}\" y=\"{gy:.1}\" width=\"{w:.1}\" height=\"12\" \
                 fill=\"{color}\"/><text x=\"{tx:.1}\" y=\"{ty:.1}\">t{token}</text><title>{title}</title></g>",
                flag = if flagged { " violation" } else { "" },
                w = x2 - x1,
                color = token_color(*token),
                tx = x1 + 2.0,
                ty = gy + 10.0,
                title = escape(&format!(
                    "token {token} to {} from {} to {} (server time)",
                    grant.owner,
                    format_us(grant.granted_at_us),
                    format_us(grant.end_us)
                )),
            );
        }
        for row in rows {
            let at_us = row.committed_at_us.unwrap_or(row.written_at_us);
            let x = self.x(at_us + self.server_to_true_us);
            let flagged = self.flagged_rows.contains(&row.seq);
            let _ = writeln!(
                svg,
                "<rect class=\"row{flag}\" id=\"row-{seq}\" x=\"{rx:.1}\" y=\"{ry:.1}\" width=\"3\" \
                 height=\"14\" fill=\"{color}\"><title>{title}</title></rect>",
                flag = if flagged { " violation" } else { "" },
                seq = row.seq,
                rx = x - 1.5,
                ry = y + 36.0,
                color = token_color(row.token),
                title = escape(&serde_json::to_string(row).unwrap_or_default()),
            );
        }
        for row in &marks.work_rows {
            let Some(committed_at_us) = row.committed_at_us else {
                continue;
            };
            let x = self.x(committed_at_us + self.server_to_true_us);
            let flagged = self.flagged_rows.contains(&row.seq);
            let _ = writeln!(
                svg,
                "<rect class=\"row work{flag}\" id=\"row-{seq}\" x=\"{rx:.1}\" y=\"{ry:.1}\" width=\"3\" \
                 height=\"14\" fill=\"#546e7a\"><title>{title}</title></rect>",
                flag = if flagged { " violation" } else { "" },
                seq = row.seq,
                rx = x - 1.5,
                ry = y + 36.0,
                title = escape(&serde_json::to_string(row).unwrap_or_default()),
            );
        }
        svg.push_str("</g>\n");
    }
}

/// A name as text and number runs, so `w2` sorts before `w10`.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    let mut key = Vec::new();
    let (mut text, mut digits) = (String::new(), String::new());
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((
                    std::mem::take(&mut text),
                    digits.parse().unwrap_or(u64::MAX),
                ));
                digits.clear();
            }
            text.push(c);
        }
    }
    key.push((text, digits.parse().unwrap_or(0)));
    key
}

fn violations_list(report: &CheckReport) -> String {
    let mut html = String::new();
    let section = |html: &mut String, heading: &str, class: &str, violations: &[Violation]| {
        if violations.is_empty() {
            return;
        }
        let _ = writeln!(html, "<h2>{}</h2>\n<ol class=\"{class}\">", escape(heading));
        for (index, violation) in violations.iter().enumerate() {
            let targets: Vec<String> = violation
                .events
                .iter()
                .map(|event| format!("ev-{event}"))
                .chain(violation.rows.iter().map(|seq| format!("row-{seq}")))
                .collect();
            let _ = write!(
                html,
                "<li class=\"violation-item\" id=\"{class}-{index}\" data-targets=\"{targets}\">\
                 <b>{code}</b> {scope}: {message}",
                targets = targets.join(" "),
                code = escape(violation.invariant.code()),
                scope = escape(&violation.scope),
                message = escape(&violation.message),
            );
            if !targets.is_empty() {
                html.push_str(" — evidence:");
                for target in &targets {
                    let _ = write!(html, " <a href=\"#{target}\">{target}</a>");
                }
            }
            html.push_str("</li>\n");
        }
        html.push_str("</ol>\n");
    };
    section(&mut html, "Violations", "violations", &report.violations);
    section(
        &mut html,
        "Possible violations (the evidence cannot decide)",
        "possible",
        &report.possible,
    );
    if report.violations.is_empty() && report.possible.is_empty() {
        html.push_str("<p class=\"none\">No violation.</p>\n");
    }
    for note in &report.not_judged {
        let _ = writeln!(html, "<p class=\"note\">Not judged: {}</p>", escape(note));
    }
    html
}

/// A stable colour per token.
fn token_color(token: u64) -> String {
    let hue = (token.wrapping_mul(67)) % 360;
    format!("hsl({hue}, 60%, 62%)")
}

fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn format_us(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let us = us.unsigned_abs();
    if us >= 1_000_000 {
        format!("{sign}{}.{:03} s", us / 1_000_000, (us % 1_000_000) / 1_000)
    } else if us >= 1_000 {
        format!("{sign}{}.{:03} ms", us / 1_000, us % 1_000)
    } else {
        format!("{sign}{us} µs")
    }
}

fn format_signed_us(us: i64) -> String {
    if us >= 0 {
        format!("+{}", format_us(us))
    } else {
        format_us(us)
    }
}

const STYLE: &str = "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#212121}\
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:16px 0 4px}\
.verdict{font-weight:bold}.verdict.pass{color:#2e7d32}.verdict.fail{color:#c62828}\
.note{color:#616161;max-width:1200px}\
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:18px;height:10px;margin-right:4px;vertical-align:middle;border:1px solid #555}\
svg{border:1px solid #ddd;background:#fff}\
.lane{fill:#fafafa;stroke:#eee}.lane.grants{fill:#f3f6fb}\
.lane-label{font-size:12px;fill:#424242}.lane-label.small{font-size:10px;fill:#757575}\
.tick{stroke:#eee}.tick-label{font-size:10px;fill:#757575;text-anchor:middle}\
.op rect{stroke:#333;stroke-width:.5}.op text,.grant text{font-size:10px;fill:#111;pointer-events:none}\
.op.ok rect{fill:#81c784}.op.held rect{fill:#bdbdbd}.op.stale rect{fill:#ffb74d}\
.op.error rect{fill:#e57373}.op.unknown rect{fill:url(#hatch)}\
.op.open rect{fill:#fff;stroke-dasharray:4 2}\
.belief{opacity:.8}.belief.open{opacity:.4}\
.fault{fill:#d81b60}\
.violation rect,.row.violation,.grant.violation rect,.belief-mark.violation rect{stroke:#d50000;stroke-width:2.5}\
.hl rect,rect.hl{stroke:#00b0ff!important;stroke-width:4!important}\
.violation-item{margin:3px 0;cursor:zoom-in}.violation-item:hover{background:#fff3e0}\
.zoom{margin:6px 0;color:#616161}.zoom button{font:inherit;margin-right:4px;min-width:28px}\
#zoom-window{margin:0 6px;color:#212121}svg#timeline{cursor:grab;user-select:none}";

const LEGEND: &str = "<p class=\"legend\">\
<span><i style=\"background:#81c784\"></i>ok</span>\
<span><i style=\"background:#bdbdbd\"></i>refused (held)</span>\
<span><i style=\"background:#ffb74d\"></i>refused (stale)</span>\
<span><i style=\"background:#e57373\"></i>failed</span>\
<span><i style=\"background:#e1bee7\"></i>unknown outcome</span>\
<span><i style=\"background:#fff;border-style:dashed\"></i>never completed</span>\
<span><i style=\"background:hsl(67,60%,62%);height:5px\"></i>belief (colour = token)</span>\
<span><i style=\"background:#d81b60\"></i>injected fault</span>\
<span><i style=\"border:2px solid #d50000\"></i>evidence of a violation</span>\
A acquire, R renew, X release, C commit; tN token N.</p>\n";

/// The marks on the time axis of one lane: what the page's script zooms and
/// pans, clipped to the axis so a zoomed mark never covers the labels.
const PLOT_OPEN: &str = "<g class=\"plot\" clip-path=\"url(#plot-clip)\">";

/// The zoom buttons above the picture (the page's script gives them life).
const ZOOM_CONTROLS: &str =
    "<p class=\"zoom\"><button data-zoom=\"in\" title=\"zoom in (+)\">+</button>\
<button data-zoom=\"out\" title=\"zoom out (-)\">−</button>\
<button data-zoom=\"left\" title=\"earlier (←)\">←</button>\
<button data-zoom=\"right\" title=\"later (→)\">→</button>\
<button data-zoom=\"reset\" title=\"the whole run (0)\">whole run</button>\
<span id=\"zoom-window\">the whole run</span> — wheel to zoom, drag to pan, \
click a violation to zoom to its evidence</p>\n";

/// Highlighting, zoom and pan: see the file's own comment.
const SCRIPT: &str = include_str!("timeline.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_sort_by_name_with_numbers_in_order() {
        let mut names = vec!["w10", "w2", "w1", "reader", "w0", "a1b2", "a1b10"];
        names.sort_by_key(|name| natural_key(name));
        assert_eq!(names, ["a1b2", "a1b10", "reader", "w0", "w1", "w2", "w10"]);
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn formats_times_with_units() {
        assert_eq!(format_us(12), "12 µs");
        assert_eq!(format_us(1_500), "1.500 ms");
        assert_eq!(format_us(2_000_001), "2.000 s");
        assert_eq!(format_us(-1_500), "-1.500 ms");
        assert_eq!(format_signed_us(5), "+5 µs");
    }
}
