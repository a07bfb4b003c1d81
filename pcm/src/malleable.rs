//! Malleable jobs (docs/malleability.md): the limits a job declares, its distributed
//! arrays, and the pure parts of a resize: which ranks leave, where the added processes go,
//! how the new world is numbered, and which rows each old owner sends to each new one.
//!
//! Nothing here does MPI: every process computes the same answers from the same agreed
//! inputs, and every rule has a unit test below. The `handle::reconfigure` module carries them out.

use std::collections::BTreeMap;
use std::ops::Range;

use pcm_proto::{HostName, Move, Rank, Resize};
pub use pcm_proto::{Malleability, SizeRule};
use serde::{Deserialize, Serialize};

/// A distributed array ([`crate::Pcm::declare_block`]): `rows` global rows of `row_len`
/// elements of one type, split in row blocks over the ranks ([`block_rows`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BlockDecl {
    /// Rust's name of the element slice type (`[f64]`), as the store records it.
    pub(crate) type_name: String,
    /// Bytes per element.
    pub(crate) element_bytes: u64,
    pub(crate) rows: u64,
    pub(crate) row_len: u64,
}

impl BlockDecl {
    /// Bytes of one row.
    pub(crate) fn row_bytes(&self) -> u64 {
        self.element_bytes * self.row_len
    }
}

/// The declared arrays, by name.
pub(crate) type Blocks = BTreeMap<String, BlockDecl>;

/// The global rows `rank` of `size` owns: contiguous blocks in rank order, the first
/// `rows % size` ranks one row more (the rule of heat2d's decomposition). Empty when there
/// are more ranks than rows.
pub fn block_rows(rows: u64, rank: u32, size: u32) -> Range<u64> {
    let (rank, size) = (u64::from(rank), u64::from(size.max(1)));
    let base = rows / size;
    let extra = rows % size;
    let start = rank * base + rank.min(extra);
    let len = base + u64::from(rank < extra);
    start..start + len
}

/// A resize as the job carries it out: the request, and what it means for this job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResizePlan {
    /// What was asked.
    pub(crate) request: Resize,
    /// The job's width before it.
    pub(crate) from: u32,
    /// Ranks that leave, sorted (shrinking).
    pub(crate) departing: Vec<Rank>,
    /// Host of each added process, in order (growing; `None`: the runtime's choice).
    pub(crate) added: Vec<Option<HostName>>,
}

impl ResizePlan {
    /// The width after it.
    pub(crate) fn to(&self) -> u32 {
        self.request.ranks
    }

    /// "from 2 to 3 ranks".
    pub(crate) fn describe(&self) -> String {
        format!("from {} to {}", self.from, self.request)
    }
}

/// Works out what `request` means for a job of `size` ranks placed on `rank_hosts`, which
/// `moves` migrate at the same reconfiguration, or why it is refused.
pub(crate) fn resolve(
    request: Resize,
    size: u32,
    rank_hosts: &[HostName],
    moves: &[Move],
    limits: Option<&Malleability>,
    blocks: &Blocks,
) -> Result<ResizePlan, String> {
    let Some(limits) = limits else {
        return Err(
            "the job is not malleable: it never declared its limits (Pcm::set_malleable, PCM_Set_malleable)"
                .to_owned(),
        );
    };
    if let Some(reason) = limits.refusal(request.ranks) {
        return Err(reason);
    }
    if blocks.is_empty() {
        return Err(
            "the job declared no distributed array (Pcm::declare_block, PCM_Declare_block): added ranks would have nothing to work on"
                .to_owned(),
        );
    }
    if let Some((name, decl)) = blocks
        .iter()
        .find(|(_, d)| d.rows < u64::from(request.ranks))
    {
        return Err(format!(
            "array {name:?} has {} rows: too few for {} ranks",
            decl.rows, request.ranks
        ));
    }
    let to = request.ranks;
    let mut departing = Vec::new();
    let mut added = Vec::new();
    if to > size {
        let count = (to - size) as usize;
        added = if request.hosts.is_empty() {
            vec![None; count]
        } else {
            request
                .hosts
                .iter()
                .cycle()
                .take(count)
                .cloned()
                .map(Some)
                .collect()
        };
    } else if to < size {
        let count = (size - to) as usize;
        if let Some(idle) = request.hosts.iter().find(|h| !rank_hosts.contains(h)) {
            return Err(format!(
                "no rank of the job runs on {idle}: there is nothing to give back there"
            ));
        }
        let on_named: Vec<Rank> = (0..size)
            .rev()
            .filter(|&r| {
                rank_hosts
                    .get(r as usize)
                    .is_some_and(|h| request.hosts.contains(h))
            })
            .map(Rank)
            .collect();
        if on_named.len() > count {
            let hosts: Vec<&str> = request.hosts.iter().map(HostName::as_str).collect();
            return Err(format!(
                "{} ranks run on {}, but shrinking from {size} to {to} ranks removes only {count}: the hosts would not be given back",
                on_named.len(),
                hosts.join(", ")
            ));
        }
        departing = on_named;
        for r in (0..size).rev() {
            if departing.len() == count {
                break;
            }
            if !departing.contains(&Rank(r)) {
                departing.push(Rank(r));
            }
        }
        departing.sort();
    } else if !request.hosts.is_empty() {
        return Err(format!(
            "the job already runs with {to} ranks: there is nothing to do on the hosts named"
        ));
    }
    if let Some(m) = moves.iter().find(|m| departing.contains(&m.rank)) {
        return Err(format!(
            "rank {} both migrates and leaves in the same reconfiguration",
            m.rank
        ));
    }
    Ok(ResizePlan {
        request,
        from: size,
        departing,
        added,
    })
}

/// A process of the merged communicator of a reconfiguration: the parents (the old world,
/// merged ranks `0..parents`) and the children spawned (merged ranks `parents..`), first
/// the replacements of the moves in order, then the added processes.
pub(crate) type Merged = u32;

/// The merged rank of the process that takes each rank of the new world, in new-rank
/// order: every old rank that stays, in order (its replacement if it moves), then the
/// added processes. Without a resize this is the old numbering with the moved ranks
/// replaced.
pub(crate) fn new_world(parents: u32, moves: &[Move], resize: Option<&ResizePlan>) -> Vec<Merged> {
    let mut order = Vec::with_capacity(parents as usize);
    for r in 0..parents {
        if resize.is_some_and(|p| p.departing.contains(&Rank(r))) {
            continue;
        }
        match moves.iter().position(|m| m.rank.0 == r) {
            Some(j) => order.push(parents + j as u32),
            None => order.push(r),
        }
    }
    let added = resize.map_or(0, |p| p.added.len() as u32);
    let first_added = parents + moves.len() as u32;
    order.extend(first_added..first_added + added);
    order
}

/// Rows of a distributed array that one old rank sends to one new rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Old rank (merged rank of the parent) that holds them.
    pub(crate) from: u32,
    /// New rank that receives them.
    pub(crate) to: u32,
    /// Global rows.
    pub(crate) rows: Range<u64>,
}

/// Every piece of an array of `rows` rows going from `old` ranks to `new` ranks, in new-rank
/// order and, within one new rank, in row order: exactly the overlaps of the old and new
/// blocks, so each row is sent once, by its owner, to its new owner.
pub(crate) fn pieces(rows: u64, old: u32, new: u32) -> Vec<Piece> {
    let mut out = Vec::new();
    for to in 0..new {
        let wanted = block_rows(rows, to, new);
        for from in 0..old {
            let held = block_rows(rows, from, old);
            let start = held.start.max(wanted.start);
            let end = held.end.min(wanted.end);
            if start < end {
                out.push(Piece {
                    from,
                    to,
                    rows: start..end,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> HostName {
        HostName::new(name).unwrap()
    }

    fn blocks() -> Blocks {
        let mut b = Blocks::new();
        b.insert(
            "grid".into(),
            BlockDecl {
                type_name: "[f64]".into(),
                element_bytes: 8,
                rows: 240,
                row_len: 256,
            },
        );
        b
    }

    fn resize(ranks: u32, hosts: &[&str]) -> Resize {
        Resize {
            ranks,
            hosts: hosts.iter().map(|h| host(h)).collect(),
        }
    }

    #[test]
    fn given_rules_then_each_allows_its_widths() {
        let allowed = |rule: SizeRule| (1..=17).filter(|&n| rule.allows(n)).collect::<Vec<_>>();
        assert_eq!(
            allowed(SizeRule::MultipleOf(2)),
            vec![2, 4, 6, 8, 10, 12, 14, 16]
        );
        assert_eq!(allowed(SizeRule::PowerOfTwo), vec![1, 2, 4, 8, 16]);
        assert_eq!(allowed(SizeRule::Square), vec![1, 4, 9, 16]);
        assert_eq!(allowed(SizeRule::Any).len(), 17);
        assert!(!SizeRule::MultipleOf(0).allows(4));
    }

    #[test]
    fn given_limits_then_refusals_name_the_bound_broken() {
        assert!(Malleability::new(0, 4).is_err());
        assert!(Malleability::new(5, 4).is_err());
        let limits = Malleability::new(2, 8)
            .unwrap()
            .with_rule(SizeRule::MultipleOf(2));
        assert_eq!(limits.refusal(4), None);
        assert!(limits.refusal(0).unwrap().contains("0 ranks"));
        assert!(limits
            .refusal(1)
            .unwrap()
            .contains("below the job's minimum of 2"));
        assert!(limits
            .refusal(10)
            .unwrap()
            .contains("above the job's maximum of 8"));
        assert!(limits.refusal(3).unwrap().contains("a multiple of 2"));
    }

    #[test]
    fn given_many_shapes_then_blocks_tile_the_rows_like_heat2d() {
        for rows in 0..40u64 {
            for size in 1..12u32 {
                let mut next = 0;
                for rank in 0..size {
                    let r = block_rows(rows, rank, size);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, rows);
            }
        }
        assert_eq!(block_rows(10, 0, 3), 0..4);
        assert_eq!(block_rows(10, 2, 3), 7..10);
    }

    #[test]
    fn given_pieces_then_every_row_goes_once_from_its_owner_to_its_new_owner() {
        for rows in [7u64, 10, 240] {
            for old in 1..6u32 {
                for new in 1..6u32 {
                    let all = pieces(rows, old, new);
                    let mut covered = vec![0u32; rows as usize];
                    for p in &all {
                        assert!(p.rows.start >= block_rows(rows, p.from, old).start);
                        assert!(p.rows.end <= block_rows(rows, p.from, old).end);
                        assert!(p.rows.start >= block_rows(rows, p.to, new).start);
                        assert!(p.rows.end <= block_rows(rows, p.to, new).end);
                        for r in p.rows.clone() {
                            covered[r as usize] += 1;
                        }
                    }
                    assert!(covered.iter().all(|&c| c == 1), "{rows} {old} {new}");
                }
            }
        }
        // 2 -> 3 ranks of 12 rows: 0..6 | 6..12 becomes 0..4 | 4..8 | 8..12.
        assert_eq!(
            pieces(12, 2, 3),
            vec![
                Piece {
                    from: 0,
                    to: 0,
                    rows: 0..4
                },
                Piece {
                    from: 0,
                    to: 1,
                    rows: 4..6
                },
                Piece {
                    from: 1,
                    to: 1,
                    rows: 6..8
                },
                Piece {
                    from: 1,
                    to: 2,
                    rows: 8..12
                },
            ]
        );
    }

    #[test]
    fn given_a_grow_then_added_processes_go_to_the_hosts_named_in_turn() {
        let hosts = [host("a"), host("b")];
        let plan = resolve(
            resize(5, &["c", "d"]),
            2,
            &hosts,
            &[],
            Some(&Malleability::new(1, 8).unwrap()),
            &blocks(),
        )
        .unwrap();
        assert_eq!(
            plan.added,
            vec![Some(host("c")), Some(host("d")), Some(host("c"))]
        );
        assert!(plan.departing.is_empty());
        let plan = resolve(
            resize(3, &[]),
            2,
            &hosts,
            &[],
            Some(&Malleability::new(1, 8).unwrap()),
            &blocks(),
        )
        .unwrap();
        assert_eq!(plan.added, vec![None]);
        assert_eq!(new_world(2, &[], Some(&plan)), vec![0, 1, 2]);
    }

    #[test]
    fn given_a_shrink_then_ranks_on_the_hosts_given_back_leave_first() {
        let hosts = [host("a"), host("b"), host("a"), host("c")];
        let limits = Malleability::new(1, 8).unwrap();
        // Rank 0's host given back: ranks 0 and 2 leave, old rank 1 becomes rank 0.
        let plan = resolve(resize(2, &["a"]), 4, &hosts, &[], Some(&limits), &blocks()).unwrap();
        assert_eq!(plan.departing, vec![Rank(0), Rank(2)]);
        assert_eq!(new_world(4, &[], Some(&plan)), vec![1, 3]);
        // No host: the highest ranks leave.
        let plan = resolve(resize(3, &[]), 4, &hosts, &[], Some(&limits), &blocks()).unwrap();
        assert_eq!(plan.departing, vec![Rank(3)]);
        // One host with one rank, shrinking by two: that rank and the highest other.
        let plan = resolve(resize(2, &["b"]), 4, &hosts, &[], Some(&limits), &blocks()).unwrap();
        assert_eq!(plan.departing, vec![Rank(1), Rank(3)]);
        // More ranks on the hosts than the shrink removes: refused.
        let refused = resolve(resize(3, &["a"]), 4, &hosts, &[], Some(&limits), &blocks());
        assert!(refused.unwrap_err().contains("2 ranks run on a"));
        let refused = resolve(resize(3, &["z"]), 4, &hosts, &[], Some(&limits), &blocks());
        assert!(refused
            .unwrap_err()
            .contains("no rank of the job runs on z"));
    }

    #[test]
    fn given_bad_resizes_then_each_is_refused_with_its_reason() {
        let hosts = [host("a"), host("b")];
        let limits = Malleability::new(2, 4).unwrap();
        let no_blocks = Blocks::new();
        let err = |r: Result<ResizePlan, String>| r.unwrap_err();
        assert!(
            err(resolve(resize(3, &[]), 2, &hosts, &[], None, &blocks())).contains("not malleable")
        );
        assert!(err(resolve(
            resize(0, &[]),
            2,
            &hosts,
            &[],
            Some(&limits),
            &blocks()
        ))
        .contains("0 ranks"));
        assert!(err(resolve(
            resize(1, &[]),
            2,
            &hosts,
            &[],
            Some(&limits),
            &blocks()
        ))
        .contains("minimum"));
        assert!(err(resolve(
            resize(5, &[]),
            2,
            &hosts,
            &[],
            Some(&limits),
            &blocks()
        ))
        .contains("maximum"));
        assert!(err(resolve(
            resize(3, &[]),
            2,
            &hosts,
            &[],
            Some(&limits),
            &no_blocks
        ))
        .contains("no distributed array"));
        let moves = [Move {
            rank: Rank(1),
            to: None,
        }];
        let limits = Malleability::new(1, 4).unwrap();
        assert!(err(resolve(
            resize(1, &[]),
            2,
            &hosts,
            &moves,
            Some(&limits),
            &blocks()
        ))
        .contains("both migrates and leaves"));
    }

    #[test]
    fn given_a_resize_and_a_move_then_the_replacement_keeps_the_moved_rank() {
        let hosts = [host("a"), host("b")];
        let moves = [Move {
            rank: Rank(0),
            to: Some(host("c")),
        }];
        let plan = resolve(
            resize(3, &["d"]),
            2,
            &hosts,
            &moves,
            Some(&Malleability::new(1, 4).unwrap()),
            &blocks(),
        )
        .unwrap();
        // Parents 0, 1; child 2 replaces rank 0, child 3 is added.
        assert_eq!(new_world(2, &moves, Some(&plan)), vec![2, 1, 3]);
        assert_eq!(new_world(2, &moves, None), vec![2, 1]);
    }
}
