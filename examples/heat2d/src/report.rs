//! The run report: one JSON line, the last line rank 0 writes to stdout.

use std::io::Write;

use serde::{Deserialize, Serialize};

/// `value` as one line of JSON. Serializing plain fields cannot fail; non-finite seconds
/// become null.
fn json_line(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Writes `line` and a newline to stdout and flushes it: the report is the last line, and
/// a launcher reads it as soon as the process ends.
fn print_line(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// Result of a run. Rank 0 prints it with [`Report::print`] as its last stdout line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Hex SHA-256 of the final grid (see [`crate::checksum()`]).
    pub checksum: String,
    /// Iterations computed.
    pub iterations: u64,
    /// Wall-clock seconds of the iteration loop (setup and checksum excluded).
    pub seconds: f64,
    /// Ranks at the end of the run.
    pub ranks: usize,
    /// Global computed rows.
    pub rows: usize,
    /// Columns, boundary columns included.
    pub cols: usize,
    /// Migrations performed (instrumented runs only; omitted when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrations: Option<u64>,
    /// Resizes performed (instrumented runs only; omitted when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resizes: Option<u64>,
    /// Host of each rank at the end, by rank (instrumented runs only; omitted when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// The MPI library the run used: the first line of its `MPI_Get_library_version`
    /// (`pcm::mpi_library_version`). Empty in reports written before it was added.
    #[serde(default)]
    pub mpi_library: String,
}

impl Report {
    /// The report as one line of JSON (no trailing newline).
    #[must_use]
    pub fn to_json(&self) -> String {
        json_line(self)
    }

    /// Writes [`Report::to_json`] and a newline to stdout and flushes it.
    ///
    /// # Errors
    /// An I/O error writing stdout.
    pub fn print(&self) -> std::io::Result<()> {
        print_line(&self.to_json())
    }
}

/// `heat2d-plain`'s report: [`Report`] and when the grid last changed ([`crate::Settling`]),
/// as one JSON object. A run of `heat2d` with moves is compared with it, and the comparison
/// can fail only while the grid still changes: a test refuses it when `last_change` is well
/// below `iterations` (the grid had reached its fixed point), see the test harness's
/// `Report::reference_checksum`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlainReport {
    /// The report `heat2d` writes too.
    #[serde(flatten)]
    pub report: Report,
    /// The last iteration at which the grid still changed bit for bit, sampled every
    /// `iterations / 1024` iterations and at the last (0: never seen changing).
    pub last_change: u64,
}

impl Report {
    /// `heat2d-plain`'s report: this one and when the grid last changed.
    #[must_use]
    pub fn with_last_change(self, last_change: u64) -> PlainReport {
        PlainReport {
            report: self,
            last_change,
        }
    }
}

impl PlainReport {
    /// The report as one line of JSON (no trailing newline): [`Report::to_json`]'s fields,
    /// then `last_change`.
    #[must_use]
    pub fn to_json(&self) -> String {
        json_line(self)
    }

    /// Writes [`PlainReport::to_json`] and a newline to stdout and flushes it.
    ///
    /// # Errors
    /// An I/O error writing stdout.
    pub fn print(&self) -> std::io::Result<()> {
        print_line(&self.to_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(migrations: Option<u64>) -> Report {
        Report {
            checksum: "ab".into(),
            iterations: 10,
            seconds: 1.5,
            ranks: 2,
            rows: 8,
            cols: 9,
            migrations,
            resizes: None,
            hosts: None,
            mpi_library: "MPICH Version: 5.0.2".into(),
        }
    }

    #[test]
    fn given_no_migrations_then_field_is_omitted() {
        let json = report(None).to_json();
        assert_eq!(
            json,
            r#"{"checksum":"ab","iterations":10,"seconds":1.5,"ranks":2,"rows":8,"cols":9,"mpi_library":"MPICH Version: 5.0.2"}"#
        );
        let back: Report = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, report(None));
    }

    #[test]
    fn given_a_plain_report_then_last_change_follows_the_report_fields() {
        let plain = report(None).with_last_change(7);
        let json = plain.to_json();
        assert!(
            json.ends_with(r#","mpi_library":"MPICH Version: 5.0.2","last_change":7}"#),
            "{json}"
        );
        let back: PlainReport = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, plain);
    }

    #[test]
    fn given_migrations_then_field_is_present() {
        let json = report(Some(3)).to_json();
        assert!(json.contains(r#","migrations":3,"#), "{json}");
    }
}
