//! Support for the MPI/IOS benchmarks (`mpi-ios-bench`): running the project's binaries
//! under `mpirun` with a deadline and a process-group kill, a `pcmd serve` for the run,
//! statistics, and tables printed as text and as markdown.
//!
//! The benchmarks themselves live in the `mpi-ios-bench` binary (`src/main.rs`); the MPI
//! application they migrate is `pcm-state`, in `mpi-ios-bench-programs`
//! (`programs/src/bin/pcm-state.rs`). See `docs/benchmarks.md`.

pub mod adaptive;
pub mod agents;
pub mod checkpoint;
pub mod fault;
pub mod malleable_act;
pub mod paired;
pub mod pool;
pub mod pool_sim;
pub mod recovery;
pub mod scale;
pub mod scale_command;
pub mod scale_seeds;
pub mod summary;
pub mod synthetic_rank;
pub mod yardstick;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

pub use mpi_ios_tests::{try_bin, try_program, Finished, Group, HarnessError, MpiJob, Pcmd};

/// Copies the runs' logs (agents, pcmd, jobs: *.err, *.out, *.log) to `to`, best effort.
pub fn keep_logs(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    copy_logs(from, to, 0);
}

fn copy_logs(from: &Path, to: &Path, depth: usize) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if path.is_dir() && depth < 4 {
            copy_logs(&path, &to.join(&name), depth + 1);
        } else if name
            .to_str()
            .is_some_and(|n| n.ends_with(".err") || n.ends_with(".out") || n.ends_with(".log"))
            && std::fs::create_dir_all(to).is_ok()
        {
            let _ = std::fs::copy(&path, to.join(name));
        }
    }
}

/// Median (mean of the two middle values for an even count); NaN if empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Smallest value; NaN if empty.
pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::min).unwrap_or(f64::NAN)
}

/// Largest value; NaN if empty.
pub fn max(values: &[f64]) -> f64 {
    values.iter().copied().reduce(f64::max).unwrap_or(f64::NAN)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// `MemAvailable` from the text of `/proc/meminfo`, in bytes.
pub fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`, as text ("0.52 0.61 0.70").
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A table with a header row, printed as aligned text and as markdown.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Column titles.
    pub headers: Vec<String>,
    /// Rows, each as long as `headers`.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles and no rows.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|s| (*s).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (padded or cut to the header's length).
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// Aligned plain text, with a separator line under the header.
    pub fn to_text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (c, cell) in cells.iter().enumerate() {
                let _ = write!(out, "{cell:>w$}  ", w = widths[c]);
            }
            out.trim_end().to_owned()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        out.push_str(
            &"-".repeat(
                widths
                    .iter()
                    .map(|w| w + 2)
                    .sum::<usize>()
                    .saturating_sub(2),
            ),
        );
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }

    /// GitHub-flavoured markdown.
    pub fn to_markdown(&self) -> String {
        let row = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = row(&self.headers);
        out.push_str(&row(&vec!["---".to_owned(); self.headers.len()]));
        for r in &self.rows {
            out.push_str(&row(r));
        }
        out
    }
}

/// Appends a section (title, the command line, the table, notes) to the markdown file `path`.
pub fn append_markdown(path: &Path, title: &str, table: &Table, notes: &[String]) -> Result<()> {
    let command: Vec<String> = std::env::args().collect();
    let mut text = format!("### {title}\n\n`{}`\n\n", command.join(" "));
    text.push_str(&table.to_markdown());
    for note in notes {
        let _ = write!(text, "\n{note}\n");
    }
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn mem_available_parses_kib() {
        let text = "MemTotal: 100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn tables_render_as_text_and_markdown() {
        let mut t = Table::new(&["a", "bb"]);
        t.push(vec!["1".into(), "22222".into()]);
        assert_eq!(
            t.to_markdown(),
            "| a | bb |\n| --- | --- |\n| 1 | 22222 |\n"
        );
        assert!(t.to_text().starts_with("a     bb\n"));
    }
}
