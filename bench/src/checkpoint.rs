//! `mpi-ios-bench checkpoint`: checkpoint throughput to local disk and to the buddy pcmd,
//! side by side with what the disk and the loopback themselves deliver, measured in the
//! same run on the same file system.
//!
//! Per size and repetition:
//! - **disk**: write the bytes to a new file in the checkpoint file system, `fsync`;
//! - **loopback**: send the bytes over a TCP connection on 127.0.0.1 to a reader that
//!   discards them and acknowledges the end;
//! - **SHA-256**: hashing the bytes in memory (a rank hashes its piece, and the pcmd
//!   hashes it again as it writes);
//! - **checkpoint, local**: what a rank does for its piece: SHA-256 of the bytes, stream
//!   them to the node's pcmd (`<socket>.ckpt`), which writes, syncs and renames them, then
//!   commit the manifest; timed until the commit is acknowledged;
//! - **copy to buddy**: the pcmd then copies the checkpoint to its buddy pcmd (TCP on
//!   127.0.0.1, pool-key authentication, the buddy writes and syncs); timed from the local
//!   commit until the buddy's manifest exists.
//!
//! Medians over the repetitions. Both pcmds use the same disk, so the buddy copy reads and
//! writes the same device, as the local write did.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use pcm_proto::checkpoint::{
    self as ckpt, expect_frame, write_frame, Hasher, Manifest, PieceId, Request, Response, Series,
    FORMAT_VERSION,
};
use pcm_proto::{AppName, JobId, Rank};

use crate::{append_markdown, load_average, median, mem_available_bytes, try_bin, Group, Table};

/// Options of `mpi-ios-bench checkpoint`.
#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// Checkpoint sizes in MiB (one rank's piece), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,128,512")]
    sizes: Vec<u64>,
    /// Repetitions per size (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Directory on the file system to measure (a temp dir is made inside it).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Short run: one size of 8 MiB, 2 repetitions.
    #[arg(long)]
    quick: bool,
    /// Also append the table, as markdown, to this file.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
}

const KEY: &str = "/key/swarm/psk/1.0.0/\n/base16/\n\
    0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n";

/// A pcmd started for the benchmark, killed on drop.
struct Daemon {
    _group: Group,
    socket: PathBuf,
    store: PathBuf,
}

impl Daemon {
    fn start(pcmd: &Path, dir: &Path, name: &str, extra: &[String]) -> Result<Daemon> {
        let socket = dir.join(format!("{name}.sock"));
        let store = dir.join(format!("{name}-store"));
        let mut command = Command::new(pcmd);
        command
            .arg("--socket")
            .arg(&socket)
            .arg("serve")
            .arg("--checkpoint-dir")
            .arg(&store)
            .args(extra)
            .env("RUST_LOG", "warn");
        let group = Group::spawn_in_temp(command, &format!("pcmd-{name}"))?;
        let ckpt_socket = ckpt::socket_path(&socket);
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&ckpt_socket).is_err() {
            if Instant::now() > deadline {
                bail!("pcmd {name} did not start:\n{}", group.stderr_so_far());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Daemon {
            _group: group,
            socket,
            store,
        })
    }
}

fn series() -> Result<Series> {
    Ok(Series {
        app: AppName::new("ckptbench")?,
        size: 1,
        name: None,
    })
}

fn mb_per_s(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds.max(1e-9)
}

fn disk_write(dir: &Path, data: &[u8], n: usize) -> Result<f64> {
    let path = dir.join(format!("disk-{n}.bin"));
    let started = Instant::now();
    let mut file = std::fs::File::create(&path)?;
    file.write_all(data)?;
    file.sync_all()?;
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(seconds)
}

fn loopback(data: &[u8]) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let len = data.len();
    let reader = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let n = s.read(&mut buf[..left.min(1 << 20)])?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            left -= n;
        }
        s.write_all(&[1])
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let started = Instant::now();
    s.write_all(data)?;
    let mut ack = [0u8];
    s.read_exact(&mut ack)?;
    let seconds = started.elapsed().as_secs_f64();
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("loopback reader panicked"))??;
    Ok(seconds)
}

/// A rank's checkpoint: hash, stream to pcmd, commit. Returns seconds and the commit time.
fn checkpoint(node: &Daemon, data: &[u8], iteration: u64) -> Result<(f64, Instant)> {
    let started = Instant::now();
    let mut hasher = Hasher::new();
    hasher.update(data);
    let digest = hasher.finish();
    let stream = UnixStream::connect(ckpt::socket_path(&node.socket))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = BufWriter::with_capacity(1 << 20, stream);
    let piece = PieceId {
        series: series()?,
        iteration,
        rank: Rank(0),
    };
    write_frame(
        &mut writer,
        &Request::Hello {
            version: FORMAT_VERSION,
            dir: None,
        },
    )?;
    write_frame(
        &mut writer,
        &Request::Put {
            piece,
            len: data.len() as u64,
            digest,
        },
    )?;
    writer.write_all(data)?;
    writer.flush()?;
    for _ in 0..2 {
        match expect_frame::<Response>(&mut reader)? {
            Response::Welcome { .. } | Response::Stored => {}
            other => bail!("pcmd answered {other:?}"),
        }
    }
    let manifest = Manifest {
        format: FORMAT_VERSION,
        series: series()?,
        iteration,
        job: JobId::new("ckptbench")?,
        created_unix_s: 0,
        identity: Default::default(),
        digests: vec![digest],
        lens: vec![data.len() as u64],
    };
    write_frame(&mut writer, &Request::Commit { manifest })?;
    writer.flush()?;
    match expect_frame::<Response>(&mut reader)? {
        Response::Committed => {}
        other => bail!("pcmd answered {other:?} to the commit"),
    }
    Ok((started.elapsed().as_secs_f64(), Instant::now()))
}

fn wait_for_buddy(buddy: &Daemon, iteration: u64, since: Instant) -> Result<f64> {
    let manifest = buddy
        .store
        .join("ckptbench-1r")
        .join(format!("{iteration:020}"))
        .join("manifest");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !manifest.exists() {
        ensure!(
            Instant::now() < deadline,
            "the buddy did not receive checkpoint {iteration} within 300 s"
        );
        std::thread::sleep(Duration::from_micros(500));
    }
    Ok(since.elapsed().as_secs_f64())
}

/// Runs the benchmark.
pub fn run(mut args: CheckpointArgs) -> Result<()> {
    if args.quick {
        args.sizes = vec![8];
        args.reps = 2;
    }
    ensure!(args.reps >= 1, "--reps must be at least 1");
    let pcmd = try_bin("pcmd")?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("mpi-ios-bench-ckpt")
        .tempdir_in(&base)
        .with_context(|| format!("making a temp dir in {}", base.display()))?;
    let key = dir.path().join("pool.key");
    std::fs::write(&key, KEY)?;
    let key = key.display().to_string();
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let buddy = Daemon::start(
        &pcmd,
        dir.path(),
        "buddy",
        &[
            "--listen".into(),
            addr.clone(),
            "--pool-key".into(),
            key.clone(),
        ],
    )?;
    let node = Daemon::start(
        &pcmd,
        dir.path(),
        "node",
        &["--buddy".into(), addr, "--pool-key".into(), key],
    )?;
    let load_before = load_average();
    let mut table = Table::new(&[
        "size MiB",
        "reps",
        "disk write+fsync MB/s",
        "loopback TCP MB/s",
        "SHA-256 MB/s",
        "checkpoint to local pcmd MB/s",
        "copy to buddy pcmd MB/s",
        "local / disk",
        "buddy / min(disk, loopback)",
    ]);
    let mut iteration = 0;
    for &mib in &args.sizes {
        let bytes = usize::try_from(mib << 20).context("size too large")?;
        if let Some(avail) = mem_available_bytes() {
            if (bytes as u64) * 3 > avail {
                eprintln!("[checkpoint] skipping {mib} MiB: MemAvailable is {avail} bytes");
                continue;
            }
        }
        let mut data = vec![0u8; bytes];
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ mib;
        for chunk in data.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        let (mut disk, mut net, mut local, mut copy) = (vec![], vec![], vec![], vec![]);
        let mut hash = vec![];
        for rep in 0..args.reps {
            disk.push(mb_per_s(bytes, disk_write(dir.path(), &data, rep)?));
            net.push(mb_per_s(bytes, loopback(&data)?));
            let started = Instant::now();
            let mut hasher = Hasher::new();
            hasher.update(&data);
            std::hint::black_box(hasher.finish());
            hash.push(mb_per_s(bytes, started.elapsed().as_secs_f64()));
            iteration += 1;
            let (seconds, committed) = checkpoint(&node, &data, iteration)?;
            local.push(mb_per_s(bytes, seconds));
            copy.push(mb_per_s(
                bytes,
                wait_for_buddy(&buddy, iteration, committed)?,
            ));
            eprintln!(
                "[checkpoint] {mib} MiB rep {rep}: disk {:.0}, loopback {:.0}, sha256 {:.0}, local {:.0}, buddy {:.0} MB/s",
                disk[rep], net[rep], hash[rep], local[rep], copy[rep]
            );
        }
        let (d, n, l, c) = (median(&disk), median(&net), median(&local), median(&copy));
        table.push(vec![
            mib.to_string(),
            args.reps.to_string(),
            format!("{d:.0}"),
            format!("{n:.0}"),
            format!("{:.0}", median(&hash)),
            format!("{l:.0}"),
            format!("{c:.0}"),
            format!("{:.2}", l / d),
            format!("{:.2}", c / d.min(n)),
        ]);
    }
    let notes = vec![
        format!(
            "File system of {}; load average before: {load_before}, after: {}.",
            base.display(),
            load_average()
        ),
        "Local checkpoint = SHA-256 + stream to pcmd + write + fsync + rename + manifest commit. \
         Buddy copy = from the local commit until the buddy's manifest exists (authenticated TCP \
         on 127.0.0.1, buddy writes + fsyncs on the same disk)."
            .to_owned(),
    ];
    print!("{}", table.to_text());
    for note in &notes {
        println!("{note}");
    }
    if let Some(path) = &args.markdown {
        append_markdown(path, "Checkpoint throughput", &table, &notes)?;
    }
    Ok(())
}
