//! What `ios-agent` does for each subcommand: `join` runs the agent ([`crate::join`]);
//! `leave`, `status` and `keygen` talk to it through its control socket, or write a key.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use crate::cli::Command;
use crate::control::{self, ControlError, ControlMessage, ControlReply};
use crate::settings::Settings;

/// Runs the subcommand of `settings`' command line.
pub fn run(settings: Settings) -> Result<()> {
    match &settings.cli.command {
        Command::Join(args) => crate::join::join(&settings, args),
        Command::Leave(args) => {
            let path = settings.control_socket(None)?;
            println!(
                "draining this node (agent at {}), at most {:.0} s",
                path.display(),
                args.within.as_secs_f64()
            );
            let reply = control::leave(&path, args.within, args.force, |report| {
                println!("  {}", report.summary());
            })
            .map_err(|e| with_sockets_beside(e, settings.control_given()))?;
            match reply {
                ControlReply::Left(report) if report.is_empty() => {
                    println!(
                        "left the pool: {} rank(s) moved in {:.1} s; no process of any job is left on this node",
                        report.moved, report.elapsed_s
                    );
                    Ok(())
                }
                ControlReply::Left(report) => {
                    println!("left the pool WITHOUT a full drain (--force): {}", report.summary());
                    println!("what is listed above still runs on this node");
                    Ok(())
                }
                ControlReply::Stayed(report) => bail!(
                    "the node could not be drained within {:.0} s, so the agent stays in the pool: {}{}. \
                     `ios-agent leave --force` stops the agent anyway",
                    args.within.as_secs_f64(),
                    report.summary(),
                    why_not_drained(&report)
                ),
                ControlReply::Error(e) => bail!("the agent refused: {e}"),
                other => bail!("unexpected reply from the agent: {other:?}"),
            }
        }
        Command::Status { json } => {
            let path = settings.control_socket(None)?;
            let reply = control::request(&path, ControlMessage::Status, Duration::from_secs(10))
                .map_err(|e| with_sockets_beside(e, settings.control_given()))?;
            match reply {
                ControlReply::Status(status) if *json => {
                    println!("{}", serde_json::to_string_pretty(&status)?);
                    Ok(())
                }
                ControlReply::Status(status) => {
                    print!("{}", status.to_text());
                    Ok(())
                }
                ControlReply::Error(e) => bail!("the agent refused: {e}"),
                other => bail!("unexpected reply from the agent: {other:?}"),
            }
        }
        Command::Keygen { file } => {
            let key = crate::net::write_new_pool_key(file)?;
            println!(
                "wrote a new pool key to {} (fingerprint {})",
                file.display(),
                key.fingerprint()
            );
            Ok(())
        }
    }
}

/// The likely reason a drain did not finish, for the person who asked.
fn why_not_drained(report: &crate::driver::LeaveReport) -> String {
    if !report.ranks_left.is_empty() && report.peers == 0 {
        " (this agent knows no other node of the pool)".to_owned()
    } else if !report.ranks_left.is_empty() {
        format!(
            " (none of the {} known nodes had room for the ranks left)",
            report.peers
        )
    } else if report.processes.is_empty() {
        String::new()
    } else if report
        .processes
        .iter()
        .any(|p| p.role == crate::job_processes::Role::Rank)
    {
        " (every rank moved, but a departed rank still runs: Open MPI 4 keeps a departed \
         process until its job ends; see README, \"MPI runtimes\")"
            .to_owned()
    } else {
        " (every rank moved, but the launcher's proxy stays: Open MPI 4's orted lives as long \
         as its job, and killing it would end the job; see README, \"MPI runtimes\")"
            .to_owned()
    }
}

/// `e`; when no agent answers at the default control socket (`given`, the value of
/// neither `--control` nor `IOS_AGENT_CONTROL`, is `None`), with the sockets beside it: an agent joined with
/// `--host NAME`, NAME not the machine's name, listens at `NAME.sock`.
fn with_sockets_beside(e: ControlError, given: Option<&str>) -> anyhow::Error {
    let defaulted = given.is_none();
    if let ControlError::NotRunning { path } = &e {
        let others = control::sockets_beside(path);
        if defaulted && !others.is_empty() {
            let names: Vec<String> = others.iter().map(|p| p.display().to_string()).collect();
            return anyhow!(
                "{e}. Control sockets beside it: {} (an agent joined with --host NAME listens at NAME.sock; give it with --control)",
                names.join(", ")
            );
        }
    }
    e.into()
}
