//! `mpi-ios-bench overhead --instructions --quick`: the instruction count runs and is
//! deterministic. Its JSON line must give a finite `instructions_ratio` for every case, and
//! the repeats must agree (spread of instructions per iteration within the benchmark's
//! `agreement`, 0.2 %). The targets themselves are judged in docs/benchmarks.md, on the
//! full sizes. Needs the project's binaries (`cargo build --release --bins`) and valgrind;
//! without valgrind on PATH the test says so and passes.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(300);

fn valgrind_on_path() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("valgrind").is_file()))
}

#[test]
fn instructions_quick_gives_a_finite_ratio_per_case_and_repeats_agree() {
    if !valgrind_on_path() {
        eprintln!("SKIPPED: valgrind is not on PATH (apt-get install valgrind)");
        return;
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_mpi-ios-bench"));
    let dir = exe.parent().unwrap();
    for name in ["heat2d", "heat2d-plain", "pcmd"] {
        assert!(
            dir.join(name).is_file(),
            "{} is missing: run `cargo build --release --bins` before `cargo test --release`",
            dir.join(name).display()
        );
    }
    let _mpi = mpi_ios_tests::mpi_lock();
    let mut command = Command::new(&exe);
    command.args(["overhead", "--instructions", "--quick"]);
    let out = mpi_ios_tests::Group::run_to_end(command, "bench", DEADLINE)
        .unwrap_or_else(|e| panic!("mpi-ios-bench overhead --instructions --quick: {e}"));
    assert_eq!(
        out.code,
        Some(0),
        "benchmark failed\n--- stdout\n{}\n--- stderr\n{}",
        out.stdout,
        out.stderr
    );
    let line = out
        .stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line\n--- stdout\n{}", out.stdout));
    let json: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(json["benchmark"], "overhead-instructions", "{line}");
    let agreement = json["agreement"].as_f64().unwrap();
    let cases = json["cases"].as_array().unwrap();
    assert!(!cases.is_empty(), "no case: {line}");
    for pcmd in [true, false] {
        assert!(
            cases.iter().any(|c| c["pcmd"] == pcmd),
            "no case with pcmd = {pcmd}: {line}"
        );
    }
    for case in cases {
        let ratio = case["instructions_ratio"].as_f64().unwrap_or(f64::NAN);
        assert!(
            ratio.is_finite() && ratio > 0.0,
            "instructions_ratio {ratio} in {case}"
        );
        assert!(case["ranks"].as_u64().is_some() && case["grid"].as_u64().is_some());
        let repeats = case["ratio_repeats"].as_array().unwrap();
        assert!(repeats.len() >= 2, "fewer than 2 repeats: {case}");
        for key in ["spread_plain", "spread_pcm"] {
            let spread = case[key].as_f64().unwrap();
            assert!(
                spread <= agreement,
                "{key} = {spread} > {agreement}: the repeats disagree, the count is not \
                 deterministic\n{case}\n--- stderr\n{}",
                out.stderr
            );
        }
    }
}
