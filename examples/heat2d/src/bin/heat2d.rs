//! `heat2d`: the heat application instrumented with PCM (the paper's Figure 11), so that any
//! rank can be moved to another host while it runs. Compare with `heat2d-plain.rs`: the PCM
//! lines are marked `// PCM`.
//!
//! ```text
//! mpirun -np 4 heat2d --rows 1024 --cols 1024 --iters 1000 [--report-every 100]
//! ```
//!
//! Rank 0 prints a JSON [`heat2d::Report`] (with `migrations`) as its last stdout line.

use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use heat2d::{checksum, parse_on_all_ranks, Args, Block, Meta, Progress, Report};
use pcm::{Pcm, PcmError, ProcessStatus, Reconfigured, Status};

fn main() -> ExitCode {
    let pcm = match Pcm::init("heat2d") {
        Ok(pcm) => pcm,
        Err(e) => return report_error(&e),
    };
    match run(pcm) {
        Ok(code) => code,
        Err(e) => report_error(&e),
    }
}

/// Every rank may fail alike: one write per line keeps the ranks' lines whole.
fn report_error(e: &PcmError) -> ExitCode {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("heat2d: {e}\n").as_bytes());
    ExitCode::FAILURE
}

fn run(mut pcm: Pcm) -> Result<ExitCode, PcmError> {
    let (rank, size) = (pcm.rank() as usize, pcm.size() as usize);
    let args: Args = match parse_on_all_ranks(pcm.world()) {
        Ok(args) => args,
        Err(code) => return Ok(finish(pcm, code)),
    };
    let setup = args.validate(size).map_err(|e| e.to_string());
    let (mut block, start, started) = match (setup, pcm.process_status()) {
        (Err(e), _) => return Ok(fail(pcm, &e)),
        (Ok(()), ProcessStatus::Fresh) => match Block::new(args.rows, args.cols, rank, size) {
            Ok(block) => (block, 0, unix_seconds()),
            Err(e) => return Ok(fail(pcm, &e.to_string())),
        },
        // A replacement, or a restart from a checkpoint: load the stored state.
        (Ok(()), ProcessStatus::Replacement { .. } | ProcessStatus::Restarted { .. }) => {
            let mut meta = [0u64; 4];
            pcm.load_array_into("meta", &mut meta)?; // PCM
            let meta = Meta::from_words(meta).map_err(|e| PcmError::Handover(e.to_string()))?;
            let block = Block::from_parts(meta, pcm.load_array("grid")?) // PCM
                .map_err(|e| PcmError::Handover(e.to_string()))?;
            (
                block,
                pcm.load::<u64>("iteration")?,
                pcm.load::<f64>("started")?,
            ) // PCM
        }
    };

    let mut progress =
        Progress::new(args.report_every, args.iters, Instant::now()).starting_at(start);
    for iteration in start..args.iters {
        match pcm.status()? {
            // PCM
            Status::Continue => {}
            status => {
                if status.stores_state() {
                    pcm.store("iteration", &iteration)?; // PCM
                    pcm.store("started", &started)?; // PCM
                    pcm.store_array("meta", &block.meta().to_words())?; // PCM
                    pcm.store_array("grid", &block.data)?; // PCM
                }
                match pcm.reconfigure()? {
                    // PCM
                    Reconfigured::Continue(next) => pcm = next,
                    Reconfigured::Departed(departed) => {
                        drop(block);
                        departed.finalize(); // PCM
                    }
                }
            }
        }
        block.step(pcm.world());
        if pcm.rank() == 0 {
            if let Some(line) = progress.tick(iteration + 1) {
                // Where every rank runs, so that a watcher sees each move as it happens.
                let hosts: Vec<String> = pcm.rank_hosts().iter().map(ToString::to_string).collect();
                eprintln!(
                    "{line} (migrations: {}, hosts: {})",
                    pcm.migrations(),
                    hosts.join(",")
                );
            }
        }
    }
    let seconds = unix_seconds() - started;

    if let Some(checksum) = checksum(pcm.world(), &block) {
        let report = Report {
            checksum,
            iterations: args.iters,
            seconds,
            ranks: size,
            rows: args.rows,
            cols: args.cols,
            migrations: Some(pcm.migrations()),
            hosts: Some(pcm.rank_hosts().iter().map(ToString::to_string).collect()),
            mpi_library: pcm::mpi_library_version(),
        };
        if let Err(e) = report.print() {
            eprintln!("heat2d: writing the report: {e}");
            return Ok(finish(pcm, ExitCode::FAILURE));
        }
    }
    Ok(finish(pcm, ExitCode::SUCCESS))
}

/// Wall-clock seconds: the start time travels with a migrated rank 0.
fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn fail(pcm: Pcm, message: &str) -> ExitCode {
    if pcm.rank() == 0 {
        eprintln!("heat2d: {message}");
    }
    finish(pcm, ExitCode::FAILURE)
}

fn finish(pcm: Pcm, code: ExitCode) -> ExitCode {
    pcm.finalize(); // PCM
    code
}
