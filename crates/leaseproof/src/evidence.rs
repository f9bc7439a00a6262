//! Writing what a judged run leaves behind: its history (JSON lines) and its
//! timeline (one HTML page), where the user asked for them.
//!
//! Invariant: a file that cannot be written is an error the command exits
//! with (2), named with its path; nothing is reported written that was not.

use std::path::Path;
use std::process::ExitCode;

use leaseproof_history::{Annotation, CheckReport, History};

/// Where a command announces the files it wrote.
#[derive(Clone, Copy)]
pub(crate) enum Announce {
    /// With its results (`clients`).
    Stdout,
    /// Beside its results, which are the standard output (`race`).
    Stderr,
}

impl Announce {
    fn say(self, line: String) {
        match self {
            Announce::Stdout => println!("{line}"),
            Announce::Stderr => eprintln!("{line}"),
        }
    }
}

/// Refuses, before any work, output files that could not be written or
/// would overwrite each other: two options naming one path, or a path whose
/// directory does not exist. `outputs` pairs each option with its path.
pub(crate) fn refuse_unwritable_outputs(
    command: &str,
    outputs: &[(&str, Option<&Path>)],
) -> Result<(), ExitCode> {
    let given: Vec<(&str, &Path)> = outputs
        .iter()
        .filter_map(|(option, path)| path.map(|path| (*option, path)))
        .collect();
    for (index, (option, path)) in given.iter().enumerate() {
        if let Some((other, _)) = given[..index].iter().find(|(_, earlier)| earlier == path) {
            eprintln!(
                "leaseproof {command}: {other} and {option} both name {}: one would overwrite the other",
                path.display()
            );
            return Err(ExitCode::from(2));
        }
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if !directory.is_dir() {
            eprintln!(
                "leaseproof {command}: {option} {}: no directory {} to write it in",
                path.display(),
                directory.display()
            );
            return Err(ExitCode::from(2));
        }
        if path.is_dir() {
            eprintln!(
                "leaseproof {command}: {option} {}: a directory, not a file",
                path.display()
            );
            return Err(ExitCode::from(2));
        }
    }
    Ok(())
}

/// A judged history to write: the command that judged it and the page's title.
pub(crate) struct Evidence<'a> {
    pub(crate) command: &'static str,
    pub(crate) title: String,
    pub(crate) history: &'a History,
    pub(crate) report: &'a CheckReport,
    /// What the history does not record but the timeline draws (the
    /// strikes of a clients run).
    pub(crate) marks: &'a [Annotation],
}

impl Evidence<'_> {
    /// Writes the history to `history_path` and the timeline to `html_path`,
    /// each only when given.
    pub(crate) fn write(
        &self,
        history_path: Option<&Path>,
        html_path: Option<&Path>,
        announce: Announce,
    ) -> Result<(), ExitCode> {
        if let Some(path) = history_path {
            if let Err(error) = self.history.save(path) {
                eprintln!("leaseproof {}: {error}", self.command);
                return Err(ExitCode::from(2));
            }
            announce.say(format!("history written to {}", path.display()));
        }
        if let Some(path) = html_path {
            let html = leaseproof_history::timeline_html(
                &self.title,
                self.history,
                self.report,
                self.marks,
            );
            if let Err(error) = std::fs::write(path, html) {
                eprintln!(
                    "leaseproof {}: writing {}: {error}",
                    self.command,
                    path.display()
                );
                return Err(ExitCode::from(2));
            }
            announce.say(format!("timeline written to {}", path.display()));
        }
        Ok(())
    }
}
