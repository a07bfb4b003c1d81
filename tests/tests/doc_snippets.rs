//! The docs as a user follows them (issue 39: "everything they are told to type works; CI
//! proves the snippets"). Every fenced block of the pages that tell users what to write and
//! type has a decision in [`PAGES`]: checked here, as the page shows it; checked by a named
//! test elsewhere (the name is checked to exist); a doc-test of `pcm`; or not checked, with
//! why. A block added to a page without a decision, or one moved to another section, fails
//! [`every_block_of_the_user_pages_has_a_decision`].
//!
//! What is checked here, taking each block from its page (`mpi_ios_tests::doc_blocks`):
//! - docs/instrumenting-c.md: the install command (with the `--from` of the build under
//!   test), the `mpicc ... $(pkg-config ...)` and `mpif90` commands run as written with the
//!   `PATH` `scripts/setup.sh` gives (the runtime's wrappers) and `HOME` a temporary
//!   directory; the C fragments inside the smallest program around them (warnings as
//!   errors), run on 2 ranks with moves (and for the malleable ones a shrink and a grow),
//!   each ending with the total of the run without them; the CMake project built and run.
//! - docs/instrumenting-python.md: the fragments inside the smallest mpi4py program, run
//!   with the runtime's Python on 2 ranks with moves (skipped, saying why, when that Python
//!   or its numpy or mpi4py is missing, as in tests/tests/python.rs).
//! - docs/instrumenting.md: the `[dependencies]` line resolved by `cargo tree --offline` in a
//!   crate next to a clone named as the path says; the events command run as written.
//! - README.md: the first run (`mpiexec -n 4 ... heat2d`) as written; `pcmrun --help`, and
//!   the pcmrun launch with `--dry-run`.
//! - docs/checkpoints.md: its Rust fragment is the explicit-calls doc-test of instrumenting.md.
//! - Every page: each option a `pcmd`, `ios-agent` or `peer-server` line names is in that
//!   command's `--help`, and each `pcmrun` line parses (`--dry-run`), so that the blocks
//!   checked elsewhere cannot drift from the command lines either.

#![allow(clippy::unwrap_used)] // test helpers: a panic is a failed test

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use mpi_ios_tests::doc_blocks::{blocks_under, page_blocks, repo_root, Block};
use mpi_ios_tests::{
    bin_dir, mpi_lock, program, program_dir, runtime_python, Finished, Group, MpiJob, Runtime,
    RuntimeExt as _,
};

const DEADLINE: Duration = Duration::from_secs(90);

/// What is done with one fenced block of a page.
enum Check {
    /// Checked by the test of this name in this file.
    Here(&'static str),
    /// Checked by the test `test` in the file `file` (from the repository's root).
    Elsewhere {
        file: &'static str,
        test: &'static str,
    },
    /// A Rust block compiled as a doc-test of `pcm` (`cargo test -p pcm --doc`).
    Doctest,
    /// Not checked, and why.
    Not(&'static str),
}

/// The decision for one block: the heading it sits under, its language, and its check.
struct Decision(&'static str, &'static str, Check);

use Check::{Doctest, Elsewhere, Here, Not};

const C_GUIDE: &[Decision] = &[
    Decision(
        "Build and install",
        "sh",
        Here("given_the_c_guide_then_its_step_by_step_fragments_build_as_it_says_and_moves_keep_the_total"),
    ),
    Decision(
        "Build and install",
        "sh",
        Here("given_the_c_guide_then_its_step_by_step_fragments_build_as_it_says_and_moves_keep_the_total"),
    ),
    Decision(
        "Build and install",
        "cmake",
        Here("given_the_c_guides_cmake_project_and_fortran_command_then_both_build_against_the_install"),
    ),
    Decision(
        "Step by step",
        "c",
        Here("given_the_c_guide_then_its_step_by_step_fragments_build_as_it_says_and_moves_keep_the_total"),
    ),
    Decision(
        "Step by step",
        "c",
        Here("given_the_c_guide_then_its_step_by_step_fragments_build_as_it_says_and_moves_keep_the_total"),
    ),
    Decision(
        "Malleable jobs (resizes)",
        "c",
        Here("given_the_malleable_fragments_then_a_shrink_a_grow_and_a_move_keep_the_total"),
    ),
    Decision(
        "Malleable jobs (resizes)",
        "c",
        Here("given_the_malleable_fragments_then_a_shrink_a_grow_and_a_move_keep_the_total"),
    ),
    Decision(
        "Malleable jobs (resizes)",
        "fortran",
        Here("given_the_fortran_resize_fragment_then_it_is_jacobi_f90s_own_code"),
    ),
    Decision(
        "Fortran",
        "fortran",
        Elsewhere {
            file: "tests/tests/capi.rs",
            test: "given_the_fortran_program_of_the_guide_then_it_builds_and_moves_give_the_same_total",
        },
    ),
    Decision(
        "Fortran",
        "sh",
        Here("given_the_c_guides_cmake_project_and_fortran_command_then_both_build_against_the_install"),
    ),
];

const PYTHON_GUIDE: &[Decision] = &[
    Decision(
        "Install",
        "sh",
        Elsewhere {
            // scripts/test.sh runs python/build.sh; this test runs the wheel it installed.
            file: "tests/tests/python.rs",
            test: "given_the_issues_command_then_the_python_heat2d_prints_heat2ds_report_with_the_plain_checksum",
        },
    ),
    Decision(
        "Step by step",
        "python",
        Here("given_the_python_guide_then_its_fragments_run_and_moves_keep_the_total"),
    ),
    Decision(
        "Step by step",
        "python",
        Here("given_the_python_guide_then_its_fragments_run_and_moves_keep_the_total"),
    ),
    Decision(
        "Checkpoints, restarts, pcmrun, agents",
        "sh",
        Elsewhere {
            // The same pcmrun of heat2d.py with checkpoints, a rank killed on the way.
            file: "tests/tests/python.rs",
            test: "given_a_python_rank_killed_under_pcmrun_then_pcmrun_brings_the_job_back_with_the_plain_checksum",
        },
    ),
];

const RUST_GUIDE: &[Decision] = &[
    Decision(
        "Depending on pcm from another crate",
        "toml",
        Here("given_the_rust_guides_dependency_line_then_cargo_resolves_pcm_from_the_repository"),
    ),
    Decision(
        "Depending on pcm from another crate",
        "sh",
        Not("builds the reader's own crate: compiling pcm, rsmpi and their dependencies in a new target directory takes minutes; scripts/test.sh builds pcm the same way after the same setup.sh"),
    ),
    Decision(
        "The usual case: `State`, `resume`, `reconfigure_point`",
        "rust",
        Doctest,
    ),
    Decision("What a replacement skips, and what it gets", "rust", Doctest),
    Decision("Jobs that grow and shrink", "rust", Doctest),
    Decision("The explicit calls", "rust", Doctest),
    Decision(
        "Following a run: events, not logs",
        "sh",
        Here("given_the_events_command_of_the_rust_guide_then_it_writes_the_runs_events"),
    ),
];

const README: &[Decision] = &[
    Decision(
        "The two commands (fresh Debian machine with a Rust toolchain)",
        "sh",
        Elsewhere {
            file: "bench/tests/main_job.rs",
            test: "the_main_job_moves_a_rank_by_itself_and_matches_the_plain_checksum",
        },
    ),
    Decision(
        "The two commands (fresh Debian machine with a Rust toolchain)",
        "sh",
        Not("scripts/test.sh is CI itself"),
    ),
    Decision(
        "MPI runtimes: Open MPI 4 or MPICH 5",
        "sh",
        Elsewhere {
            file: "tests/tests/setup_script.rs",
            test: "sourcing_the_setup_script_leaves_the_callers_shell_options_as_they_were",
        },
    ),
    Decision(
        "MPI runtimes: Open MPI 4 or MPICH 5",
        "sh",
        Here("given_the_readmes_first_run_then_heat2d_runs_on_four_ranks_as_written"),
    ),
    Decision(
        "Running your own job",
        "sh",
        Here("given_the_readmes_pcmrun_commands_then_they_parse_and_launch_as_documented"),
    ),
    Decision(
        "Running your own job",
        "sh",
        Elsewhere {
            // pcmd serve, a job registered with it, pcmd status and pcmd migrate; the
            // hostfile of other hosts and --to node-b are the reader's. The MPICH launch line
            // (hydra takes no -x) was run by hand with a hostfile `vm:4` and a pcmd
            // migrate --rank 2 --to vm (2026-12-03).
            file: "tests/tests/daemon.rs",
            test: "given_a_running_job_when_pcmd_migrate_then_ranks_move_and_the_checksum_matches",
        },
    ),
    Decision(
        "Letting the agents balance the load",
        "sh",
        Elsewhere {
            file: "tests/tests/agents.rs",
            test: "join_starts_the_nodes_pcmd_with_private_sockets_and_leave_stops_it",
        },
    ),
];

const CHECKPOINTS: &[Decision] = &[
    Decision(
        "Using it",
        "sh",
        Elsewhere {
            // pcmds with a buddy, a job with checkpoints, a kill and PCM_RESTART=1; the
            // 10.0.0.x addresses and /var/lib are the reader's.
            file: "tests/tests/checkpoint.rs",
            test: "given_the_node_pcmd_killed_and_its_files_deleted_then_the_buddy_copy_is_used",
        },
    ),
    Decision(
        "Using it",
        "sh",
        Elsewhere {
            file: "tests/tests/pcmrun.rs",
            test: "given_a_rank_killed_mid_run_then_pcmrun_brings_the_job_back_with_the_plain_checksum",
        },
    ),
    Decision(
        "Using it",
        "text",
        Elsewhere {
            // pcmrun's words, not a command: that test checks them.
            file: "tests/tests/pcmrun.rs",
            test: "given_a_second_pcmrun_of_the_same_series_then_it_is_refused_and_the_first_keeps_its_checkpoints",
        },
    ),
    Decision(
        "Using it",
        "text",
        Elsewhere {
            file: "tests/tests/pcmrun.rs",
            test: "given_pcmrun_killed_then_the_same_command_again_resumes_from_the_newest_checkpoint",
        },
    ),
    Decision(
        "Using it",
        "rust",
        Here("given_the_checkpoint_pages_rust_fragment_then_it_is_part_of_a_doctest"),
    ),
];

/// The pages users follow, and a decision for each of their fenced blocks, in page order.
const PAGES: &[(&str, &[Decision])] = &[
    ("docs/instrumenting-c.md", C_GUIDE),
    ("docs/instrumenting-python.md", PYTHON_GUIDE),
    ("docs/instrumenting.md", RUST_GUIDE),
    ("README.md", README),
    ("docs/checkpoints.md", CHECKPOINTS),
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn every_block_of_the_user_pages_has_a_decision() {
    let this_file = include_str!("doc_snippets.rs");
    for (page, decisions) in PAGES {
        let blocks = page_blocks(page);
        let listed: Vec<String> = blocks
            .iter()
            .map(|b| format!("line {}: {} under \"{}\"", b.line, b.language, b.heading))
            .collect();
        assert_eq!(
            blocks.len(),
            decisions.len(),
            "{page} has {} fenced blocks, the table in tests/tests/doc_snippets.rs {}: check the \
             new block or say why not\n{}",
            blocks.len(),
            decisions.len(),
            listed.join("\n")
        );
        for (block, Decision(heading, language, check)) in blocks.iter().zip(decisions.iter()) {
            assert_eq!(
                (block.heading.as_str(), block.language.as_str()),
                (*heading, *language),
                "{page} line {}: the table expects a {language} block under \"{heading}\"",
                block.line
            );
            match check {
                Here(test) => assert!(
                    this_file.contains(&format!("fn {test}()")),
                    "{page} line {}: no test {test} in this file",
                    block.line
                ),
                Elsewhere { file, test } => {
                    let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
                    assert!(
                        text.contains(&format!("fn {test}(")),
                        "{page} line {}: {file} has no test {test}",
                        block.line
                    );
                }
                Doctest => {
                    assert!(block.info.contains("no_run") || block.info == "rust");
                    let included = format!("docs/{}\")", page.trim_start_matches("docs/"));
                    assert!(
                        rust_files(&repo_root().join("pcm/src")).iter().any(|f| {
                            std::fs::read_to_string(f).is_ok_and(|text| {
                                text.contains("include_str!") && text.contains(&included)
                            })
                        }),
                        "{page} line {}: no file of pcm/src includes {page} as doc-tests",
                        block.line
                    );
                }
                Not(why) => assert!(!why.is_empty()),
            }
        }
    }
}

/// The command lines of `script` (a `sh` block): comments dropped, `\` continuations
/// joined, split in words.
fn command_lines(script: &str) -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let code = match line.find(" #") {
            Some(at) => &line[..at],
            None if line.trim_start().starts_with('#') => "",
            None => line,
        };
        match code.trim_end().strip_suffix('\\') {
            Some(start) => current.push_str(start),
            None => {
                current.push_str(code);
                let words: Vec<String> = current
                    .split_whitespace()
                    .filter(|w| *w != "&")
                    .map(str::to_owned)
                    .collect();
                if !words.is_empty() {
                    lines.push(words);
                }
                current.clear();
            }
        }
    }
    lines
}

/// The `--options` a `--help` text names.
fn options_in_help(help: &str) -> Vec<String> {
    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn given_the_commands_of_the_pages_then_the_projects_programs_take_every_option_they_name() {
    // Every line of a `sh` block that runs pcmd, ios-agent or peer-server names only options
    // that the program's (sub)command's --help lists; every pcmrun line parses (--dry-run,
    // which starts nothing). Cheap, and it covers the blocks checked elsewhere too: an
    // option renamed in the code and not in the docs fails here.
    let home = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (page, _) in PAGES {
        for block in page_blocks(page).iter().filter(|b| b.language == "sh") {
            for words in command_lines(&block.text) {
                let Some(at) = words.iter().position(|w| !w.contains('=')) else {
                    continue;
                };
                let name = Path::new(&words[at]).file_name().unwrap().to_string_lossy();
                let args = &words[at + 1..];
                let what = format!("{page} line {}: {}", block.line, words.join(" "));
                match name.as_ref() {
                    "pcmd" | "ios-agent" | "peer-server" => {
                        let mut help = Command::new(bin_dir().join(name.as_ref()));
                        let sub = args
                            .first()
                            .filter(|a| !a.starts_with('-') && name != "peer-server");
                        help.args(sub).arg("--help");
                        let help = text(&help.output().unwrap().stdout);
                        let known = options_in_help(&help);
                        for option in args.iter().filter(|a| a.starts_with("--")) {
                            let option = option.split('=').next().unwrap();
                            assert!(
                                known.iter().any(|k| k == option),
                                "{what}: {name} {} takes no {option}",
                                sub.map(String::as_str).unwrap_or_default()
                            );
                        }
                    }
                    "pcmrun" => {
                        // pcmrun's own options come before the application: each must be
                        // one of its --help (an unknown one would be taken for the
                        // application, and a dry run would print that happily).
                        let help = Command::new(bin_dir().join("pcmrun"))
                            .arg("--help")
                            .output();
                        let help = text(&help.unwrap().stdout);
                        let known = options_in_help(&help);
                        let mut app = 0;
                        while let Some(word) = args.get(app).filter(|w| w.starts_with('-')) {
                            let option = word.split('=').next().unwrap();
                            if option.starts_with("--") {
                                assert!(
                                    known.iter().any(|k| k == option),
                                    "{what}: pcmrun takes no {option}"
                                );
                            }
                            // -n and -np take the rank count; a long option its value when
                            // --help shows one (`--report <FILE>`).
                            let takes_value = !word.contains('=')
                                && (!option.starts_with("--")
                                    || help.contains(&format!("{option} <")));
                            app += if takes_value { 2 } else { 1 };
                        }
                        let out = Command::new(bin_dir().join("pcmrun"))
                            .arg("--dry-run")
                            .args(args)
                            .env("HOME", home.path())
                            .env_remove("XDG_RUNTIME_DIR")
                            .env_remove("XDG_STATE_HOME")
                            .env("PCM_DAEMON", home.path().join("pcmd.sock"))
                            .env("PATH", setup_path())
                            .output()
                            .unwrap();
                        assert!(out.status.success(), "{what}:\n{}", text(&out.stderr));
                        if let Some(program) = args.get(app) {
                            let launch = text(&out.stdout);
                            assert!(
                                launch.contains(program.as_str()),
                                "{what}: the dry run launches no {program}:\n{launch}"
                            );
                        }
                    }
                    _ => continue,
                }
                checked += 1;
            }
        }
    }
    // The pages' pcmd, pcmrun, agent and peer-server lines (README, checkpoints, Python guide).
    assert!(checked >= 10, "only {checked} command lines found");
}

// ---------------------------------------------------------------------------------------
// The user's environment

fn runtime_name() -> &'static str {
    match Runtime::current() {
        Runtime::OpenMpi => "openmpi",
        Runtime::Mpich => "mpich",
    }
}

/// The `PATH` `source scripts/setup.sh` gives: the runtime's launcher and compiler wrappers
/// (`.mpi/bin-RUNTIME`) first, the other runtime's not at all.
fn setup_path() -> OsString {
    let links = repo_root().join(".mpi");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let rest = std::env::split_paths(&path).filter(|dir| !dir.starts_with(&links));
    let first = links.join(format!("bin-{}", runtime_name()));
    std::env::join_paths(std::iter::once(first).chain(rest)).unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `script` with bash in `dir`, as a user's shell after `source scripts/setup.sh` whose
/// home is `home`; it must succeed. `what` names it in a failure.
fn user_shell(home: &Path, dir: &Path, script: &str, what: &str) -> Output {
    let out = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(dir)
        .env("HOME", home)
        .env("PATH", setup_path())
        .env_remove("PKG_CONFIG_PATH")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}, as the page shows it, failed ({})\n--- script\n{script}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// The `n`th block in `language` under `heading` of `page`.
fn block(page: &str, heading: &str, language: &str, n: usize) -> Block {
    let blocks = page_blocks(page);
    let found = blocks_under(&blocks, heading, language).nth(n).cloned();
    found.unwrap_or_else(|| panic!("{page} has no {language} block {n} under \"{heading}\""))
}

const C_PAGE: &str = "docs/instrumenting-c.md";

/// The C guide's install command, run with `HOME` = `home` from the repository, with the
/// build under test (`--from`, `--programs-from`: scripts/install.sh's own options) instead
/// of a build of its own.
fn install_as_the_c_guide_says(home: &Path) -> PathBuf {
    let command = block(C_PAGE, "Build and install", "sh", 0).text;
    assert!(
        command.starts_with("scripts/install.sh --prefix $HOME/pcm"),
        "{command}"
    );
    let script = command.replacen(
        "scripts/install.sh",
        &format!(
            "scripts/install.sh --from '{}' --programs-from '{}'",
            program_dir().display(),
            bin_dir().display()
        ),
        1,
    );
    user_shell(home, &repo_root(), &script, "the install command");
    let prefix = home.join("pcm");
    assert!(prefix.join("lib/libpcm.so").is_file());
    prefix
}

/// The C guide's compile command (`export PKG_CONFIG_PATH=...`, `mpicc ... app.c -o app
/// $(pkg-config --cflags --libs pcm)`) in `dir`, after a strict compile of `app.c` (warnings
/// as errors) with the same flags.
/// The C guide's first two `c` blocks of `section`, put in `template` at their markers
/// (each block must contain the call named beside its marker), built as the guide says
/// against an install made as it says, in a new home: that home (kept alive) and the program.
fn c_guide_program(
    template: &str,
    section: &str,
    markers: [(&str, &str); 2],
) -> (tempfile::TempDir, PathBuf) {
    let home = tempfile::tempdir().unwrap();
    install_as_the_c_guide_says(home.path());
    let dir = home.path().join("app");
    std::fs::create_dir(&dir).unwrap();
    let mut source = template.to_owned();
    for (n, (marker, call)) in markers.into_iter().enumerate() {
        let fragment = block(C_PAGE, section, "c", n).text;
        assert!(fragment.contains(call), "{fragment}");
        source = source.replace(marker, &fragment);
    }
    std::fs::write(dir.join("app.c"), source).unwrap();
    let app = build_as_the_c_guide_says(home.path(), &dir);
    (home, app)
}

fn build_as_the_c_guide_says(home: &Path, dir: &Path) -> PathBuf {
    let commands = block(C_PAGE, "Build and install", "sh", 1).text;
    assert!(commands.contains("app.c -o app"), "{commands}");
    let strict = "export PKG_CONFIG_PATH=$HOME/pcm/lib/pkgconfig\n\
                  mpicc -std=c11 -Wall -Wextra -Werror -fsyntax-only app.c $(pkg-config --cflags pcm)";
    user_shell(home, dir, strict, "app.c with warnings as errors");
    user_shell(home, dir, &commands, "the compile command");
    dir.join("app")
}

/// Runs `program` on `ranks` ranks with `PCM_SCHEDULE=schedule`; it must end with status 0.
/// Without cargo's `LD_LIBRARY_PATH`, so that the installed libpcm is the one loaded.
fn run(program: &Path, args: &[String], ranks: usize, schedule: &str) -> Finished {
    let mut job = MpiJob::of(ranks, program, args);
    if !schedule.is_empty() {
        job = job.env("PCM_SCHEDULE", schedule);
    }
    let mut command = job.command();
    command.env_remove("LD_LIBRARY_PATH");
    let logs = tempfile::tempdir().unwrap();
    let finished = Group::start(command, logs.path(), "doc").wait(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "{} with PCM_SCHEDULE={schedule} failed\n--- stdout\n{}\n--- stderr\n{}",
        program.display(),
        finished.stdout,
        finished.stderr
    );
    finished
}

/// The line of `finished`'s stdout that starts with `prefix`.
fn line<'a>(finished: &'a Finished, prefix: &str) -> &'a str {
    finished
        .stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no \"{prefix}\" line:\n{}", finished.stdout))
}

// ---------------------------------------------------------------------------------------
// docs/instrumenting-c.md

/// The smallest program the C guide's "Step by step" implies around its two fragments: one
/// array of state, an iteration counter stored as `PCM_LONG`, an all-reduce per iteration.
const C_STEP_BY_STEP: &str = r#"#include <mpi.h>
#include <stdio.h>
#include "pcm.h"

enum { n = 1000 };
static const long iterations = 200;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    if (PCM_Init(&comm, "myapp") != PCM_SUCCESS) {
        fprintf(stderr, "%s\n", PCM_Last_error());
        return 1;
    }
    int rank;
    MPI_Comm_rank(comm, &rank);
    static double grid[n];
    for (int i = 0; i < n; i++)
        grid[i] = rank + i;
    long start = 0;
/* STEP 2 */
    double total = 0;
    for (long iteration = start; iteration < iterations; iteration++) {
/* STEP 3 */
        double local = 0;
        for (int i = 0; i < n; i++) {
            grid[i] = 0.999 * grid[i] + (double)iteration;
            local += grid[i];
        }
        MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, comm);
    }
    if (rank == 0)
        printf("total %a\nmoves %ld\n", total, PCM_Migrations());
    PCM_Finalize(comm);
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn given_the_c_guide_then_its_step_by_step_fragments_build_as_it_says_and_moves_keep_the_total() {
    let (_home, app) = c_guide_program(
        C_STEP_BY_STEP,
        "Step by step",
        [
            ("/* STEP 2 */\n", "PCM_Process_Status()"),
            ("/* STEP 3 */\n", "PCM_Status(comm)"),
        ],
    );

    let _lock = mpi_lock();
    let reference = run(&app, &[], 2, "");
    assert_eq!(line(&reference, "moves "), "moves 0");
    for schedule in ["50:1", "50:0"] {
        let moved = run(&app, &[], 2, schedule);
        assert_eq!(line(&moved, "moves "), "moves 1", "PCM_SCHEDULE={schedule}");
        assert_eq!(
            line(&moved, "total "),
            line(&reference, "total "),
            "PCM_SCHEDULE={schedule}"
        );
    }
}

/// The smallest malleable program around the C guide's two malleable fragments: a
/// `global_rows` x `row_len` array in row blocks, each element an integer below 2^20 kept in
/// a double, so that the sum is exact in any order (the total does not depend on how the
/// rows are split) and each element depends on its global row (a row loaded into the wrong
/// place changes it).
const C_MALLEABLE: &str = r#"#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include "pcm.h"

static const long global_rows = 60, row_len = 8, iterations = 120;
static const int max_ranks = 4;

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm comm = MPI_COMM_WORLD;
    if (PCM_Init(&comm, "myapp") != PCM_SUCCESS) {
        fprintf(stderr, "%s\n", PCM_Last_error());
        return 1;
    }
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
/* DECLARE */
    long first_row, nrows;
    PCM_Block_range("grid", &first_row, &nrows);
    double *my_rows = malloc(sizeof(double) * nrows * row_len);
    for (long k = 0; k < nrows * row_len; k++)
        my_rows[k] = first_row * row_len + k;
    long start = 0;
    int spawnrank = PCM_Process_Status();
    if (spawnrank >= 0) {            /* a replacement, an added process, a restart */
        PCM_Load_checked(spawnrank, "iteration", &start, PCM_LONG, 1);
        PCM_Load_checked(spawnrank, "grid", my_rows, PCM_DOUBLE, nrows * row_len);
    }
    for (long iteration = start; iteration < iterations; iteration++) {
/* LOOP */
        for (long k = 0; k < nrows * row_len; k++)
            my_rows[k] = (3 * (long)my_rows[k] + iteration + first_row + k / row_len) % 1048573;
    }
    double local = 0, total = 0;
    for (long k = 0; k < nrows * row_len; k++)
        local += my_rows[k];
    MPI_Reduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
    if (rank == 0)
        printf("total %.0f\nranks %d resizes %ld\n", total, size, PCM_Resizes());
    free(my_rows);
    PCM_Finalize(comm);
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn given_the_malleable_fragments_then_a_shrink_a_grow_and_a_move_keep_the_total() {
    let (_home, app) = c_guide_program(
        C_MALLEABLE,
        "Malleable jobs (resizes)",
        [
            ("/* DECLARE */\n", "PCM_Declare_block"),
            ("/* LOOP */\n", "PCM_RESIZE"),
        ],
    );

    let _lock = mpi_lock();
    let reference = run(&app, &[], 2, "");
    assert_eq!(line(&reference, "ranks "), "ranks 2 resizes 0");
    // Down to one rank, back to two (an added process loads its rows), then rank 0 moves.
    let schedule = "30:size=1,60:size=2,90:0";
    let resized = run(&app, &[], 2, schedule);
    assert_eq!(line(&resized, "ranks "), "ranks 2 resizes 2", "{schedule}");
    assert_eq!(
        line(&resized, "total "),
        line(&reference, "total "),
        "PCM_SCHEDULE={schedule}"
    );
}

#[test]
fn given_the_fortran_resize_fragment_then_it_is_jacobi_f90s_own_code() {
    // The fragment shows jacobi-f90's code (which tests/tests/resize_c.rs runs through
    // resizes): each of its lines is one of jacobi.f90's, in the same order.
    let fragment = block(C_PAGE, "Malleable jobs (resizes)", "fortran", 0).text;
    let source =
        std::fs::read_to_string(repo_root().join("examples/jacobi-f90/jacobi.f90")).unwrap();
    // Lines compared without indentation and `!` comments (the fragment's have none).
    fn code(line: &str) -> &str {
        line.split('!').next().unwrap_or_default().trim()
    }
    let source: Vec<&str> = source.lines().map(code).collect();
    let lines: Vec<&str> = fragment.lines().map(code).collect();
    let found = source
        .windows(lines.len())
        .any(|window| window == lines.as_slice());
    assert!(
        found,
        "the Fortran fragment of {C_PAGE} is not in examples/jacobi-f90/jacobi.f90:\n{fragment}"
    );
}

#[test]
fn given_the_c_guides_cmake_project_and_fortran_command_then_both_build_against_the_install() {
    let home = tempfile::tempdir().unwrap();
    install_as_the_c_guide_says(home.path());

    // CMake: the page's CMakeLists.txt around the step-by-step program, configured as its
    // comment says; run once with a move.
    let project = home.path().join("cmake-app");
    std::fs::create_dir(&project).unwrap();
    let lists = block(C_PAGE, "Build and install", "cmake", 0).text;
    std::fs::write(project.join("CMakeLists.txt"), &lists).unwrap();
    let source = C_STEP_BY_STEP
        .replace(
            "/* STEP 2 */\n",
            &block(C_PAGE, "Step by step", "c", 0).text,
        )
        .replace(
            "/* STEP 3 */\n",
            &block(C_PAGE, "Step by step", "c", 1).text,
        );
    std::fs::write(project.join("app.c"), source).unwrap();
    let configured = user_shell(
        home.path(),
        &project,
        "cmake -DCMAKE_PREFIX_PATH=$HOME/pcm -S . -B build && cmake --build build",
        "the CMake project",
    );
    let warnings = text(&configured.stderr);
    assert!(
        !warnings.contains("CMake Warning"),
        "the page's CMakeLists.txt gives warnings:\n{warnings}"
    );
    let app = project.join("build/app");
    {
        let _lock = mpi_lock();
        let moved = run(&app, &[], 2, "50:1");
        assert_eq!(line(&moved, "moves "), "moves 1");
    }

    // Fortran: the page's mpif90 command on the page's program, in the shell of the
    // compile command above (PKG_CONFIG_PATH exported); capi.rs runs that program.
    let dir = home.path().join("fortran-app");
    std::fs::create_dir(&dir).unwrap();
    let program = block(C_PAGE, "Fortran", "fortran", 0).text;
    std::fs::write(dir.join("app.f90"), program).unwrap();
    let command = block(C_PAGE, "Fortran", "sh", 0).text;
    assert!(command.contains("app.f90 -o app"), "{command}");
    user_shell(
        home.path(),
        &dir,
        &format!("export PKG_CONFIG_PATH=$HOME/pcm/lib/pkgconfig\n{command}"),
        "the mpif90 command",
    );
    assert!(dir.join("app").is_file());
}

// ---------------------------------------------------------------------------------------
// docs/instrumenting-python.md

/// The smallest mpi4py program around the Python guide's two fragments.
const PYTHON_STEP_BY_STEP: &str = r#"import numpy as np
import pcm
from mpi4py import MPI

world = pcm.init(MPI.COMM_WORLD, "myapp")
rank = world.Get_rank()
iterations = 200
grid = np.arange(1000, dtype=np.float64) + rank
start = 0
# STEP 2
total = 0.0
for iteration in range(start, iterations):
# STEP 3
    grid *= 0.999
    grid += iteration
    total = world.allreduce(float(grid.sum()), op=MPI.SUM)
if rank == 0:
    print("total", total.hex())
    print("moves", pcm.migrations())
pcm.finalize(world)
"#;

#[test]
fn given_the_python_guide_then_its_fragments_run_and_moves_keep_the_total() {
    let python = match runtime_python() {
        Ok(python) => python,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let page = "docs/instrumenting-python.md";
    let load = block(page, "Step by step", "python", 0).text;
    let status = block(page, "Step by step", "python", 1).text;
    let indented: String = status.lines().map(|l| format!("    {l}\n")).collect();
    let source = PYTHON_STEP_BY_STEP
        .replace("# STEP 2\n", &load)
        .replace("# STEP 3\n", &indented);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("app.py");
    std::fs::write(&script, source).unwrap();

    let _lock = mpi_lock();
    let total = |schedule: &str| -> (String, String) {
        let mut job = MpiJob::of(2, &python, &[script.display().to_string()])
            .env(
                "PYTHONPATH",
                repo_root().join("python").display().to_string(),
            )
            .env("PCM_LIBRARY", program("libpcm.so").display().to_string());
        if !schedule.is_empty() {
            job = job.env("PCM_SCHEDULE", schedule);
        }
        let finished = job.run(DEADLINE);
        assert_eq!(
            finished.code,
            Some(0),
            "PCM_SCHEDULE={schedule}\n--- stdout\n{}\n--- stderr\n{}",
            finished.stdout,
            finished.stderr
        );
        (
            line(&finished, "total ").to_owned(),
            line(&finished, "moves ").to_owned(),
        )
    };
    let (reference, moves) = total("");
    assert_eq!(moves, "moves 0");
    for schedule in ["50:1", "50:0"] {
        assert_eq!(
            total(schedule),
            (reference.clone(), "moves 1".to_owned()),
            "PCM_SCHEDULE={schedule}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// docs/instrumenting.md

#[test]
fn given_the_rust_guides_dependency_line_then_cargo_resolves_pcm_from_the_repository() {
    // The reader's crate next to a clone named mpi-ios, as the path says.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo_root(), dir.path().join("mpi-ios")).unwrap();
    let app = dir.path().join("app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    let dependency = block(
        "docs/instrumenting.md",
        "Depending on pcm from another crate",
        "toml",
        0,
    )
    .text;
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n{dependency}"
        ),
    )
    .unwrap();
    std::fs::write(app.join("src/main.rs"), "fn main() {}\n").unwrap();
    // Resolved from the lock file of the repository's own build: no network, no compiling.
    std::fs::copy(repo_root().join("Cargo.lock"), app.join("Cargo.lock")).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--edges", "normal", "--depth", "1"])
        .current_dir(&app)
        .output()
        .unwrap();
    let tree = text(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree of a crate with the page's dependency failed:\n{}",
        text(&out.stderr)
    );
    let pcm = format!(
        "pcm v{} ({}/mpi-ios/pcm)",
        env!("CARGO_PKG_VERSION"),
        dir.path().display()
    );
    assert!(
        tree.lines().any(|l| l.ends_with(&pcm)),
        "the page's dependency does not resolve to this repository's pcm ({pcm}):\n{tree}"
    );
}

#[test]
fn given_the_events_command_of_the_rust_guide_then_it_writes_the_runs_events() {
    let command = block(
        "docs/instrumenting.md",
        "Following a run: events, not logs",
        "sh",
        0,
    )
    .text;
    // The page's /tmp/run as a directory of this test's own; target/release as the
    // directory of the programs under test.
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("run/events.jsonl");
    let script = command
        .replace("/tmp/run", &dir.path().join("run").display().to_string())
        .replace("target/release/", &format!("{}/", program_dir().display()));
    let _lock = mpi_lock();
    let mut shell = Command::new("bash");
    shell
        .args(["-e", "-c", &script])
        .current_dir(dir.path())
        .env("PATH", setup_path())
        .env("PCM_DAEMON", "none")
        .envs(Runtime::current().test_env());
    let finished = Group::start(shell, dir.path(), "events").wait(DEADLINE);
    assert_eq!(
        finished.code,
        Some(0),
        "the events command, as the page shows it, failed\n--- script\n{script}\n--- stderr\n{}",
        finished.stderr
    );
    let events = std::fs::read_to_string(&events).unwrap();
    for event in [
        "\"started\"",
        "\"loop_started\"",
        "\"progress\"",
        "\"exited\"",
    ] {
        assert!(events.contains(event), "no {event} event in:\n{events}");
    }
}

// ---------------------------------------------------------------------------------------
// README.md

#[test]
fn given_the_readmes_first_run_then_heat2d_runs_on_four_ranks_as_written() {
    let commands = block("README.md", "MPI runtimes: Open MPI 4 or MPICH 5", "sh", 1).text;
    let mut lines = commands.lines();
    assert_eq!(lines.next(), Some("cargo build --release")); // scripts/test.sh builds so
    let launch = lines.next().unwrap();
    assert!(
        launch.starts_with("mpiexec -n 4 \"$CARGO_TARGET_DIR/release/heat2d\""),
        "{launch}"
    );
    let dir = tempfile::tempdir().unwrap();
    let target = program_dir().parent().unwrap().to_path_buf();
    let _lock = mpi_lock();
    let mut shell = Command::new("bash");
    shell
        .args(["-e", "-c", launch])
        .current_dir(repo_root())
        .env("PATH", setup_path())
        .env("CARGO_TARGET_DIR", &target)
        .env("PCM_DAEMON", "none")
        .envs(Runtime::current().test_env());
    let finished = Group::start(shell, dir.path(), "readme").wait(DEADLINE);
    assert_eq!(finished.code, Some(0), "{launch}\n{}", finished.stderr);
    let report = finished.report();
    assert_eq!((report.ranks, report.iterations), (4, 1000));
}

#[test]
fn given_the_readmes_pcmrun_commands_then_they_parse_and_launch_as_documented() {
    let commands = block("README.md", "Running your own job", "sh", 0).text;
    let lines: Vec<&str> = commands.lines().collect();
    assert_eq!(lines.len(), 2, "{commands}");
    let words = |line: &str| -> Vec<String> {
        line.split('#')
            .next()
            .unwrap()
            .split_whitespace()
            .map(|w| match w.strip_prefix("target/release/") {
                Some("pcmrun") => bin_dir().join("pcmrun").display().to_string(),
                Some(name) => program_dir().join(name).display().to_string(),
                None => w.to_owned(),
            })
            .collect()
    };
    // `pcmrun --help`, as written.
    let help = words(lines[1]);
    let out = Command::new(&help[0]).args(&help[1..]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("--checkpoint-interval"));
    // The launch, with the --dry-run the same block names: its options parse and the
    // command pcmrun would run names the program and its arguments.
    let launch = words(lines[0]);
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(&launch[0])
        .arg("--dry-run")
        .args(&launch[1..])
        .env("HOME", home.path())
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_STATE_HOME")
        .env("PCM_DAEMON", home.path().join("pcmd.sock"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{lines:?} with --dry-run failed:\n{}",
        text(&out.stderr)
    );
    let shown = text(&out.stdout) + &text(&out.stderr);
    assert!(
        shown.contains("--rows 2048 --cols 2048 --iters 1000000"),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------
// docs/checkpoints.md

/// `code` without `//` comments and without white space.
fn tokens(code: &str) -> String {
    code.lines()
        .map(|l| l.split("//").next().unwrap())
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect()
}

#[test]
fn given_the_checkpoint_pages_rust_fragment_then_it_is_part_of_a_doctest() {
    // pcm's doc-tests compile instrumenting.md's explicit-calls program; the fragment of
    // checkpoints.md is that program's loop body, comments aside.
    let fragment = block("docs/checkpoints.md", "Using it", "rust", 0).text;
    let program = block("docs/instrumenting.md", "The explicit calls", "rust", 0).text;
    assert!(
        tokens(&program).contains(&tokens(&fragment)),
        "the Rust fragment of docs/checkpoints.md is not the explicit-calls doc-test's \
         code of docs/instrumenting.md:\n{fragment}"
    );
}
