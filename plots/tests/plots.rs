//! Plots are written as SVG and PNG, decode to the asked size, and carry their labels;
//! bad data is refused with an error naming it.

use mpi_ios_plots::{throughput, Bar, BarChart, Error, Event, EventKind, Layout, TimePlot};

fn png_size(path: &std::path::Path) -> (u32, u32) {
    let img = image::open(path).expect("the PNG decodes");
    (img.width(), img.height())
}

fn sample_time_plot() -> TimePlot {
    // A run that slows down at t=10 and recovers after a migration at t=13.
    let done: Vec<f64> = (0..1000)
        .scan(0.0, |t, i| {
            *t += if (200..260).contains(&i) { 0.05 } else { 0.02 };
            Some(*t)
        })
        .collect();
    TimePlot::new("heat2d, 4 ranks")
        .series("MPI/IOS", throughput(&done, 1.0).expect("valid bins"))
        .series(
            "static MPI",
            vec![(0.0, 50.0), (10.0, 50.0), (11.0, 20.0), (25.0, 20.0)],
        )
        .event(Event::new(4.0, EventKind::LoadOnset, "hog on node B"))
        .event(Event::new(7.0, EventKind::Migration, "rank 1: B -> C"))
        .event(Event::new(7.2, EventKind::NodeJoin, "node D joined"))
        .event(Event::new(15.0, EventKind::LoadEnd, ""))
        .event(Event::new(18.0, EventKind::NodeLeave, "node D left"))
}

#[test]
fn time_plot_writes_svg_and_png_of_the_asked_size() {
    let dir = tempfile::tempdir().expect("temp dir");
    let written = sample_time_plot()
        .size(900, 500)
        .write(dir.path().join("throughput"))
        .expect("plot written");
    assert_eq!(written.svg, dir.path().join("throughput.svg"));
    assert_eq!(written.png, dir.path().join("throughput.png"));
    let svg = std::fs::read_to_string(&written.svg).expect("svg readable");
    assert!(
        svg.starts_with("<svg"),
        "not an SVG: {}",
        &svg[..svg.len().min(80)]
    );
    for text in [
        "heat2d, 4 ranks",
        "hog on node B",
        "rank 1: B -&gt; C",
        "migration",
        "MPI/IOS",
    ] {
        assert!(svg.contains(text), "SVG lacks {text:?}");
    }
    assert!(std::fs::metadata(&written.png).expect("png exists").len() > 1000);
    assert_eq!(png_size(&written.png), (900, 500));
}

#[test]
fn grouped_and_stacked_bar_charts_are_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let grouped = BarChart::new("overhead", ["2 ranks", "4 ranks", "8 ranks"])
        .y_label("seconds")
        .series(
            "plain",
            vec![Bar::new(4.0).spread(3.8, 4.4), Bar::new(2.0), Bar::new(1.0)],
        )
        .series(
            "PCM",
            vec![Bar::new(4.1), Bar::new(2.1).spread(2.0, 2.2), Bar::new(1.1)],
        )
        .write(dir.path().join("fig12"))
        .expect("grouped chart written");
    let svg = std::fs::read_to_string(&grouped.svg).expect("svg readable");
    for text in ["2 ranks", "8 ranks", "plain", "PCM", "seconds"] {
        assert!(svg.contains(text), "SVG lacks {text:?}");
    }
    assert_eq!(png_size(&grouped.png), mpi_ios_plots::DEFAULT_SIZE);

    let stacked = BarChart::new("reconfiguration", ["256", "512"])
        .layout(Layout::Stacked)
        .series("store", vec![0.1.into(), 0.4.into()])
        .series("load", vec![0.1.into(), 0.3.into()])
        .series(
            "spawn",
            vec![Bar::new(0.3).spread(0.25, 0.4), Bar::new(0.3)],
        )
        .size(640, 480)
        .write(dir.path().join("fig18.png"))
        .expect("stacked chart written");
    assert_eq!(stacked.svg, dir.path().join("fig18.svg"));
    assert_eq!(png_size(&stacked.png), (640, 480));
}

#[test]
fn bad_data_is_refused_with_a_named_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let err = BarChart::new("t", ["a", "b"])
        .series("short", vec![Bar::new(1.0)])
        .write(dir.path().join("x"))
        .expect_err("one bar for two categories");
    assert!(
        matches!(&err, Error::Invalid(m) if m.contains("short")),
        "{err}"
    );

    let err = BarChart::new("t", ["a"])
        .series("nan", vec![Bar::new(f64::NAN)])
        .write(dir.path().join("x"))
        .expect_err("NaN bar");
    assert!(err.to_string().contains("nan"), "{err}");

    let err = TimePlot::new("empty")
        .write(dir.path().join("x"))
        .expect_err("no data");
    assert!(err.to_string().contains("no data"), "{err}");

    let err = TimePlot::new("t")
        .series("s", vec![(0.0, 1.0)])
        .size(10, 10)
        .write(dir.path().join("x"))
        .expect_err("tiny picture");
    assert!(err.to_string().contains("10x10"), "{err}");
    assert!(
        !dir.path().join("x.svg").exists(),
        "nothing written for bad input"
    );

    let err = TimePlot::new("t")
        .series("s", vec![(0.0, 1.0), (1.0, 2.0)])
        .write(dir.path().join("no/such/dir/x"))
        .expect_err("missing directory");
    assert!(
        matches!(&err, Error::Draw { path, .. } if path.ends_with("x.svg")),
        "{err}"
    );
}

#[test]
fn throughput_counts_iterations_per_bin() {
    // 10 iterations/s for 3 s, then 20/s for 2 s.
    let mut done: Vec<f64> = (1..=30).map(|i| f64::from(i) * 0.1 - 0.05).collect();
    done.extend((1..=40).map(|i| 3.0 + f64::from(i) * 0.05 - 0.025));
    let curve = throughput(&done, 1.0).expect("valid");
    assert_eq!(curve.len(), 5);
    for (i, (t, rate)) in curve.iter().enumerate() {
        let want = if i < 3 { 10.0 } else { 20.0 };
        assert!(
            (rate - want).abs() < 1.5,
            "bin {i} at {t}: {rate} != {want}"
        );
    }
    assert!(throughput(&[], 1.0).expect("valid").is_empty());
    assert!(throughput(&[1.0], 0.0).is_err());
    assert!(throughput(&[f64::INFINITY], 1.0).is_err());
}

/// Writes the sample pictures to `$MPI_IOS_PLOTS_SAMPLE_DIR` when set, to look at them.
#[test]
fn samples_for_eyes() {
    let Some(dir) = std::env::var_os("MPI_IOS_PLOTS_SAMPLE_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    sample_time_plot()
        .write(dir.join("sample-throughput"))
        .expect("written");
    BarChart::new("reconfiguration", ["256x256", "512x512", "1024x1024"])
        .layout(Layout::Stacked)
        .y_label("ms")
        .series("store", vec![1.0.into(), 4.0.into(), 16.0.into()])
        .series("load", vec![1.0.into(), 3.0.into(), 12.0.into()])
        .series(
            "spawn",
            vec![
                Bar::new(250.0).spread(240.0, 290.0),
                260.0.into(),
                255.0.into(),
            ],
        )
        .write(dir.join("sample-stacked"))
        .expect("written");
}
