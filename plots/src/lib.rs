//! Plots of MPI/IOS runs, written as SVG and PNG.
//!
//! The main job and the experiments of `mpi-ios-bench` (the paper's section 6.3, Figures
//! 12-18) show their results as pictures beside their tables. This crate draws the two kinds
//! of picture they need, on [`plotters`]:
//!
//! - [`TimePlot`]: one or more curves over time (throughput in iterations per second, say)
//!   with labelled vertical event markers ([`EventKind`]: load onset, load end, node join,
//!   node leave, migration, grow, shrink). Used by the main job and for Figures 13-16.
//!   [`throughput`] turns the completion times of iterations into such a curve.
//! - [`BarChart`]: grouped or stacked bars ([`Layout`]) over named categories, each bar with
//!   an optional spread whisker (min..max of repeats, say). Used for Figures 12, 17 and 18.
//!
//! Each `write(stem)` writes `stem.svg` and `stem.png` and returns their paths ([`Written`]).
//! Bad input (no data, a NaN, a bar count that does not match the categories) is an
//! [`Error`] naming it, never a panic.
//!
//! # Font
//! Text is laid out with a TrueType font loaded at run time (no fontconfig needed): the file
//! named by `$MPI_IOS_PLOT_FONT` if set (an error if it cannot be read), else DejaVu Sans
//! from Debian's `fonts-dejavu-core` (installed by `scripts/setup.sh`), else a few other
//! common locations. [`font_path`] tells which file is used.
//!
//! # Example
//! ```no_run
//! use mpi_ios_plots::{throughput, Bar, BarChart, Event, EventKind, Layout, TimePlot};
//!
//! # fn main() -> Result<(), mpi_ios_plots::Error> {
//! // Completion time (s since start) of every iteration of the adaptive run.
//! let done: Vec<f64> = (0..600).map(|i| i as f64 * 0.05).collect();
//! let written = TimePlot::new("heat2d under load")
//!     .x_label("time (s)")
//!     .y_label("iterations / s")
//!     .series("MPI/IOS", throughput(&done, 1.0)?)
//!     .event(Event::new(10.0, EventKind::LoadOnset, "hog on node B"))
//!     .event(Event::new(12.5, EventKind::Migration, "rank 1: B -> C"))
//!     .write("target/throughput")?;
//! println!("wrote {} and {}", written.svg.display(), written.png.display());
//!
//! // Figure 12 style: two bars per rank count, with min..max whiskers.
//! BarChart::new("PCM overhead", ["2 ranks", "4 ranks", "8 ranks"])
//!     .y_label("seconds")
//!     .series("plain MPI", vec![Bar::new(4.1).spread(4.0, 4.3), Bar::new(2.3), Bar::new(1.5)])
//!     .series("PCM", vec![Bar::new(4.2), Bar::new(2.4), Bar::new(1.6)])
//!     .layout(Layout::Grouped)
//!     .write("target/fig12")?;
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Default picture size in pixels (width, height).
pub const DEFAULT_SIZE: (u32, u32) = (1000, 560);

/// Environment variable naming the TrueType font file to use.
pub const FONT_ENV: &str = "MPI_IOS_PLOT_FONT";

/// Where a font is looked for when `$MPI_IOS_PLOT_FONT` is not set, in order.
pub const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// The font family name the font is registered under in plotters.
const FAMILY: &str = "sans-serif";

/// Why no font could be set up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FontError {
    /// The font file could not be read or is not a TrueType/OpenType font.
    #[error("font file {path}: {reason}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// `$MPI_IOS_PLOT_FONT` is not set and none of the usual places holds a font.
    #[error(
        "no TrueType font found (tried {tried:?}): install fonts-dejavu-core or set \
         MPI_IOS_PLOT_FONT to a .ttf file"
    )]
    NotFound {
        /// The places looked at.
        tried: Vec<PathBuf>,
    },
}

/// Why a plot could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable font.
    #[error(transparent)]
    Font(#[from] FontError),
    /// The data given cannot be plotted; the message names what is wrong.
    #[error("invalid plot data: {0}")]
    Invalid(String),
    /// Drawing or writing the output file failed.
    #[error("drawing {path}: {reason}")]
    Draw {
        /// The output file.
        path: PathBuf,
        /// What plotters reported.
        reason: String,
    },
}

/// The files a plot was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The SVG file (`stem.svg`).
    pub svg: PathBuf,
    /// The PNG file (`stem.png`).
    pub png: PathBuf,
}

static FONT: OnceLock<Result<PathBuf, FontError>> = OnceLock::new();

/// Loads and registers the font once per process, returning the file used.
///
/// See the crate docs for where it is looked for. Called by every `write`; call it early to
/// fail fast.
pub fn font_path() -> Result<PathBuf, FontError> {
    FONT.get_or_init(load_font).clone()
}

fn load_font() -> Result<PathBuf, FontError> {
    if let Some(path) = std::env::var_os(FONT_ENV) {
        // A font asked for by name must be used or refused, never silently replaced.
        let path = PathBuf::from(path);
        return register(&path).map(|()| path);
    }
    let mut tried = Vec::new();
    for candidate in FONT_CANDIDATES {
        let path = PathBuf::from(candidate);
        if path.is_file() {
            return register(&path).map(|()| path);
        }
        tried.push(path);
    }
    Err(FontError::NotFound { tried })
}

fn register(path: &Path) -> Result<(), FontError> {
    let bytes = std::fs::read(path).map_err(|e| FontError::Bad {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    // plotters keeps fonts for the life of the process; this runs once, so leaking is bounded.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    for style in [FontStyle::Normal, FontStyle::Bold] {
        plotters::style::register_font(FAMILY, style, bytes).map_err(|_| FontError::Bad {
            path: path.to_owned(),
            reason: "not a TrueType/OpenType font".to_owned(),
        })?;
    }
    Ok(())
}

/// What happened at an event marker; each kind has its own colour and legend entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A competing load started on a node.
    LoadOnset,
    /// A competing load stopped.
    LoadEnd,
    /// A node joined the pool.
    NodeJoin,
    /// A node left the pool.
    NodeLeave,
    /// A rank migrated.
    Migration,
    /// A malleable job grew (more ranks).
    Grow,
    /// A malleable job shrank (fewer ranks).
    Shrink,
    /// Anything else worth marking.
    Other,
}

impl EventKind {
    /// The legend text of this kind.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::LoadOnset => "load onset",
            EventKind::LoadEnd => "load end",
            EventKind::NodeJoin => "node join",
            EventKind::NodeLeave => "node leave",
            EventKind::Migration => "migration",
            EventKind::Grow => "grow",
            EventKind::Shrink => "shrink",
            EventKind::Other => "event",
        }
    }

    fn color(self) -> RGBColor {
        match self {
            EventKind::LoadOnset => RGBColor(214, 39, 40),
            EventKind::LoadEnd => RGBColor(44, 160, 44),
            EventKind::NodeJoin => RGBColor(23, 190, 207),
            EventKind::NodeLeave => RGBColor(127, 127, 127),
            EventKind::Migration => RGBColor(148, 103, 189),
            EventKind::Grow => RGBColor(0, 90, 50),
            EventKind::Shrink => RGBColor(140, 86, 75),
            EventKind::Other => RGBColor(188, 189, 34),
        }
    }
}

/// A labelled vertical marker at time `at` (same unit as the x axis).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Position on the x axis.
    pub at: f64,
    /// What happened.
    pub kind: EventKind,
    /// Short text written beside the marker (may be empty).
    pub label: String,
}

impl Event {
    /// An event of `kind` at `at`, labelled `label`.
    pub fn new(at: f64, kind: EventKind, label: impl Into<String>) -> Self {
        Event {
            at,
            kind,
            label: label.into(),
        }
    }
}

/// Colours of curves and bar series, in order (the usual "category10" set).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Turns the completion times of iterations into a throughput curve: iterations per second
/// in consecutive bins of `bin` seconds, each point at its bin's centre.
///
/// Times are seconds from any origin; they need not be sorted. The first bin starts at the
/// earliest time; the last, partial bin is scaled by its real width so a run's tail is not
/// shown as a drop.
pub fn throughput(done: &[f64], bin: f64) -> Result<Vec<(f64, f64)>, Error> {
    if !(bin.is_finite() && bin > 0.0) {
        return Err(Error::Invalid(format!(
            "throughput bin width must be positive, got {bin}"
        )));
    }
    if let Some(bad) = done.iter().find(|t| !t.is_finite()) {
        return Err(Error::Invalid(format!(
            "iteration time {bad} is not finite"
        )));
    }
    let (Some(start), Some(end)) = (
        done.iter().copied().reduce(f64::min),
        done.iter().copied().reduce(f64::max),
    ) else {
        return Ok(Vec::new());
    };
    let bins = (((end - start) / bin).floor() as usize) + 1;
    let mut counts = vec![0u64; bins];
    for t in done {
        let i = (((t - start) / bin).floor() as usize).min(bins - 1);
        counts[i] += 1;
    }
    Ok(counts
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let lo = start + i as f64 * bin;
            let width = if i + 1 == bins {
                (end - lo).max(bin * 0.05)
            } else {
                bin
            };
            let width = width.min(bin);
            (lo + width / 2.0, n as f64 / width)
        })
        .collect())
}

/// The x and y ranges of a plot, ((x0, x1), (y0, y1)).
type Ranges = ((f64, f64), (f64, f64));

/// Curves over time with event markers. Build it with the by-value setters, then
/// [`TimePlot::write`].
#[derive(Debug, Clone)]
pub struct TimePlot {
    title: String,
    x_label: String,
    y_label: String,
    series: Vec<(String, Vec<(f64, f64)>)>,
    events: Vec<Event>,
    size: (u32, u32),
}

impl TimePlot {
    /// An empty plot titled `title`; axes labelled "time (s)" and "iterations / s", size
    /// [`DEFAULT_SIZE`].
    pub fn new(title: impl Into<String>) -> Self {
        TimePlot {
            title: title.into(),
            x_label: "time (s)".to_owned(),
            y_label: "iterations / s".to_owned(),
            series: Vec::new(),
            events: Vec::new(),
            size: DEFAULT_SIZE,
        }
    }

    /// Sets the x axis label.
    pub fn x_label(mut self, label: impl Into<String>) -> Self {
        self.x_label = label.into();
        self
    }

    /// Sets the y axis label.
    pub fn y_label(mut self, label: impl Into<String>) -> Self {
        self.y_label = label.into();
        self
    }

    /// Adds a curve named `name` (its legend text) through `points` (x, y), drawn in order.
    pub fn series(mut self, name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        self.series.push((name.into(), points));
        self
    }

    /// Adds an event marker.
    pub fn event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Adds several event markers.
    pub fn events(mut self, events: impl IntoIterator<Item = Event>) -> Self {
        self.events.extend(events);
        self
    }

    /// Sets the picture size in pixels.
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.size = (width, height);
        self
    }

    /// Writes `stem.svg` and `stem.png` (any extension of `stem` is replaced).
    pub fn write(&self, stem: impl AsRef<Path>) -> Result<Written, Error> {
        let ranges = self.ranges()?;
        write_both(stem.as_ref(), self.size, &TimePicture(self, ranges))
    }

    fn ranges(&self) -> Result<Ranges, Error> {
        check_size(self.size)?;
        if self.series.iter().all(|(_, p)| p.is_empty()) {
            return Err(Error::Invalid(format!(
                "plot {:?} has no data points",
                self.title
            )));
        }
        for (name, points) in &self.series {
            if let Some(p) = points
                .iter()
                .find(|(x, y)| !x.is_finite() || !y.is_finite())
            {
                return Err(Error::Invalid(format!(
                    "series {name:?} has a non-finite point {p:?}"
                )));
            }
        }
        if let Some(e) = self.events.iter().find(|e| !e.at.is_finite()) {
            return Err(Error::Invalid(format!(
                "event {:?} is at a non-finite time",
                e.label
            )));
        }
        let xs = self
            .series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
            .chain(self.events.iter().map(|e| e.at));
        let (mut x0, mut x1) = min_max(xs).unwrap_or((0.0, 1.0));
        if x1 - x0 < 1e-9 {
            x0 -= 0.5;
            x1 += 0.5;
        }
        let y_top = min_max(
            self.series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|(_, y)| *y)),
        )
        .map_or(1.0, |(_, hi)| hi);
        let y_low = min_max(
            self.series
                .iter()
                .flat_map(|(_, p)| p.iter().map(|(_, y)| *y)),
        )
        .map_or(0.0, |(lo, _)| lo.min(0.0));
        // Head room above the curves for the event labels.
        let y_top = if y_top <= y_low { y_low + 1.0 } else { y_top };
        Ok(((x0, x1), (y_low, y_low + (y_top - y_low) * 1.25)))
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        ((x0, x1), (y0, y1)): Ranges,
    ) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let mut legend: Vec<(String, RGBColor, Mark)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), palette(i), Mark::Line))
            .collect();
        let mut kinds: Vec<EventKind> = Vec::new();
        for e in &self.events {
            if !kinds.contains(&e.kind) {
                kinds.push(e.kind);
                legend.push((e.kind.name().to_owned(), e.kind.color(), Mark::Dashed));
            }
        }
        let (plot_area, legend_area) = layout(root, &self.title, &legend)?;
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        let (x_span, y_span) = (x1 - x0, y1 - y0);
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&|v| tick(*v, x_span))
            .y_label_formatter(&|v| tick(*v, y_span))
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(|e| e.to_string())?;

        for (i, (_, points)) in self.series.iter().enumerate() {
            let color = palette(i);
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?;
        }

        let mut events = self.events.clone();
        events.sort_by(|a, b| a.at.total_cmp(&b.at));
        // Labels cycle through a few rows so that close events do not overwrite each other.
        const ROWS: usize = 4;
        let label_font = (FAMILY, 13).into_font();
        for (i, event) in events.iter().enumerate() {
            let color = event.kind.color();
            chart
                .draw_series(DashedLineSeries::new(
                    [(event.at, y0), (event.at, y1)],
                    6,
                    4,
                    color.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?;
            if !event.label.is_empty() {
                let row = (i % ROWS) as f64;
                let y = y1 - (y1 - y0) * (0.03 + 0.05 * row);
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!(" {}", event.label),
                        (event.at, y),
                        label_font.clone().color(&color),
                    )))
                    .map_err(|e| e.to_string())?;
            }
        }

        draw_legend(&legend_area, &legend)?;
        root.present().map_err(|e| e.to_string())
    }
}

/// How the series of a [`BarChart`] share a category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Side by side, one bar per series (compare sides: plain vs PCM).
    #[default]
    Grouped,
    /// On top of each other, one column per category (parts of a whole: store, load, spawn).
    Stacked,
}

/// One bar: its value and an optional spread (low, high), drawn as a whisker.
///
/// In a [`Layout::Stacked`] chart the whisker is drawn on the bar's own segment, shifted by
/// the segments below it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// Height of the bar.
    pub value: f64,
    /// Spread of the measurements behind `value` (min, max say), if any.
    pub spread: Option<(f64, f64)>,
}

impl Bar {
    /// A bar of height `value` without whisker.
    pub fn new(value: f64) -> Self {
        Bar {
            value,
            spread: None,
        }
    }

    /// Adds a whisker from `low` to `high`.
    pub fn spread(mut self, low: f64, high: f64) -> Self {
        self.spread = Some((low, high));
        self
    }
}

impl From<f64> for Bar {
    fn from(value: f64) -> Self {
        Bar::new(value)
    }
}

/// Grouped or stacked bars over named categories. Each series gives one [`Bar`] per
/// category, in the categories' order.
#[derive(Debug, Clone)]
pub struct BarChart {
    title: String,
    x_label: String,
    y_label: String,
    categories: Vec<String>,
    series: Vec<(String, Vec<Bar>)>,
    layout: Layout,
    size: (u32, u32),
}

impl BarChart {
    /// An empty chart titled `title` over `categories` (the x axis, left to right), grouped,
    /// size [`DEFAULT_SIZE`].
    pub fn new<S: Into<String>>(
        title: impl Into<String>,
        categories: impl IntoIterator<Item = S>,
    ) -> Self {
        BarChart {
            title: title.into(),
            x_label: String::new(),
            y_label: String::new(),
            categories: categories.into_iter().map(Into::into).collect(),
            series: Vec::new(),
            layout: Layout::Grouped,
            size: DEFAULT_SIZE,
        }
    }

    /// Sets the x axis label (below the category names).
    pub fn x_label(mut self, label: impl Into<String>) -> Self {
        self.x_label = label.into();
        self
    }

    /// Sets the y axis label.
    pub fn y_label(mut self, label: impl Into<String>) -> Self {
        self.y_label = label.into();
        self
    }

    /// Adds a series named `name` with one bar per category.
    pub fn series(mut self, name: impl Into<String>, bars: Vec<Bar>) -> Self {
        self.series.push((name.into(), bars));
        self
    }

    /// Sets grouped or stacked bars.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets the picture size in pixels.
    pub fn size(mut self, width: u32, height: u32) -> Self {
        self.size = (width, height);
        self
    }

    /// Writes `stem.svg` and `stem.png` (any extension of `stem` is replaced).
    pub fn write(&self, stem: impl AsRef<Path>) -> Result<Written, Error> {
        let top = self.validate()?;
        write_both(stem.as_ref(), self.size, &BarPicture(self, top))
    }

    /// Checks the data; returns the top of the y axis.
    fn validate(&self) -> Result<f64, Error> {
        check_size(self.size)?;
        if self.categories.is_empty() {
            return Err(Error::Invalid(format!(
                "bar chart {:?} has no categories",
                self.title
            )));
        }
        if self.series.is_empty() {
            return Err(Error::Invalid(format!(
                "bar chart {:?} has no series",
                self.title
            )));
        }
        let mut top: f64 = 0.0;
        let mut stack = vec![0.0; self.categories.len()];
        for (name, bars) in &self.series {
            if bars.len() != self.categories.len() {
                return Err(Error::Invalid(format!(
                    "series {name:?} has {} bars for {} categories",
                    bars.len(),
                    self.categories.len()
                )));
            }
            for (i, bar) in bars.iter().enumerate() {
                let (lo, hi) = bar.spread.unwrap_or((bar.value, bar.value));
                if ![bar.value, lo, hi]
                    .iter()
                    .all(|v| v.is_finite() && *v >= 0.0)
                {
                    return Err(Error::Invalid(format!(
                        "series {name:?}, category {:?}: bar {bar:?} must be finite and \
                         not negative",
                        self.categories[i]
                    )));
                }
                let base = match self.layout {
                    Layout::Grouped => 0.0,
                    Layout::Stacked => stack[i],
                };
                top = top.max(base + bar.value.max(hi));
                stack[i] += bar.value;
            }
        }
        Ok(if top > 0.0 { top * 1.15 } else { 1.0 })
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        top: f64,
    ) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        let n = self.categories.len();
        let categories = self.categories.clone();
        let legend: Vec<(String, RGBColor, Mark)> = self
            .series
            .iter()
            .enumerate()
            .map(|(j, (name, _))| (name.clone(), palette(j), Mark::Box))
            .collect();
        let (plot_area, legend_area) = layout(root, &self.title, &legend)?;
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(12)
            .x_label_area_size(if self.x_label.is_empty() { 35 } else { 55 })
            .y_label_area_size(65)
            .build_cartesian_2d(CategoryAxis(n), 0.0..top)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_label_formatter(&|v| tick(*v, top))
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    categories.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(|e| e.to_string())?;

        let k = self.series.len();
        let mut stack = vec![0.0; n];
        for (j, (_, bars)) in self.series.iter().enumerate() {
            let color = palette(j);
            let mut rects = Vec::with_capacity(n);
            let mut whiskers = Vec::new();
            for (i, bar) in bars.iter().enumerate() {
                let (left, right, base) = match self.layout {
                    Layout::Grouped => {
                        let w = 0.8 / k as f64;
                        let left = i as f64 - 0.4 + j as f64 * w;
                        (left, left + w, 0.0)
                    }
                    Layout::Stacked => (i as f64 - 0.3, i as f64 + 0.3, stack[i]),
                };
                stack[i] += bar.value;
                rects.push(Rectangle::new(
                    [(left, base), (right, base + bar.value)],
                    color.filled(),
                ));
                if let Some((lo, hi)) = bar.spread {
                    let mid = (left + right) / 2.0;
                    let cap = (right - left) * 0.2;
                    for path in [
                        vec![(mid, base + lo), (mid, base + hi)],
                        vec![(mid - cap, base + lo), (mid + cap, base + lo)],
                        vec![(mid - cap, base + hi), (mid + cap, base + hi)],
                    ] {
                        whiskers.push(PathElement::new(path, BLACK.stroke_width(2)));
                    }
                }
            }
            chart.draw_series(rects).map_err(|e| e.to_string())?;
            chart.draw_series(whiskers).map_err(|e| e.to_string())?;
        }
        draw_legend(&legend_area, &legend)?;
        root.present().map_err(|e| e.to_string())
    }
}

/// How a legend entry shows its colour.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// A curve.
    Line,
    /// An event marker.
    Dashed,
    /// A bar.
    Box,
}

/// The plot and legend areas of a picture.
type Split<DB> = (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>);

/// Fills the picture, writes the title, and splits the rest into the plot and a legend
/// column on the right wide enough for the longest entry, so the legend never hides data.
fn layout<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    legend: &[(String, RGBColor, Mark)],
) -> Result<Split<DB>, String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    // ab_glyph draws text partly above its anchor: keep the title off the top edge.
    let body = root
        .margin(12, 0, 0, 0)
        .titled(title, (FAMILY, 22))
        .map_err(|e| e.to_string())?;
    let (width, _) = body.dim_in_pixel();
    let font = (FAMILY, 13).into_font();
    let longest = legend
        .iter()
        .map(|(text, _, _)| font.box_size(text).map_or(0, |(w, _)| w))
        .max()
        .unwrap_or(0);
    let column = (longest + 50).clamp(100, width / 3);
    Ok(body.split_horizontally(width - column))
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor, Mark)],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let font = (FAMILY, 13).into_font();
    for (i, (text, color, mark)) in entries.iter().enumerate() {
        let y = 24 + 22 * i as i32;
        let color = *color;
        match mark {
            Mark::Line => area.draw(&PathElement::new(
                vec![(4, y), (28, y)],
                color.stroke_width(3),
            )),
            Mark::Dashed => area
                .draw(&PathElement::new(
                    vec![(4, y), (12, y)],
                    color.stroke_width(3),
                ))
                .and_then(|()| {
                    area.draw(&PathElement::new(
                        vec![(18, y), (28, y)],
                        color.stroke_width(3),
                    ))
                }),
            Mark::Box => area.draw(&Rectangle::new([(8, y - 7), (24, y + 7)], color.filled())),
        }
        .map_err(|e| e.to_string())?;
        area.draw(&Text::new(
            text.clone(),
            (34, y - 7),
            font.clone().color(&BLACK),
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The x axis of a bar chart: category `i` is centred at `i`, and the ticks (where the
/// category names go) are exactly at the centres.
struct CategoryAxis(usize);

impl Ranged for CategoryAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (lo, hi) = (-0.5, self.0 as f64 - 0.5);
        let frac = (value - lo) / (hi - lo);
        limit.0 + (frac * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        (0..self.0).map(|i| i as f64).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// A tick label with as many decimals as the axis span needs (no "500.0" on an axis of
/// thousands).
fn tick(value: f64, span: f64) -> String {
    let decimals = if span >= 20.0 {
        0
    } else if span >= 2.0 {
        1
    } else {
        (2.0 - span.max(1e-9).log10().floor()).clamp(2.0, 9.0) as usize
    };
    format!("{value:.decimals$}")
}

fn check_size((w, h): (u32, u32)) -> Result<(), Error> {
    if !(200..=10_000).contains(&w) || !(150..=10_000).contains(&h) {
        return Err(Error::Invalid(format!(
            "picture size {w}x{h} is outside 200x150 .. 10000x10000"
        )));
    }
    Ok(())
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// A picture that can be drawn on any plotters backend (one generic method, so the same
/// code makes the SVG and the PNG).
trait Picture {
    fn draw_on<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static;
}

struct TimePicture<'a>(&'a TimePlot, Ranges);

impl Picture for TimePicture<'_> {
    fn draw_on<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        self.0.draw(root, self.1)
    }
}

struct BarPicture<'a>(&'a BarChart, f64);

impl Picture for BarPicture<'_> {
    fn draw_on<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        self.0.draw(root, self.1)
    }
}

/// Draws the same picture into `stem.svg` and `stem.png`.
fn write_both(stem: &Path, size: (u32, u32), picture: &impl Picture) -> Result<Written, Error> {
    font_path()?;
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        picture.draw_on(&root).map_err(|reason| Error::Draw {
            path: svg.clone(),
            reason,
        })?;
    }
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        picture.draw_on(&root).map_err(|reason| Error::Draw {
            path: png.clone(),
            reason,
        })?;
    }
    Ok(Written { svg, png })
}

#[cfg(test)]
mod tests {
    use super::tick;

    #[test]
    fn ticks_have_the_decimals_the_span_needs() {
        assert_eq!(tick(500.0, 3000.0), "500");
        assert_eq!(tick(2.5, 10.0), "2.5");
        assert_eq!(tick(0.25, 1.0), "0.25");
        assert_eq!(tick(0.0125, 0.05), "0.0125");
    }
}
