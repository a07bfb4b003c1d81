//! Fuzz target for every decoder of pcmd input, run for a bounded time in the tests: the
//! main protocol's `FrameReader`, the checkpoint channel's `read_frame`, the authentication
//! frames, manifests and piece headers.
//!
//! Inputs are random bytes and, more usefully, valid frames with random mutations (flipped
//! bits, changed length prefixes, cuts, splices), fed in random chunk sizes. Decoding must
//! never panic, never allocate beyond the frame limit, and every valid frame must still
//! decode. `PCM_FUZZ_SECONDS` sets the time (default 3); `PCM_FUZZ_SEED` replays a run
//! (the seed is printed).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use pcm_proto::checkpoint::{
    self as ckpt, auth, Digest, Manifest, PieceEntry, PieceHeader, PieceId, Request, Response,
    Series, FORMAT_VERSION,
};
use pcm_proto::{
    encode, AppName, ClientKind, FrameReader, FromDaemon, HostName, JobId, Rank, ToDaemon,
};

/// xorshift64*: small, seedable, good enough to drive mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn series() -> Series {
    Series {
        app: AppName::new("heat2d").unwrap(),
        size: 3,
        name: None,
    }
}

fn manifest() -> Manifest {
    Manifest {
        format: FORMAT_VERSION,
        series: series(),
        iteration: 77,
        job: JobId::new("heat2d-00ff").unwrap(),
        created_unix_s: 5,
        identity: ckpt::Identity {
            program: "heat2d".into(),
            args: vec!["--rows".into(), "400".into()],
        },
        digests: vec![Digest::of(b"0"), Digest::of(b"1"), Digest::of(b"2")],
        lens: vec![10, 20, 30],
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let piece = PieceId {
        series: series(),
        iteration: 77,
        rank: Rank(2),
    };
    vec![
        encode(&ToDaemon::Hello {
            version: 1,
            client: ClientKind::Rank,
        }),
        encode(&ToDaemon::Register {
            job: JobId::new("j").unwrap(),
            app: AppName::new("a").unwrap(),
            rank: Rank(1),
            size: 2,
            host: HostName::new("h").unwrap(),
            pid: 9,
            replacement: false,
            reconfigurations: 0,
        }),
        encode(&FromDaemon::Registered),
        encode(&Request::Hello {
            version: FORMAT_VERSION,
            dir: None,
        }),
        encode(&Request::Hello {
            version: FORMAT_VERSION,
            dir: Some("/home/me/job/checkpoints".into()),
        }),
        encode(&Request::Put {
            piece: piece.clone(),
            len: 4096,
            digest: Digest::of(b"x"),
        }),
        encode(&Request::Commit {
            manifest: manifest(),
        }),
        encode(&Request::Get { piece }),
        encode(&Response::Listing {
            available: vec![ckpt::Available {
                iteration: 3,
                digest: Digest::of(b"y"),
                len: 9,
                at_buddy: true,
                job: JobId::new("heat2d-00ff").unwrap(),
                identity: ckpt::Identity::default(),
            }],
            rejected: vec![],
            finished: Some(ckpt::Finished {
                job: JobId::new("heat2d-00ff").unwrap(),
                iteration: 9,
                unix_s: 1,
                resumed: false,
            }),
        }),
        encode(&Request::Finish {
            series: series(),
            finished: ckpt::Finished {
                job: JobId::new("heat2d-00ff").unwrap(),
                iteration: 9,
                unix_s: 1,
                resumed: true,
            },
        }),
        encode(&auth::Hello {
            version: FORMAT_VERSION,
            client_nonce: [3; 32],
        }),
        manifest().encode(),
        PieceHeader {
            format: FORMAT_VERSION,
            piece: PieceId {
                series: series(),
                iteration: 1,
                rank: Rank(0),
            },
            job: JobId::new("j").unwrap(),
            host: HostName::new("h").unwrap(),
            entries: vec![PieceEntry {
                name: "grid".into(),
                encoded: false,
                type_name: "[f64]".into(),
                len: 8,
            }],
            reconfigurations: 0,
        }
        .encode(),
    ]
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            2 => input.truncate(rng.below(input.len() + 1)),
            3 if input.len() >= 4 => {
                // A length prefix that lies: small, huge, or just past the end.
                let len = match rng.below(3) {
                    0 => rng.below(64) as u32,
                    1 => u32::MAX - rng.below(16) as u32,
                    _ => (input.len() as u32).saturating_sub(3),
                };
                input[..4].copy_from_slice(&len.to_be_bytes());
            }
            4 => {
                let other = &pool[rng.below(pool.len())];
                let at = rng.below(input.len() + 1);
                let take = rng.below(other.len() + 1);
                input.splice(at..at, other[..take].iter().copied());
            }
            _ => {
                let n = rng.below(16);
                input.extend((0..n).map(|_| rng.next() as u8));
            }
        }
    }
}

/// Runs every decoder on `input`; panics only through a decoder's own bug.
fn decode_all(rng: &mut Rng, input: &[u8]) -> usize {
    let mut decoded = 0;
    let mut reader = FrameReader::new();
    for chunk in input.chunks(1 + rng.below(64)) {
        reader.feed(chunk);
        while let Ok(Some(_)) = reader.next_message::<ToDaemon>() {
            decoded += 1;
        }
    }
    let _ = reader.finish();
    let mut rest = input;
    while let Ok(Some(_)) = ckpt::read_frame::<Request>(&mut rest) {
        decoded += 1;
    }
    let _ = ckpt::read_frame::<Response>(&mut &input[..]);
    let _ = ckpt::read_frame::<auth::Hello>(&mut &input[..]);
    let _ = ckpt::read_frame::<auth::Challenge>(&mut &input[..]);
    let _ = pcm_proto::decode::<FromDaemon>(input);
    let _ = Manifest::decode(input);
    let _ = PieceHeader::read(&mut &input[..], &mut ckpt::Hasher::new());
    decoded
}

#[test]
fn fuzz_decoders_for_a_bounded_time() {
    let seconds: f64 = std::env::var("PCM_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let seed: u64 = std::env::var("PCM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    println!("fuzz seed {seed} (replay with PCM_FUZZ_SEED={seed})");
    let mut rng = Rng(seed);
    let pool = seeds();
    // Every unmutated seed frame decodes.
    for frame in &pool[..9] {
        let mut r = frame.as_slice();
        assert!(
            pcm_proto::decode::<ToDaemon>(&frame[4..]).is_ok()
                || pcm_proto::decode::<FromDaemon>(&frame[4..]).is_ok()
                || matches!(ckpt::read_frame::<Request>(&mut r), Ok(Some(_)))
                || ckpt::read_frame::<Response>(&mut frame.as_slice()).is_ok_and(|f| f.is_some())
                || ckpt::read_frame::<auth::Hello>(&mut frame.as_slice()).is_ok()
        );
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut cases = 0u64;
    let mut decoded = 0usize;
    while Instant::now() < deadline {
        for _ in 0..64 {
            let mut input = if rng.below(8) == 0 {
                (0..rng.below(256)).map(|_| rng.next() as u8).collect()
            } else {
                pool[rng.below(pool.len())].clone()
            };
            mutate(&mut rng, &mut input, &pool);
            decoded += decode_all(&mut rng, &input);
            cases += 1;
        }
    }
    println!("{cases} inputs, {decoded} frames decoded in {seconds} s");
    assert!(cases > 1000, "only {cases} inputs in {seconds} s");
}
