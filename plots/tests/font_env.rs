//! A font named by `$MPI_IOS_PLOT_FONT` is used or refused, never silently replaced.
//! (Its own test binary: the font is loaded once per process.)

#[test]
fn unreadable_font_from_the_environment_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bogus = dir.path().join("not-a-font.ttf");
    std::fs::write(&bogus, b"definitely not a font").expect("write");
    std::env::set_var(mpi_ios_plots::FONT_ENV, &bogus);
    let err = mpi_ios_plots::TimePlot::new("t")
        .series("s", vec![(0.0, 1.0), (1.0, 2.0)])
        .write(dir.path().join("x"))
        .expect_err("bad font");
    let msg = err.to_string();
    assert!(msg.contains("not-a-font.ttf"), "{msg}");
    assert!(!dir.path().join("x.svg").exists());
}
